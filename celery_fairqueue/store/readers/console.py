"""The support console's live views of the fair store: why an account waits and until when
(facts: celery_fairqueue.reasons puts them in words); the live workers; the oldest waiting job
per queue; an account's jobs as the store holds them now.

Read-only, like views.py, and bounded the same way: per-account facts come from hash fields
and sorted-set ranges, never from a scan of a whole queue; where a listing is bounded (an
account's due delayed jobs, its running jobs) the bound is named below.

"Waiting" means ready (in the rotation or deferred by a limit or an operator's pause) or
delayed and due; a job waits from the time it became ready (for a delayed job, its due time),
so a countdown does not count as waiting and a future eta is not waiting at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...envelope import Envelope, MalformedEnvelopeError
from ...limits import AccountLimit
from ...protocol import normalize_id, task_id_of
from ...states import DeferReason, Reason, ready_and_deferred
from ..formats.keys import decode_id, encode_id, in_queue_field, queue_limit_field, slow_down_field
from ..formats.records import Bucket, Deferral, ReadyMember, SlowDownHold, WorkerEntry
from ..shards.merged import per_shard, records_at
from ..shards.shard import FairStore
from ..writers.operator import OperatorPause, parse_pause, pause_field
from .heads import queue_heads, read_legacy, with_legacy

#: Most of an account's ready jobs read to find its oldest (FIFO order within a priority: the
#: oldest is among the first unless priorities reorder them).
OLDEST_SCAN = 1000
#: Most due delayed jobs (of all accounts) looked through for one account's, per queue; due
#: jobs are made ready at every claim, so only a queue no worker claims holds many.
DUE_SCAN = 2000

#: Every reason an account's next job does not run now (states.Reason), in its order.
REASONS: tuple[Reason, ...] = tuple(Reason)


@dataclass(frozen=True)
class QueueState:
    """One account in one queue, now: what it has, and why it does or does not run."""

    queue: str
    account: str
    reason: Reason  # one of REASONS (a str)
    until: float | None  # Redis server time when the reason ends, if known
    ready: int  # ready jobs the rotation may hand out (also while paused by an operator)
    deferred: int  # ready jobs of an account its rate limit or window deferred
    delayed_due: int  # delayed jobs whose time has come (made ready at the next claim)
    delayed_future: int  # delayed jobs still waiting for their time (eta, countdown, backoff)
    running: int
    oldest_waiting: float | None  # since when the oldest waiting job waits (server time)
    limit: AccountLimit | None  # the limit in force: its own, else the default (None: none)
    limit_is_default: bool
    paused_by: str | None
    paused_at: float | None
    pause_reason: str | None
    pause_scope: str | None = None  # "queue", "account" or "account_everywhere"
    server_time: float = 0.0  # the store's clock when this was read
    complete: bool = True  # False when a bound (DUE_SCAN, OLDEST_SCAN) cut a count short
    quota: QueueQuota | None = None  # the queue's shared limit, when it has one
    limit_here: AccountLimit | None = None  # its limit in this queue (else the queue's default)
    slowed: SlowDownHold | None = None  # the provider's slow-down holding it (or its queue)

    @property
    def waiting(self) -> int:
        return self.ready + self.deferred + self.delayed_due


@dataclass(frozen=True)
class QueueQuota:
    """A queue's shared limit (set_queue_limit) now: the limit, its jobs running, and when its
    shared bucket has a token again (None: it has one), read off the bucket the claim wrote."""

    limit: AccountLimit
    running: int
    next_token: float | None

    @property
    def binding(self) -> bool:
        """Whether the queue's jobs wait for it now (no token, or all it may run running)."""
        cap = self.limit.concurrency
        return self.next_token is not None or bool(cap and self.running >= cap)

    @classmethod
    def read(cls, raw_limit: str | None, raw_bucket: str | None, running: int,
             now: float) -> QueueQuota | None:
        if not raw_limit:
            return None
        limit = AccountLimit.from_json(raw_limit)
        rate, burst = limit.per_second, limit.burst or 1.0
        tokens = Bucket.parse(raw_bucket).tokens_at(now, rate, burst) if raw_bucket else burst
        next_token = now + (1 - tokens) / rate if rate and tokens < 1 else None
        return cls(limit, running, next_token)


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker, as it registered on its last heartbeat."""

    name: str  # Celery hostname, e.g. celery@host
    queues: tuple[str, ...]
    slots: int  # pool size
    heartbeat: float  # Redis server time of its last heartbeat
    id: str = ""  # its lease token (hostname/pid/random): unique per worker process
    expires: float = 0.0  # when it leaves the registry unless it beats again
    started: float | None = None  # when it started (its own clock); None: an older worker
    succeeded: int = 0  # fair jobs it ran that succeeded since it started
    failed: int = 0  # fair jobs it ran that failed (to a retry or a dead letter)
    running: tuple[str, ...] = ()  # delivery ids of the jobs it holds leases on now


@dataclass(frozen=True)
class LiveJob:
    """A job of an account as the store holds it now."""

    job_id: str  # delivery id: "<task id>:<retries>"
    queue: str
    account: str
    task: str | None
    state: str  # "ready" | "deferred" | "delayed" | "running"
    since: float | None  # ready/deferred: waiting since; running: claimed at
    due: float | None  # delayed: when it becomes ready

    @property
    def task_id(self) -> str:
        return task_id_of(self.job_id)


def _task_name(envelope: str | None) -> str | None:
    try:
        return str(Envelope.from_json(envelope).task_name) if envelope else None
    except MalformedEnvelopeError:
        return None


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def explain(*, now: float, waiting: int, state: str | None, limit_wake: float | None,
            deferral: Deferral | None, pause: OperatorPause | None,
            consumed: bool, quota: QueueQuota | None = None,
            slowed: SlowDownHold | None = None) -> tuple[Reason, float | None]:
    """Why the account's next job does not run now, and until when (server time; None: not
    known or not timed): an operator's pause, the queue's circumstances, or the deferral the
    claim recorded where it decided it (claim.lua); the limit rules are not repeated here.
    Facts only: celery_fairqueue.reasons puts them in words."""
    if pause is not None:
        return (Reason.PAUSED if pause.moving_to is None else Reason.MOVING), None
    if slowed is not None and slowed.until > now:  # the account's, or its queue's (claim.lua)
        return Reason.SLOWED, slowed.until
    if waiting <= 0:
        return Reason.NO_READY_JOBS, None
    if not consumed:
        return Reason.NO_WORKER, None
    if state == "c":
        return Reason.CONCURRENCY_CAP, None
    if state == "p":
        until = deferral.until if deferral and deferral.until else limit_wake
        if until is not None and until > now:
            if deferral and deferral.reason == DeferReason.WINDOW_CLOSED:
                return Reason.WINDOW_CLOSED, until
            # a rate deferral, or one an older claim made without a record
            return Reason.RATE_LIMITED, until
    if quota is not None and quota.binding:
        return Reason.QUEUE_QUOTA, quota.next_token
    return Reason.RUNNABLE, None


class ConsoleReader:
    """The console's questions about one fair store (StoreInspector holds one as ``console``;
    its status reads the live workers and oldest waiting jobs from here)."""

    def __init__(self, store: FairStore) -> None:
        self.store = store

    def queues(self, names: list[str] | None = None) -> list[str]:
        """``names`` sorted, or every queue the store knows."""
        return sorted(names) if names else self.store.known_queues()

    def server_time(self) -> float:
        """The store's clock (Redis TIME), which every time it keeps is in."""
        return self.store.server_time()

    # -- workers -------------------------------------------------------------------------------

    def workers(self, *, running_jobs: bool = True) -> list[WorkerInfo]:
        """Live workers (registered and not expired), by name; with the jobs each holds
        leases on (read off every shard), unless not ``running_jobs``. The registry is
        store-wide: it lives at the home (``store.keys``)."""
        client = self.store.client
        keys = self.store.keys
        now = self.server_time()
        pipe = client.pipeline(transaction=False)
        pipe.zrange(keys.workers, 0, -1, withscores=True)
        pipe.hgetall(keys.worker_info)
        registered, infos = pipe.execute()
        running: dict[str, list[str]] = {}
        leased = self.store.leased() if running_jobs else []
        for job_id, job in sorted(leased, key=lambda pair: pair[0]):
            running.setdefault(job.owner or "", []).append(job_id)
        found = []
        for worker_id, expires in registered:
            raw = infos.get(worker_id)
            if float(expires) <= now or not raw:
                continue
            entry = WorkerEntry.parse(raw)
            data = entry.info
            found.append(WorkerInfo(name=str(data.get("name") or worker_id),
                                    queues=tuple(data.get("queues") or ()),
                                    slots=int(data.get("slots") or 0), heartbeat=entry.heartbeat,
                                    id=str(worker_id), expires=float(expires),
                                    started=_float(data.get("started")) or None,
                                    succeeded=int(data.get("succeeded") or 0),
                                    failed=int(data.get("failed") or 0),
                                    running=tuple(running.get(worker_id, ()))))
        return sorted(found, key=lambda w: (w.name, w.id))

    def consumers(self, workers: Sequence[WorkerInfo] | None = None) -> dict[str, int]:
        """Live workers per queue name (queues no worker consumes are absent)."""
        counts: dict[str, int] = {}
        for worker in self.workers(running_jobs=False) if workers is None else workers:
            for queue in worker.queues:
                counts[queue] = counts.get(queue, 0) + 1
        return counts

    # -- oldest waiting ------------------------------------------------------------------------

    def _heads(self, queue: str) -> list[tuple[float, str]]:
        """Since when each account's next job in ``queue`` waits, oldest first (heads.py)."""
        return sorted(queue_heads(self.store, queue))

    def _due(self, queue: str, now: float, scan: int, shards: Sequence[FairStore] | None = None
             ) -> list[tuple[float, str, FairStore]]:
        """The queue's due delayed jobs (made ready at the next claim), soonest first, up to
        ``scan``: ``(due time, job id, its shard)``, of every shard or of ``shards``."""
        def read(pipe: Any, shard: FairStore) -> None:
            if shards is None or shard in shards:
                pipe.zrangebyscore(shard.keys.queue(queue).delayed, "-inf", now, start=0,
                                   num=scan, withscores=True)

        due = [(float(when), job_id, shard)
               for shard, replies in zip(self.store.shards, per_shard(self.store, read),
                                         strict=True)
               for reply in replies for job_id, when in reply]
        return sorted(due, key=lambda entry: entry[:2])[:scan]

    def queue_oldest_waiting(self, queues: list[str] | None = None) -> dict[str, float | None]:
        """Per queue, since when its oldest waiting job waits (server time); None: none waits.
        A ready job waits since its seq's time; a due delayed job since its due time."""
        now = self.server_time()
        oldest: dict[str, float | None] = {}
        for queue in self.queues(queues):
            times = [since for since, _ in self._heads(queue)[:1]]
            times += [due for due, _, _ in self._due(queue, now, 1)]
            oldest[queue] = min(times) if times else None
        return oldest

    def oldest_accounts(self, queue: str, top: int, scan: int = 1000
                        ) -> list[tuple[str, float]]:
        """The ``top`` accounts of ``queue`` whose oldest waiting job waits longest, with that
        time: every account's next ready job, and the oldest ``scan`` due delayed jobs."""
        if top <= 0:
            return []
        due = self._due(queue, self.server_time(), scan)
        jobs = self._heads(queue)
        jobs += [(when, job.account) for (when, _, _), job in
                 zip(due, records_at([(shard, job_id) for _, job_id, shard in due]),
                     strict=True) if job]
        found: dict[str, float] = {}
        for since, account in sorted(jobs):
            found.setdefault(account, since)
            if len(found) >= top:
                break
        return list(found.items())

    # -- one account ---------------------------------------------------------------------------

    def account_state(self, account: str, queues: list[str] | None = None, *,
                      workers: Sequence[WorkerInfo] | None = None) -> list[QueueState]:
        """The account's live state in each queue (default: every known queue), with the reason
        it does not run now and until when. ``workers`` (from :meth:`workers`) saves
        reading them again when asking about many accounts. Reads the account's shard alone
        (and the live workers' queues, from the store's registry)."""
        store = self.store.shard_for(account)
        names = sorted(queues) if queues else store.known_queues()
        client, keys = store.client, store.keys
        encoded = encode_id(account)
        now = store.server_time()  # its shard's node's clock (time_at), also on a cluster
        pipe = client.pipeline(transaction=False)
        pipe.hget(keys.limit_config, encoded)
        pipe.get(keys.default_limit)
        pipe.hmget(keys.pauses, [f for q in names for f in (
            pause_field(None, q), pause_field(account, q))] + [pause_field(account, None)] + [
            f for q in names for f in (slow_down_field(account, q), slow_down_field(None, q))])
        for queue in names:
            qk = keys.queue(queue)
            fifo = qk.fifo(encoded)
            pipe.zcard(fifo)
            pipe.hget(qk.state, encoded)
            pipe.zscore(qk.deferred, encoded)
            pipe.hget(qk.deferrals, encoded)
            pipe.hget(qk.ndelayed, encoded)
            pipe.zrange(fifo, 0, OLDEST_SCAN - 1)
            pipe.zrange(qk.delayed, 0, 0, withscores=True)
            pipe.hget(keys.limit_config, queue_limit_field(queue))  # its shared limit
            pipe.hmget(keys.limit_config, in_queue_field(queue, account),
                       in_queue_field(queue, None))
        for queue in names:
            read_legacy(pipe, keys.queue(queue), encoded, OLDEST_SCAN)
        own_limit, stored_default, pauses, *replies = pipe.execute()
        legacy = replies[9 * len(names):]
        quotas = self.store.quota_readings([q for n, q in enumerate(names) if replies[9 * n + 7]])
        running_of = store.running()
        own = AccountLimit.from_json(own_limit) if own_limit else None
        # the store's default (what the claim applies); this process's setting until one is set
        default = (AccountLimit.from_json(stored_default) if stored_default
                   else store.settings.default_limit)
        limit = own or (default if default != AccountLimit() else None)
        consumers = self.consumers(workers)
        states = []
        for n, queue in enumerate(names):
            (nready, state, limit_wake, deferral, ndelayed, heads, first_delayed, quota_limit,
             here) = replies[9 * n: 9 * n + 9]
            nready, heads = with_legacy(nready, heads, legacy[2 * n:2 * n + 2], OLDEST_SCAN)
            quota_bucket, quota_running = quotas.get(queue, (None, 0))
            running = running_of.get((queue, normalize_id(account)), 0)
            fields = [pause_field(None, queue), pause_field(account, queue),
                      pause_field(account, None)]
            raws = [pauses[2 * n], pauses[2 * n + 1], pauses[2 * len(names)]]
            pause = next((parse_pause(f, r) for f, r in zip(fields, raws, strict=True) if r),
                         None)
            holds = [SlowDownHold.parse(slow_down_field(who, queue), raw) for who, raw in
                     ((account, pauses[2 * len(names) + 1 + 2 * n]),
                      (None, pauses[2 * len(names) + 2 + 2 * n])) if raw]
            slowed = max(holds, key=lambda hold: hold.until, default=None)
            states.append(self._queue_state(
                queue=queue, account=account, now=now, nready=nready,
                running=int(running or 0), state=state, limit_wake=_float(limit_wake),
                deferral=Deferral.parse(deferral) if deferral else None,
                ndelayed=int(ndelayed or 0), heads=heads, first_delayed=first_delayed,
                limit=limit, own=own is not None, pause=pause, slowed=slowed,
                consumed=queue in consumers, shard=store,
                quota=QueueQuota.read(quota_limit, quota_bucket, quota_running, now),
                limit_here=next((AccountLimit.from_json(raw) for raw in here if raw), None)))
        return states

    def _due_delayed(self, shard: FairStore, queue: str, account: str, now: float
                     ) -> tuple[int, float | None, bool]:
        """The account's due delayed jobs in ``queue`` (on its ``shard``): count, the earliest
        due, and whether all due jobs were looked through (DUE_SCAN)."""
        due = self._due(queue, now, DUE_SCAN, [shard])
        if not due:
            return 0, None, True
        wanted = normalize_id(account)
        mine = [when for (when, _, _), job in
                zip(due, shard.records([job_id for _, job_id, _ in due]), strict=True)
                if job is not None and job.account == wanted]
        return len(mine), (min(mine) if mine else None), len(due) < DUE_SCAN

    def _queue_state(self, *, queue: str, account: str, now: float, nready: int, running: int,
                     state: str | None, limit_wake: float | None, deferral: Deferral | None,
                     ndelayed: int, heads: list[str], first_delayed: list[Any],
                     limit: AccountLimit | None, own: bool, pause: OperatorPause | None,
                     consumed: bool, shard: FairStore, quota: QueueQuota | None,
                     limit_here: AccountLimit | None, slowed: SlowDownHold | None
                     ) -> QueueState:
        complete = True
        delayed_due, due_since = 0, None
        if ndelayed and first_delayed and float(first_delayed[0][1]) <= now:
            delayed_due, due_since, complete = self._due_delayed(shard, queue, account, now)
        oldest = due_since
        if heads:
            known = [since for since in (ReadyMember.parse(h).ready_since for h in heads)
                     if since is not None]
            if known:
                oldest = min(known) if oldest is None else min(oldest, *known)
            complete = complete and len(heads) >= nready  # all read: none beyond the bound
        ready, deferred = ready_and_deferred(nready, state)
        reason, until = explain(
            now=now, waiting=nready + delayed_due, state=state, limit_wake=limit_wake,
            deferral=deferral, pause=pause, consumed=consumed, quota=quota, slowed=slowed)
        return QueueState(
            queue=queue, account=account, reason=reason, until=until,
            ready=ready, deferred=deferred, delayed_due=delayed_due,
            delayed_future=max(ndelayed - delayed_due, 0), running=running,
            oldest_waiting=oldest, limit=limit, limit_is_default=not own,
            paused_by=pause.by if pause else None, paused_at=pause.at if pause else None,
            pause_reason=pause.reason if pause else None,
            pause_scope=pause.scope if pause else None, server_time=now, complete=complete,
            quota=quota, limit_here=limit_here,
            slowed=slowed if reason == Reason.SLOWED else None)

    # -- one account's jobs --------------------------------------------------------------------

    def live_jobs(self, account: str, limit: int = 50) -> list[LiveJob]:
        """The account's jobs in the store now, up to ``limit``: running first, then ready and
        deferred in FIFO order, then delayed by due time; every queue of its shard, which
        alone is read."""
        shard = self.store.shard_for(account)
        client, keys = shard.client, shard.keys
        encoded = encode_id(account)
        leased = shard.leased()
        found: list[LiveJob] = []
        for queue in shard.known_queues():
            if len(found) >= limit:
                break
            qk = keys.queue(queue)
            pipe = client.pipeline(transaction=False)
            pipe.hget(qk.state, encoded)
            pipe.zrange(qk.fifo(encoded), 0, limit - 1)
            pipe.zrange(qk.delayed, 0, DUE_SCAN - 1, withscores=True)
            read_legacy(pipe, qk, encoded, limit)
            state, heads, delayed, *legacy = pipe.execute()
            _, heads = with_legacy(0, heads, legacy, limit)
            candidates: list[tuple[str, str, float | None, float | None]] = []
            running = [(job.started, job_id) for job_id, job in leased
                       if job.queue == queue and job.started is not None]
            candidates += [(job_id, "running", at, None) for at, job_id in sorted(running)]
            kind = "deferred" if state == "p" else "ready"
            members = [ReadyMember.parse(head) for head in heads]
            candidates += [(m.job_id, kind, m.ready_since, None) for m in members]
            candidates += [(job_id, "delayed", None, float(due)) for job_id, due in delayed]
            found += self._jobs_of(shard, queue, encoded, account, candidates,
                                   limit - len(found))
        return found

    @staticmethod
    def _jobs_of(shard: FairStore, queue: str, encoded: str, account: str,
                 candidates: list[tuple[str, str, float | None, float | None]],
                 limit: int) -> list[LiveJob]:
        """The candidates that belong to the account (by their record), with their task names."""
        if not candidates or limit <= 0:
            return []
        wanted = decode_id(encoded)
        mine = [(c, job) for c, job in
                zip(candidates, shard.records([c[0] for c in candidates]), strict=True)
                if job is not None and job.account == wanted][:limit]
        return [LiveJob(job_id=job_id, queue=queue, account=account,
                        task=_task_name(job.envelope or None), state=state, since=since,
                        due=due)
                for (job_id, state, since, due), job in mine]

    def pauses(self) -> list[OperatorPause]:
        """Every operator pause, oldest first."""
        return self.store.pauses()
