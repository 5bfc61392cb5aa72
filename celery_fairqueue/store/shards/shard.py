"""The fair store: the one door to Redis (door.py) with each of its roles, as one object."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from ...protocol import NO_JOB_KEY
from ...settings import FairqueueSettings
from ..connection.connect import AnyClient
from ..connection.translate import operation
from ..formats.keys import Keys, encode_id, queue_limit_field
from ..formats.records import JobRecord, SlowDownHold
from ..writers.fleet import Fleet
from ..writers.jobs import Claim, EnqueueOutcomeOrError, EnqueueResult, Jobs, slow_down_args
from ..writers.leases import Lease
from ..writers.operator import Operator, paused_accounts
from ..writers.slow_downs import SlowDowns
from .fifos import ready_jobs

#: Records read a round trip when counting the leased jobs.
RECORDS_CHUNK = 500
#: How long a producer goes on with its count of the fleet (FairStore.fleet_size).
FLEET_SIZE_SECONDS = 10.0
#: The counters of the jobs that left the shard, each counting its HDEL of a record: acked by
#: their worker, cancelled, dropped past Celery's expires, dead-lettered by a claim or a
#: reject, moved to another shard by a reshard (less those it moved in: a job counts once in
#: the store, on the shard it was stored on, whichever holds it when the counts are read).
LEFT_STORE = ("acked", "cancelled", "expired", "poisoned", "moved_out")


class FairStore(Jobs, Fleet, Operator, SlowDowns):
    """Enqueue, claim and settle (Jobs), the worker registry (Fleet), the operator's
    controls (Operator) and a provider's slow-downs (SlowDowns), over one Redis (StoreDoor): a
    store of one shard, or one shard of a sharded store (sharded.py)."""

    def __init__(self, client: AnyClient, keys: Keys, settings: FairqueueSettings,
                 home: FairStore | None = None, sharded: bool | None = None) -> None:
        super().__init__(client, keys, settings,
                         sharded=settings.shards > 1 if sharded is None else sharded)
        self.home = home or self  # the store's home shard: one check of its shards for all
        self.shard_move: tuple[int, int] | None = None  # (S, N) while a reshard runs
        self._fleet_size, self._fleet_size_at = 1, float("-inf")

    @cached_property
    def shards(self) -> list[FairStore]:
        """The store's shards, each a FairStore: this one alone, unsharded."""
        return [self]

    def shard_for(self, account: str) -> FairStore:
        """The shard that holds everything about ``account``."""
        return self

    def enqueue(self, *, account: str, **job: Any) -> EnqueueResult:
        """Store a job (Jobs.enqueue), once the store's shards are as this process expects; a
        retry's "slow down" of its queue is held on every other shard too (slowdown.py)."""
        with operation("enqueue"):  # a failure to read the store's shards is the enqueue's
            self.check_shards()
        result = super().enqueue(account=account, **job)
        ask = job.get("slow_down")
        if ask and ask[0] == "queue":
            _, seconds, cause, task_id = slow_down_args(job["job_id"], ask)
            for shard in self.home.shards:
                if shard.keys.tag != self.keys.tag:
                    shard.hold_queue_here(job["queue"], float(seconds), cause, task_id)
        return result

    def slow_downs(self) -> list[SlowDownHold]:
        """The provider's slow-downs held now, soonest to end first, of every shard (a queue's,
        which each shard holds, once: its latest end)."""
        found: dict[tuple[str | None, str], SlowDownHold] = {}
        for shard in self.shards:
            for hold in SlowDowns.slow_downs_here(shard):
                kept = found.get((hold.account, hold.queue))
                if kept is None or hold.until > kept.until:
                    found[(hold.account, hold.queue)] = hold
        return sorted(found.values(), key=lambda hold: (hold.until, hold.queue))

    def lift_slow_down(self, account: str | None, queue: str) -> bool:
        """An operator ends the slow-down of ``account`` in ``queue`` (on its shard), or of
        ``queue`` (on every shard), now; False when none was held."""
        self.check_shards()
        if account is not None:
            return self.shard_for(account).lift_slow_down_here(account, queue)
        return any([SlowDowns.lift_slow_down_here(shard, None, queue) for shard in self.shards])

    def enqueue_many(self, jobs: Sequence[dict[str, Any]]) -> list[EnqueueOutcomeOrError]:
        """Store jobs in pipelined batches (Jobs.enqueue_many), once the store's shards are as
        this process expects."""
        with operation("enqueue"):
            self.check_shards()
        return super().enqueue_many(jobs)

    def fleet_size(self) -> int:
        """How many workers the home's registry holds (live ones, and those not yet swept),
        read at most every FLEET_SIZE_SECONDS: the most idle workers a bulk enqueue rings for
        (each job of a batch one more, up to this)."""
        home = self.home
        if home is not self:
            return home.fleet_size()
        now = time.monotonic()
        if now - self._fleet_size_at > FLEET_SIZE_SECONDS:
            with operation("enqueue"):
                self._fleet_size = int(self.client.zcard(self.keys.workers))
            self._fleet_size_at = now
        return max(1, self._fleet_size)

    def doorbells(self, queues: Sequence[str], keeps_time: bool, bells: bool = True
                  ) -> list[str]:
        """The lists a worker of ``queues`` blocks on, on this shard: their doorbells while it
        has a free slot (``bells``), their time keeper's calls while it keeps their time
        (worker/doorbell.py)."""
        keys = [self.keys.queue(q).bell for q in queues] if bells else []
        return keys + ([self.keys.queue(q).clock for q in queues] if keeps_time else [])

    def shard_at(self, n: int) -> FairStore:
        """Shard ``n`` of the store, even one that a reshard made after this process counted
        its shards (sharded.py grows its list)."""
        return self if n == 0 else FairStore(self.client, Keys(self.keys.prefix, n),
                                             self.settings, home=self, sharded=True)

    def ack(self, lease: Lease) -> bool:
        owned = super().ack(lease)
        if not owned:
            self._forward_done([lease])
        return owned

    def claim(self, queues: Sequence[str], want: int, token: str, default_limit: str,
              first: int = 0, acks: Sequence[Lease] = (), *, keeps_time: bool = True,
              tick: bool = False, grants: Sequence[int | None] = ()) -> Claim:
        claim = super().claim(queues, want, token, default_limit, first, acks,
                              keeps_time=keeps_time, tick=tick, grants=grants)
        if claim.lost and acks:
            lost = set(claim.lost)
            self._forward_done([lease for lease in acks if lease.job_id in lost])
        return claim

    def _forward_done(self, leases: Sequence[Lease]) -> None:
        """Successes acked here after their lease was lost, of accounts a reshard moved away
        since: their business keys dedupe on the account's new shard now, where another run
        of the job may wait with the key only started, so the done marker goes there too (a
        done marker there is kept as it is). Nothing is asked while no such success comes."""
        done = [lease for lease in leases if lease.success and lease.stored_key != NO_JOB_KEY]
        if not done:
            return
        moved = self.client.hmget(self.keys.moved, [encode_id(lease.account) for lease in done])
        for lease, where in zip(done, moved, strict=True):
            if where and str(where).startswith("m "):
                self.home.shard_at(int(str(where)[2:])).mark_done_unless_done(
                    lease.stored_key, lease.job_id)

    def rescan(self) -> None:
        """A worker's poll: a sharded store asks every shard at its next claim."""

    def woken(self, key: str) -> None:
        """A queue's doorbell rang (worker/doorbell.py); a sharded store notes which shard's."""

    # what a queue holds now, across the roles (the metrics and the console read it)

    def quota_readings(self, queues: Sequence[str]) -> dict[str, tuple[str | None, int]]:
        """Each queue's shared bucket (raw) and its jobs running under its shared limit, as
        this store keeps them: the claim's count of a store of one shard, and at a sharded
        store's home (which a ShardedStore is) the workers' reports too (quota.py)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.hget(self.keys.buckets, queue_limit_field(queue))
            pipe.hget(self.keys.queue(queue).running, "*")
            pipe.hget(self.keys.quotas, encode_id(queue))
        replies = pipe.execute()
        return {queue: (replies[3 * n], int(replies[3 * n + 1] or 0) + int(
            replies[3 * n + 2] or 0)) for n, queue in enumerate(queues)}

    def counts(self, queue: str) -> dict[str, int]:
        """Ready, delayed and running job counts of one queue, its accounts deferred by their
        limit (rate, window, concurrency cap) and its accounts an operator paused. The ready
        jobs are its accounts' FIFOs, added up (fifos.py): no key counts them; and those
        format 1's set still holds (QueueKeys.ready, before ``fairqueue upgrade``)."""
        qk = self.keys.queue(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(qk.delayed)
        pipe.hlen(qk.deferrals)
        pipe.zcard(qk.ready)
        delayed, deferred, legacy = pipe.execute()
        ready = ready_jobs(self.client, [qk]) + legacy
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
        """The store's counters (Keys.stats). ``enqueued``, the deliveries ever stored, is
        not counted at each enqueue (a command a job saved): it is the jobs held now and those
        that left the store (LEFT_STORE), read at once (stats.lua)."""
        held, counters = self._run("stats", [], [])
        stats = {str(k): int(v) for k, v in zip(counters[::2], counters[1::2], strict=True)}
        enqueued = int(held) + sum(stats.get(name, 0) for name in LEFT_STORE) - \
            stats.get("moved_in", 0)
        if enqueued:  # like a counter, absent until it counts one
            stats["enqueued"] = enqueued
        return stats

    def format_ready(self) -> bool:
        """Whether a worker may claim: the store's layout is at format 2 (sharded.py reads it;
        a FairStore of its own is a store of this version)."""
        return self.home is self or self.home.format_ready()

    def check_shards(self) -> None:
        """A shard of a routing store (sharded.py) asks its home, which reads the store's
        layout once for all; a FairStore of its own is the store of one shard."""
        if self.home is not self:
            self.home.check_shards()
