"""Since when each account of a queue waits: the head of its FIFO, for the console's oldest
waiting job per queue and the accounts waiting longest (console.py).

No script keeps a waiting index (the claim would pay for it on every job), so the console
derives this when it asks: each account's FIFO is ordered by seq (priority digit, then when the
job became ready), so its first member is its next job, one ZRANGE of a small sorted set.
"""

from __future__ import annotations

from ..formats.keys import decode_id
from ..formats.records import ReadyMember
from ..shards.fifos import each_fifo
from ..shards.shard import FairStore


def queue_heads(store: FairStore, queue: str) -> list[tuple[float, str]]:
    """Each account with ready jobs in ``queue``, on every shard of ``store``, with since when
    its next job waits (the seq of its FIFO's head): the accounts of the queue's state hashes,
    their FIFOs' heads read in pipelined pages (fifos.py), every shard side by side. An account
    whose FIFO is empty (deferred or paused with nothing ready, or left for the claim to drop)
    has no head."""
    queues = [shard.keys.queue(queue) for shard in store.shards]
    found = []
    for _, encoded, head in each_fifo(store.client, queues,
                                      lambda pipe, key: pipe.zrange(key, 0, 0)):
        since = ReadyMember.parse(head[0]).ready_since if head else None
        if since is not None:
            found.append((since, decode_id(encoded)))
    return found
