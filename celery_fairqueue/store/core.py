"""The fair store: the one door to Redis (door.py) with each of its roles, as one object."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from celery import Celery

from ..settings import FairqueueSettings, settings_for
from .fleet import Fleet
from .jobs import Jobs
from .operator import Operator, paused_accounts
from .records import JobRecord

#: Records read a round trip when counting the leased jobs.
RECORDS_CHUNK = 500


class FairStore(Jobs, Fleet, Operator):
    """Enqueue, claim and settle (Jobs), the worker registry (Fleet) and the operator's
    controls (Operator), over one Redis (StoreDoor): a store of one shard, or one shard of a
    sharded store (sharded.py)."""

    @cached_property
    def shards(self) -> list[FairStore]:
        """The store's shards, each a FairStore: this one alone, unsharded."""
        return [self]

    def shard_for(self, account: str) -> FairStore:
        """The shard that holds everything about ``account``."""
        return self

    def woken(self, channel: str) -> None:
        """A queue's wake channel signalled work (wakeups.py); a sharded store notes which
        shard's."""

    # what a queue holds now, across the roles (the metrics and the console read it)

    def counts(self, queue: str) -> dict[str, int]:
        """Ready, delayed and running job counts of one queue, its accounts deferred by their
        limit (rate, window, concurrency cap) and its accounts an operator paused."""
        qk = self.keys.queue(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(qk.ready)
        pipe.zcard(qk.delayed)
        pipe.hlen(qk.deferrals)
        ready, delayed, deferred = pipe.execute()
        running = sum(n for (name, _), n in self.running().items() if name == queue)
        return {"ready": ready, "delayed": delayed, "running": running,
                "deferred_accounts": deferred,
                "paused_accounts": paused_accounts(self.pauses(), queue)}

    def records(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """The stored records of ``job_ids``, RECORDS_CHUNK a round trip (None for a job no
        longer stored)."""
        found: list[JobRecord | None] = []
        for start in range(0, len(job_ids), RECORDS_CHUNK):
            raws = self.client.hmget(self.keys.records, list(job_ids[start:start + RECORDS_CHUNK]))
            found += [JobRecord.parse(raw) if raw else None for raw in raws]
        return found

    def leased(self) -> list[tuple[str, JobRecord]]:
        """The leased jobs (as many as the workers' slots), by job id, with their records."""
        job_ids: list[str] = self.client.zrange(self.keys.leases, 0, -1)  # type: ignore[assignment]
        return [(job_id, job) for job_id, job in zip(job_ids, self.records(job_ids), strict=True)
                if job is not None and job.leased]

    def running(self) -> dict[tuple[str, str], int]:
        """Leased jobs per (queue, account), counted off the lease set and the jobs' records.
        No script keeps this count, but for the accounts with a concurrency cap
        (QueueKeys.running, for the cap)."""
        counts: dict[tuple[str, str], int] = {}
        for _, job in self.leased():
            counts[job.queue, job.account] = counts.get((job.queue, job.account), 0) + 1
        return counts

    def stats(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(self.keys.stats).items()}


def open_store(settings: FairqueueSettings, *, fail_fast: bool = False) -> FairStore:
    """The fair store of ``settings``: of one shard, or of ``fairqueue_shards`` (sharded.py)."""
    from .sharded import ShardedStore  # sharded.py builds on this module
    kind = ShardedStore if settings.shards > 1 else FairStore
    return kind.from_settings(settings, fail_fast=fail_fast)


def store_for(app: Celery) -> FairStore:
    """The fair store of ``app``, created once per app (redis-py reconnects after fork)."""
    store = getattr(app, "_fairqueue_store", None)
    if store is None:
        store = open_store(settings_for(app))
        app._fairqueue_store = store
    return store

