"""Reading a store of S shards (sharded.py) as one: the same reads queued for every shard in
one pipeline, and their replies merged.

The shards share one client, so one pipeline carries every shard's reads in one round trip
(on a Redis Cluster, one per node that holds a shard). At S = 1, ``store.shards`` is
``[store]`` and a reader here sends the same commands, in the same round trips, as it did
before the store had shards. A reader of one account reads its shard alone
(``store.shard_for``); what spans accounts (totals, listings, a lookup by id) reads each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..formats.records import JobRecord
from .shard import FairStore

#: A pipeline of the store's client (StorePipeline or StoreClusterPipeline).
Pipe = Any


def per_shard(store: FairStore, read: Callable[[Pipe, FairStore], object]) -> list[list[Any]]:
    """``read(pipe, shard)`` queues its commands for each shard; one pipeline sends them all.
    The replies, one list per shard in ``store.shards`` order."""
    pipe = store.client.pipeline(transaction=False)
    sizes = []
    for shard in store.shards:
        before = len(pipe)
        read(pipe, shard)
        sizes.append(len(pipe) - before)
    replies = pipe.execute() if len(pipe) else []
    found, start = [], 0
    for size in sizes:
        found.append(replies[start:start + size])
        start += size
    return found


def summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Counters of every shard added up by name."""
    total: dict[str, int] = {}
    for each in counts:
        for name, count in each.items():
            total[name] = total.get(name, 0) + int(count)
    return total


def held_by(store: FairStore, key_of: Callable[[FairStore], str], field: str
            ) -> tuple[FairStore, Any] | None:
    """The shard whose hash ``key_of(shard)`` holds ``field``, with the value, asked of every
    shard at once (an id names no account, so its shard is not known); None: none holds it."""
    for shard, (value,) in zip(store.shards, per_shard(
            store, lambda pipe, shard: pipe.hget(key_of(shard), field)), strict=True):
        if value is not None:
            return shard, value
    return None


def records_at(located: Sequence[tuple[FairStore, str]]) -> list[JobRecord | None]:
    """The records of jobs whose shard is known (``(shard, job id)``), read from each shard
    alone, in the order given."""
    found: list[JobRecord | None] = [None] * len(located)
    by_shard: dict[int, tuple[FairStore, list[int]]] = {}
    for n, (shard, _) in enumerate(located):
        by_shard.setdefault(id(shard), (shard, []))[1].append(n)
    for shard, places in by_shard.values():
        for n, record in zip(places, shard.records([located[n][1] for n in places]),
                             strict=True):
            found[n] = record
    return found
