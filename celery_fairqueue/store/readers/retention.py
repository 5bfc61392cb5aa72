"""What the pruner of recorded jobs asks of the store: which jobs it still holds, and the
count of those it deleted (the ``pruned`` counter of the store's stats)."""

from __future__ import annotations

from collections.abc import Iterable

from ..connection.door import wire
from ..formats.keys import encode_id
from ..formats.records import Marker
from ..shards.shard import FairStore


def held_jobs(store: FairStore, jobs: Iterable[tuple[str, str, str | None]]) -> set[str]:
    """Of ``(account, delivery id, business key)`` rows, the delivery ids of those the store
    still holds under any delivery: the delivery itself (a job record, waiting or running, or
    a dead letter), or the job its business key's marker names (a replay or a retry the
    recorder has not caught up on, waiting, running or dead). Each asked of its account's
    shard alone: an MGET of the markers, then a pipeline, a shard."""
    by_shard: dict[int, tuple[FairStore, list[tuple[str, str | None]]]] = {}
    for account, job_id, job_key in jobs:
        shard = store.shard_for(account)
        marker_key = _marker_key(shard, job_key)
        by_shard.setdefault(id(shard), (shard, []))[1].append((job_id, marker_key))
    held: set[str] = set()
    for shard, rows in by_shard.values():
        keyed = [marker_key for _, marker_key in rows if marker_key is not None]
        markers = iter(shard.client.mget(keyed) if keyed else [])  # one slot: the shard's tag
        # each row's own delivery, then the one its key's marker names (when another)
        asked = []
        for job_id, marker_key in rows:
            marker = next(markers) if marker_key is not None else None
            asked.append((job_id, [job_id, *_holder(marker, job_id)]))
        fields = [wire(candidate) for _, candidates in asked for candidate in candidates]
        pipe = shard.client.pipeline(transaction=False)
        pipe.hmget(shard.keys.records, fields)
        pipe.hmget(shard.keys.dead, fields)
        records, letters = pipe.execute()
        at = 0
        for job_id, candidates in asked:
            end = at + len(candidates)
            if any(raw is not None for raw in (*records[at:end], *letters[at:end])):
                held.add(job_id)
            at = end
    return held


def _marker_key(shard: FairStore, job_key: str | None) -> str | None:
    """The key of a business key's marker on ``shard``; None for a row without one."""
    if not job_key:
        return None
    try:
        return shard.keys.job_key(encode_id(job_key))
    except ValueError:  # not a key the store could hold
        return None


def _holder(raw: str | bytes | None, job_id: str) -> list[str]:
    """The delivery a marker names, unless it is ``job_id`` (asked already) or none."""
    marker = Marker.read(raw)
    return [marker.job_id] if marker is not None and marker.job_id not in ("", job_id) else []


def count_pruned(store: FairStore, rows: int) -> None:
    """Add ``rows`` recorded jobs deleted past their retention to the store's counters."""
    if rows:
        store.client.hincrby(store.keys.stats, "pruned", rows)
