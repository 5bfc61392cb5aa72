"""Since when each account of a queue waits: the head of its FIFO, for the console's oldest
waiting job per queue and the accounts waiting longest (console.py).

No script keeps a waiting index (the claim would pay for it on every job), so the console
derives this when it asks: each account's FIFO is ordered by seq (priority digit, then when the
job became ready), so its first member is its next job, one ZRANGE of a small sorted set. Where
format 1's set of the queue still holds jobs (before ``fairqueue upgrade``, or what an earlier
producer wrote since), an account's head there counts too: an alert on the oldest waiting job
must not go quiet while a deploy waits for its upgrade.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..formats.keys import QueueKeys, decode_id
from ..formats.records import LegacyMember, ReadyMember
from ..shards.fifos import each_fifo
from ..shards.merged import per_shard
from ..shards.shard import FairStore


def queue_heads(store: FairStore, queue: str) -> list[tuple[float, str]]:
    """Each account with ready jobs in ``queue``, on every shard of ``store``, with since when
    its next job waits (the seq of its FIFO's head): the accounts of the queue's state hashes,
    their FIFOs' heads read in pipelined pages (fifos.py), every shard side by side. An account
    whose FIFO is empty (deferred or paused with nothing ready, or left for the claim to drop)
    has no head."""
    queues = [shard.keys.queue(queue) for shard in store.shards]
    heads = dict(_sinces(each_fifo(store.client, queues,
                                   lambda pipe, qk, account: pipe.zrange(qk.fifo(account), 0, 0)),
                         ReadyMember.parse))
    legacy = [qk for qk, (held,) in zip(queues, per_shard(
        store, lambda pipe, shard: pipe.exists(shard.keys.queue(queue).ready)), strict=True)
        if held]
    if legacy:
        for account, since in _sinces(each_fifo(
                store.client, legacy, lambda pipe, qk, account: pipe.zrangebylex(
                    qk.ready, *LegacyMember.account_range(account), 0, 1)),
                lambda raw: LegacyMember.parse(raw).ready):
            heads[account] = min(since, heads.get(account, since))
    return [(since, decode_id(account)) for account, since in heads.items()]


def _sinces(found: Iterator[tuple[int, str, Any]], parse: Callable[[str], ReadyMember]
            ) -> Iterator[tuple[str, float]]:
    """(encoded account, since when its head waits) of each head ``each_fifo`` read."""
    for _, encoded, head in found:
        since = parse(head[0]).ready_since if head else None
        if since is not None:
            yield encoded, since


def read_legacy(pipe: Any, qk: QueueKeys, encoded: str, limit: int) -> None:
    """Queue two reads of an (encoded) account's jobs in format 1's set of a queue
    (QueueKeys.ready, until ``fairqueue upgrade`` empties it): how many, and the first
    ``limit``. :func:`with_legacy` adds their replies to what its FIFO holds."""
    low, high = LegacyMember.account_range(encoded)
    pipe.zlexcount(qk.ready, low, high)
    pipe.zrangebylex(qk.ready, low, high, 0, limit)


def with_legacy(count: int | None, members: list[str], legacy: Sequence[Any], limit: int
                ) -> tuple[int, list[str]]:
    """An account's ready jobs in a queue, counted and its first ``limit`` members in FIFO
    order (ReadyMember): its FIFO's with format 1's (``legacy``, :func:`read_legacy`'s two
    replies) added."""
    legacy_count, legacy_members = legacy
    members = members + [LegacyMember.parse(raw).ready.build() for raw in legacy_members]
    return int(count or 0) + int(legacy_count), sorted(members)[:limit]
