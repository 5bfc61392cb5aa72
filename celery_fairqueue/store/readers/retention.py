"""What the pruner of recorded jobs asks of the store: which jobs it still holds, and the
count of those it deleted (the ``pruned`` counter of the store's stats)."""

from __future__ import annotations

from collections.abc import Iterable

from ..connection.door import wire
from ..shards.shard import FairStore


def held_jobs(store: FairStore, jobs: Iterable[tuple[str, str]]) -> set[str]:
    """Of ``(account, delivery id)`` pairs, the delivery ids the store still holds: a job
    record (waiting or running) or a dead letter. Each asked of its account's shard alone, one
    pipeline a shard."""
    by_shard: dict[int, tuple[FairStore, list[str]]] = {}
    for account, job_id in jobs:
        shard = store.shard_for(account)
        by_shard.setdefault(id(shard), (shard, []))[1].append(job_id)
    held: set[str] = set()
    for shard, ids in by_shard.values():
        pipe = shard.client.pipeline(transaction=False)
        fields = [wire(job_id) for job_id in ids]
        pipe.hmget(shard.keys.records, fields)
        pipe.hmget(shard.keys.dead, fields)
        records, letters = pipe.execute()
        held.update(job_id for job_id, record, letter in zip(ids, records, letters, strict=True)
                    if record is not None or letter is not None)
    return held


def count_pruned(store: FairStore, rows: int) -> None:
    """Add ``rows`` recorded jobs deleted past their retention to the store's counters."""
    if rows:
        store.client.hincrby(store.keys.stats, "pruned", rows)
