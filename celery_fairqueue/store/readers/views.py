"""Read-only views of the fair store for operators: queue totals, deferred and paused
accounts, accounts.

Nothing here writes to Redis, and nothing reads a per-account structure whole. Totals come from
O(1) commands (ZCARD, HLEN), but for a queue's ready jobs: they lie in one FIFO per account, so
their total is its accounts' FIFO lengths added up (shards/fifos.py), a pipelined round trip
per page of the queue's state hash (no script keeps a count: every enqueue and claim would pay
for it). Per-account data comes from HSCAN with a bound, so listing the accounts of a store
with a million costs the same as of one with ten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from ...envelope import Envelope, MalformedEnvelopeError
from ...limits import AccountLimit
from ...states import STATE_CODES, AccountState, DeferReason, ready_and_deferred
from ..formats.keys import decode_id, encode_id
from ..formats.records import Deferral, JobRecord, LegacyMember, SlowDownHold
from ..shards.fifos import ready_jobs
from ..shards.merged import per_shard
from ..shards.opening import store_for
from ..shards.shard import FairStore
from ..writers.operator import OperatorPause, paused_accounts
from .console import ConsoleReader, WorkerInfo


def state_of(code: str | None) -> tuple[AccountState, DeferReason | None]:
    """An account's state from its code in a queue's state hash (states.STATE_CODES)."""
    return STATE_CODES.get(code or "", (AccountState.IDLE, None))



@dataclass(frozen=True)
class QueueStatus:
    queue: str
    ready: int
    delayed: int
    running: int
    accounts_ready: int
    accounts_deferred: int  # deferred by their limit (rate, window, concurrency cap)
    oldest_waiting: float | None = None  # since when its oldest waiting job waits
    workers: int = 0  # live workers that consume it
    accounts_paused: int = 0  # accounts an operator paused in it (or everywhere)


@dataclass(frozen=True)
class DeferredAccount:
    queue: str
    account: str
    until: float  # Redis server time at which its limit lets it run again
    reason: DeferReason | None = None  # as the claim recorded it


@dataclass(frozen=True)
class StoreStatus:
    queues: list[QueueStatus]
    deferred: list[DeferredAccount]
    dead_letters: int
    leased: int
    counters: dict[str, int]
    server_time: float
    workers: list[WorkerInfo] = field(default_factory=list)  # live workers
    pauses: list[OperatorPause] = field(default_factory=list)  # operators' pauses
    default_limit: AccountLimit | None = None  # the store's (None: no worker set one yet)
    queue_limits: list[tuple[str, AccountLimit]] = field(default_factory=list)  # shared ones
    slow_downs: list[SlowDownHold] = field(default_factory=list)  # a provider's, held now
    layout_format: str = "2"  # "1", "1>2": an earlier version's, being or to be upgraded

    def unconsumed(self) -> list[QueueStatus]:
        """Queues with ready jobs that no live worker consumes."""
        return [q for q in self.queues if q.ready and not q.workers]


@dataclass(frozen=True)
class AccountRow:
    queue: str
    account: str
    ready: int
    running: int
    state: AccountState
    deferred_until: float | None
    limit: AccountLimit | None  # its own limit; None when the default applies
    reason: DeferReason | None = None  # why the claim deferred it (state deferred)
    deferred: int = 0  # ready jobs its limit defers (not in ``ready``), as the one-account view
    delayed: int = 0  # jobs waiting for their time (eta, countdown, retry backoff), due or not

    @property
    def has_jobs(self) -> bool:
        return bool(self.ready or self.deferred or self.delayed or self.running)


@dataclass(frozen=True)
class AccountPage:
    rows: list[AccountRow]
    accounts_ready: int  # per the store's count, over all queues asked about
    complete: bool  # False when the bound cut the listing short


@dataclass(frozen=True)
class ScheduledJob:
    queue: str
    job_id: str
    due: float  # Redis server time at which it becomes ready
    account: str | None
    task: str | None
    envelope: str | None = field(default=None, repr=False)  # its Celery message, as stored


def deferral_reason(raw: str | bytes | None) -> DeferReason | None:
    """The reason of a deferral the claim recorded (None: none recorded, or unknown)."""
    if not raw:
        return None
    try:
        return DeferReason(Deferral.parse(raw).reason)
    except ValueError:
        return None


def _task_name(envelope: str | None) -> str | None:
    try:
        return str(Envelope.from_json(envelope).task_name) if envelope else None
    except MalformedEnvelopeError:
        return None


class StoreInspector:
    """Answers the operator's questions about one app's fair store: totals, accounts, scheduled
    jobs; ``console`` (a :class:`~celery_fairqueue.store.readers.console.ConsoleReader`) answers the
    console's live questions (why an account waits, live workers, an account's jobs)."""

    def __init__(self, app: Celery) -> None:
        self.store = store_for(app)
        self.client = self.store.client
        self.keys = self.store.keys
        self.console = ConsoleReader(self.store)

    def queues(self, names: list[str] | None = None) -> list[str]:
        return self.console.queues(names)

    def status(self, queues: list[str] | None = None, deferred_limit: int = 10) -> StoreStatus:
        """Totals per queue with their oldest waiting job and live workers, the accounts
        deferred by their limit (soonest to run first), operators' pauses, the provider's
        slow-downs held now, DLQ, counters;
        every shard's, added up."""
        rows: list[QueueStatus] = []
        deferred: list[DeferredAccount] = []
        pauses = self.store.pauses()
        names = self.queues(queues)
        oldest = self.console.queue_oldest_waiting(names)
        running_of = self.store.running()
        workers = self.console.workers()
        consumers = self.console.consumers(workers)
        for queue in names:
            rows.append(self._queue_status(queue, deferred_limit, running_of, deferred,
                                           oldest[queue], consumers.get(queue, 0),
                                           paused_accounts(pauses, queue)))
        totals = [sum(column) for column in zip(*per_shard(self.store, lambda pipe, shard: (
            pipe.zcard(shard.keys.dead_index), pipe.zcard(shard.keys.leases))), strict=True)]
        dead, leased = totals
        return StoreStatus(rows, deferred, dead, leased, self.store.stats(),
                           self.store.server_time(), workers=workers, pauses=pauses,
                           default_limit=self.store.default_limit(),
                           queue_limits=sorted(self.store.queue_limits()),
                           slow_downs=self.store.slow_downs(),
                           layout_format=self._layout_format())

    def _layout_format(self) -> str:
        """The store's layout format as its home records it (Keys.layout_format; none yet: no
        process of this version used it). Read, not asked with read_layout.lua, which would
        have a reshard or an upgrade wait for this process as for a worker."""
        return str(self.client.get(self.keys.layout_format) or "2")

    def _queue_status(self, queue: str, deferred_limit: int,
                      running_of: dict[tuple[str, str], int], deferred: list[DeferredAccount],
                      oldest: float | None, workers: int, paused: int) -> QueueStatus:
        """One queue's totals over the shards; its ``deferred_limit`` accounts deferred
        soonest to run are added to ``deferred``."""
        def counts(pipe: Any, shard: FairStore) -> None:
            qk = shard.keys.queue(queue)
            pipe.zcard(qk.delayed)
            pipe.hlen(qk.state)  # the accounts with ready jobs: each has a state
            pipe.hlen(qk.deferrals)  # every deferral the claim recorded, capped ones too
            pipe.zrange(qk.deferred, 0, deferred_limit - 1, withscores=True)
            pipe.zcard(qk.ready)  # format 1's set, until ``fairqueue upgrade`` empties it

        replies = per_shard(self.store, counts)
        delayed, accounts_ready, accounts_deferred = (
            sum(reply[n] for reply in replies) for n in range(3))
        soonest = [reply[3] for reply in replies]
        ready = sum(reply[4] for reply in replies) + ready_jobs(
            self.client, [shard.keys.queue(queue) for shard in self.store.shards])

        def reasons(pipe: Any, shard: FairStore) -> None:
            chunk = soonest[self.store.shards.index(shard)]
            if chunk:
                pipe.hmget(shard.keys.queue(queue).deferrals, [a for a, _ in chunk])

        found = [DeferredAccount(queue, decode_id(a), float(t), deferral_reason(r))
                 for chunk, answer in zip(soonest, per_shard(self.store, reasons), strict=True)
                 for (a, t), r in zip(chunk, answer[0] if answer else [], strict=True)]
        deferred += sorted(found, key=lambda d: d.until)[:deferred_limit]
        running = sum(n for (name, _), n in running_of.items() if name == queue)
        return QueueStatus(queue, ready, delayed, running, accounts_ready, accounts_deferred,
                           oldest, workers, paused)

    def accounts(self, queues: list[str] | None = None, account: str | None = None,
                 limit: int = 50) -> AccountPage:
        """Ready, deferred, delayed and running counts, state and limit per account: one
        account (read on its shard), or up to ``limit`` of those with any job in the store,
        most ready first. The accounts come from the queue's per-account hashes (state,
        running, delayed), read with a bounded HSCAN, shard after shard: never a scan of the
        jobs; ready jobs are counted off the account's FIFO (its ZCARD)."""
        rows: list[AccountRow] = []
        total = 0
        complete = True
        shards = [self.store.shard_for(account)] if account is not None else self.store.shards
        running = [shard.running() for shard in shards]
        for queue in self.queues(queues):
            total += self._accounts_ready(queue)
            for shard, running_of in zip(shards, running, strict=True):
                qk = shard.keys.queue(queue)
                if account is not None:
                    encoded = [encode_id(account)]
                else:
                    encoded, scanned_all = self._scan_fields([qk.state, qk.ndelayed],
                                                             limit - len(rows))
                    complete = complete and scanned_all
                    encoded += [encode_id(a) for (q, a), _ in running_of.items()
                                if q == queue and encode_id(a) not in encoded
                                ][:limit - len(rows)]
                rows += [row for row in self._rows(shard, queue, encoded, running_of)
                         if account is not None or row.has_jobs]
        rows.sort(key=lambda r: (-r.ready, -r.deferred, -r.running, -r.delayed, r.account,
                                 r.queue))
        return AccountPage(rows, total, complete)

    def _accounts_ready(self, queue: str) -> int:
        """The accounts with ready jobs in ``queue``, on every shard (each has a state)."""
        return sum(count for count, in per_shard(
            self.store, lambda pipe, shard: pipe.hlen(shard.keys.queue(queue).state)))

    def _rows(self, shard: FairStore, queue: str, encoded: list[str],
              running_of: dict[tuple[str, str], int]) -> list[AccountRow]:
        if not encoded:
            return []
        qk = shard.keys.queue(queue)
        pipe = self.client.pipeline(transaction=False)
        for name in encoded:
            pipe.zcard(qk.fifo(name))
            pipe.hget(qk.state, name)
            pipe.zscore(qk.deferred, name)
            pipe.hget(shard.keys.limit_config, name)
            pipe.hget(qk.deferrals, name)
            pipe.hget(qk.ndelayed, name)
            pipe.zlexcount(qk.ready, *LegacyMember.account_range(name))  # format 1's set
        answers = pipe.execute()
        rows = []
        for n, name in enumerate(encoded):
            nready, code, until, limit, deferral, delayed, legacy = answers[7 * n:7 * n + 7]
            running = running_of.get((queue, decode_id(name)), 0)
            state, reason = state_of(code)
            ready, deferred = ready_and_deferred(int(nready or 0) + legacy, code)
            rows.append(AccountRow(
                queue=queue, account=decode_id(name), ready=ready, deferred=deferred,
                delayed=int(delayed or 0), running=int(running or 0), state=state,
                deferred_until=float(until) if until is not None else None,
                limit=AccountLimit.from_json(limit) if limit else None,
                reason=(deferral_reason(deferral) or reason)
                if state is AccountState.DEFERRED else None))
        return rows

    def _scan_fields(self, keys: list[str], limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` distinct field names of the hashes ``keys``; and whether that was all."""
        found: dict[str, None] = {}
        for key in keys:
            for name, _value in self.client.hscan_iter(key, count=min(max(limit, 10), 1000)):
                if len(found) >= limit:
                    return list(found), False
                found[name] = None
        return list(found), True

    def scheduled(self, queues: list[str] | None = None, limit: int = 50) -> list[ScheduledJob]:
        """Jobs waiting for their time (eta, countdown, a retry's backoff), soonest first: what
        ``celery inspect scheduled`` shows for plain tasks, which keep them in worker memory.
        The ``limit`` soonest of each shard, merged."""
        found = [job for queue in self.queues(queues) for job in self._scheduled(queue, limit)]
        return sorted(found, key=lambda job: job.due)[:limit]

    def _scheduled(self, queue: str, limit: int) -> list[ScheduledJob]:
        """The ``limit`` soonest delayed jobs of ``queue`` on each shard."""
        due = per_shard(self.store, lambda pipe, shard: pipe.zrange(
            shard.keys.queue(queue).delayed, 0, limit - 1, withscores=True))

        def records(pipe: Any, shard: FairStore) -> None:
            ids = [job_id for job_id, _ in due[self.store.shards.index(shard)][0]]
            if ids:
                pipe.hmget(shard.keys.records, ids)

        found = []
        for (jobs,), raws in zip(due, per_shard(self.store, records), strict=True):
            for (job_id, when), raw in zip(jobs, raws[0] if raws else [], strict=True):
                job = JobRecord.parse(raw) if raw else None
                envelope = job.envelope if job else None
                found.append(ScheduledJob(queue, job_id, float(when),
                                          job.account if job else None, _task_name(envelope),
                                          envelope))
        return found
