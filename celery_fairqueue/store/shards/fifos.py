"""Reading a queue's ready jobs as a whole, when they lie in one FIFO per account.

Each account keeps its ready jobs of a queue in a sorted set of its own (``QueueKeys.fifo``), so
no key holds the queue's ready jobs together and nothing counts them: the enqueue and the claim
touch one small FIFO and pay for no queue-wide index. What asks about the whole queue (its
total, since when each account waits) finds the accounts among the fields of the queue's state
hash (an account with ready jobs always has a state; one with a state may have none, and its
FIFO then reads as empty) and asks each one's FIFO, pipelined: a round trip carries a page of
the hash and the reads of the page before, never one account's alone. A queue's keys share its
shard's hash tag, so each FIFO is read on the node that holds its state hash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..connection.connect import AnyClient
from ..formats.keys import QueueKeys

#: Fields of a queue's state hash asked for a round trip (HSCAN's COUNT): about as many FIFOs
#: are read the round trip after.
FIFO_PAGE = 1000

#: A pipeline of the store's client (StorePipeline or StoreClusterPipeline).
Pipe = Any


def each_fifo(client: AnyClient, queues: Sequence[QueueKeys],
              read: Callable[[Pipe, QueueKeys, str], object]) -> Iterator[tuple[int, str, Any]]:
    """``read(pipe, queue's keys, encoded account)`` queues one command (a read of its FIFO,
    ``QueueKeys.fifo``) for each account with a state in each of ``queues`` (one queue's keys
    on every shard of a store, all on ``client``); yields
    ``(index in queues, encoded account, reply)``. Each round trip carries, for every hash not
    read through, its next HSCAN page, and the reads of the accounts found the round trip
    before: the shards are read side by side, in about as many round trips as the largest hash
    has pages, plus one. An account that HSCAN returns twice (its hash resized between pages)
    is read once, so a sum over the replies counts each FIFO once."""
    cursors: dict[int, int] = dict.fromkeys(range(len(queues)), 0)  # hashes not read through
    seen: list[set[str]] = [set() for _ in queues]
    found: list[list[str]] = [[] for _ in queues]  # accounts whose FIFO is read next
    while cursors or any(found):
        pipe = client.pipeline(transaction=False)
        for n, qk in enumerate(queues):
            if n in cursors:
                pipe.hscan(qk.state, cursors[n], count=FIFO_PAGE)
            for account in found[n]:
                read(pipe, qk, account)
        replies = iter(pipe.execute())
        asked, found = found, [[] for _ in queues]
        for n in range(len(queues)):
            if n in cursors:
                cursor, fields = next(replies)
                found[n] = [name for name in fields if name not in seen[n]]
                seen[n].update(found[n])
                if int(cursor) == 0:
                    del cursors[n]
                else:
                    cursors[n] = int(cursor)
            for account in asked[n]:
                yield n, account, next(replies)


def ready_jobs(client: AnyClient, queues: Sequence[QueueKeys]) -> int:
    """The ready jobs of ``queues`` (as in :func:`each_fifo`) together: the lengths of their
    accounts' FIFOs (ZCARD), added up."""
    return sum(int(count) for _, _, count in each_fifo(
        client, queues, lambda pipe, qk, account: pipe.zcard(qk.fifo(account))))
