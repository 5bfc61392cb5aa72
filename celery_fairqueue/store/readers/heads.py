"""Since when each account of a queue waits: the head of its FIFO in the ready set, for the
console's oldest waiting job per queue and the accounts waiting longest (console.py).

No script keeps a waiting index (the claim would pay for it on every job), so the console
derives this when it asks, one shard at a time.
"""

from __future__ import annotations

from collections.abc import Container

from ..formats.keys import decode_id
from ..formats.records import ReadyMember
from ..shards.shard import FairStore

#: Accounts whose head is read a round trip, when read account by account.
HEADS_CHUNK = 1000
#: Ready members read a round trip when walking a queue's ready set for its accounts' heads;
#: after WALK_PATIENCE pages that yielded fewer than WALK_YIELD accounts each on average, the
#: rest are read account by account.
WALK_PAGE = 1000
WALK_PATIENCE = 20
WALK_YIELD = 20


def shard_heads(shard: FairStore, queue: str) -> list[tuple[float, str]]:
    """Each account with ready jobs in ``queue`` on ``shard``, with since when its next job
    waits (the seq of its FIFO's head). It walks the ready set in lex order, WALK_PAGE members
    a round trip, each page starting at an account's head (the page before ends by jumping
    past its last account's range), so a page of small accounts yields hundreds of heads and
    a large account costs one page. Should the pages yield few accounts each (many large
    accounts), the accounts not yet seen are read one lex range each (:func:`listed_heads`)."""
    ready = shard.keys.queue(queue).ready
    heads: dict[str, float | None] = {}  # encoded account -> since
    low, pages = "-", 0
    while True:
        page: list[str] = shard.client.zrangebylex(  # type: ignore[assignment]
            ready, low, "+", 0, WALK_PAGE)
        pages += 1
        encoded = ""
        for member in page:
            encoded = ReadyMember.encoded_account(member)
            if encoded not in heads:
                heads[encoded] = ReadyMember.parse(member).ready_since
        if len(page) < WALK_PAGE:
            break
        if pages >= WALK_PATIENCE and pages * WALK_YIELD > len(heads):
            heads.update(listed_heads(shard, queue, heads))
            break
        low = ReadyMember.encoded_range(encoded)[1]  # past the last account's jobs
    return [(since, decode_id(encoded)) for encoded, since in heads.items()
            if since is not None]


def listed_heads(shard: FairStore, queue: str, known: Container[str]
                 ) -> dict[str, float | None]:
    """The heads of the accounts of ``queue`` on ``shard`` (those with a state) not
    ``known``, by encoded account: one lex range each, HEADS_CHUNK a round trip."""
    client, qk = shard.client, shard.keys.queue(queue)
    accounts = [name for name, _ in client.hscan_iter(qk.state, count=HEADS_CHUNK)
                if name not in known]
    heads: dict[str, float | None] = {}
    for start in range(0, len(accounts), HEADS_CHUNK):
        chunk = accounts[start:start + HEADS_CHUNK]
        pipe = client.pipeline(transaction=False)
        for encoded in chunk:
            pipe.zrangebylex(qk.ready, *ReadyMember.encoded_range(encoded), 0, 1)
        for encoded, head in zip(chunk, pipe.execute(), strict=True):
            if head:
                heads[encoded] = ReadyMember.parse(head[0]).ready_since
    return heads
