"""The jobs' hot path: enqueue, claim and settle (each one script call), the markers, the event
stream the recorder reads, and returning expired leases."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import (
    BacklogFullError,
    DeadLetterNotFound,
    FairqueueError,
    StoreUnavailableError,
)
from ...protocol import event_fields, task_id_of
from ..connection.door import StoreDoor
from ..connection.translate import may_run_later, operation
from ..formats.keys import decode_id, encode_id, encode_job_key
from ..formats.records import Marker, build_dead_record, marker_external_id, new_record_parts
from .leases import Lease

#: Most message bytes (about) one round trip of a bulk enqueue sends.
BATCH_BYTES = 4 * 1024 * 1024
#: A retry's "slow down" answer: its scope ("account" or "queue"), seconds, cause (slowdown.py).
SlowDownAsk = tuple[str, float, str]


def slow_down_args(job_id: str, ask: SlowDownAsk) -> list[Any]:
    """enqueue.lua's ARGV[18..21] of a retry whose failure said "slow down": the scope's code
    ('a' the account in the queue, 'q' the queue), seconds, cause and the job (encoded)."""
    scope, seconds, cause = ask
    return ["q" if scope == "queue" else "a", f"{seconds:.6f}", encode_id(cause or "-"),
            encode_id(task_id_of(job_id))]


class AccountMoved(Exception):
    """The enqueue's shard says a reshard moved the account to shard ``shard``: the sharded
    store enqueues there (sharded.py)."""

    def __init__(self, shard: int) -> None:
        super().__init__(f"the account moved to shard {shard}")
        self.shard = shard


@dataclass(frozen=True)
class EnqueueResult:
    job_id: str
    created: bool
    delayed: bool

    @classmethod
    def from_reply(cls, reply: Sequence[Any]) -> EnqueueResult:
        """From the enqueue script's reply: its status (0 stored already, 1 ready,
        2 delayed, 3 the dead letter it replays is gone, 4 and 5 a full backlog, 6 past the
        producer's deadline, 7 the account moved to another shard) and the job id."""
        status, stored_id = reply
        if status == 7:  # reshard
            raise AccountMoved(int(stored_id))
        if status == 3:
            raise DeadLetterNotFound("the dead letter was replayed or purged already")
        if status == 4:
            raise BacklogFullError("the account has fairqueue_max_pending_per_account jobs "
                                   "pending already")
        if status == 5:
            raise BacklogFullError("the fair store holds fairqueue_max_pending jobs already")
        if status == 6:
            raise StoreUnavailableError("the fair store ran the enqueue after the producer's "
                                        "deadline (Redis stalled): nothing was stored")
        return cls(job_id=stored_id, created=status != 0, delayed=status == 2)

    @property
    def task_id(self) -> str:
        return task_id_of(self.job_id)



#: One job's answer in a bulk enqueue: stored (or a duplicate), or why it is not.
EnqueueOutcomeOrError = EnqueueResult | FairqueueError | AccountMoved


def _outcome(reply: Any) -> EnqueueOutcomeOrError:
    """One enqueue call's reply in a batch, or the error it says (its own error reply too)."""
    if isinstance(reply, Exception):
        return reply if isinstance(reply, FairqueueError) else StoreUnavailableError(str(reply))
    try:
        return EnqueueResult.from_reply(reply)
    except (FairqueueError, AccountMoved) as exc:
        return exc



@dataclass(frozen=True)
class Claim:
    leases: list[Lease]
    next_due: float | None  # seconds until a deferred account or delayed job is due
    runnable: int = 0  # the summed weights of the accounts that can run now (sharded store)
    #: a sharded store's claim: per queue claimed from, the jobs of its grant leased (-1: the
    #: queue has a shared limit and no grant was brought; see shards/quota.py)
    granted: list[int] = field(default_factory=list)
    #: per queue claimed from, its runnable weight when it waits for its next grant (else 0)
    waiting: list[int] = field(default_factory=list)
    expired: list[Lease] = field(default_factory=list)  # dropped, past Celery's expires
    lost: list[str] = field(default_factory=list)  # acked jobs whose lease was lost
    #: a sharded store's claim that some shard failed: the acks it did not settle (the caller
    #: sends them again) and the failure; a claim that no shard answered raises it instead
    unsettled: list[Lease] = field(default_factory=list)
    failure: FairqueueError | None = None



class Jobs(StoreDoor):
    """Enqueue, claim, settle, mark, emit and reap fair jobs."""

    def _enqueue_args(self, *, queue: str, account: str, job_id: str, envelope: str,
                      due: float | None = None, job_key: str | None = None,
                      dedupe: bool = True, task: str = "", shown_args: str = "",
                      replays: str = "", priority: int | None = None,
                      expires: float | None = None) -> list[Any]:
        encoded_account, encoded_queue = encode_id(account), encode_id(queue)
        stored_key = encode_job_key(job_key)
        head, tail = new_record_parts(encoded_queue, encoded_account, stored_key, expires,
                                      envelope)
        return [job_id, encoded_account, encoded_queue, head, due or 0, stored_key,
                "1" if dedupe else "0", task, shown_args, replays,
                self.settings.max_pending_per_account, self.settings.max_pending,
                min(max(int(priority or 0), 0), 9), tail]

    def enqueue(self, *, queue: str, account: str, job_id: str, envelope: str,
                due: float | None = None, job_key: str | None = None,
                dedupe: bool = True, task: str = "", shown_args: str = "",
                replays: str = "", priority: int | None = None,
                expires: float | None = None, moving_to: int | None = None,
                slow_down: SlowDownAsk | None = None) -> EnqueueResult:
        """Store a job; an existing delivery or pending/running/recently done key is reused.
        ``replays`` names the dead letter this job replays: it leaves the dead-letter queue in
        the same step, or :class:`DeadLetterNotFound` says someone else took it first.
        ``priority`` (0-9, 0 first) orders the job among its account's own. Past ``expires``
        (epoch seconds) the claim drops the job instead of running it. ``moving_to``: while a
        reshard moves the store, the shard the account moves to (see enqueue.lua).
        ``slow_down``: a retry's (scope, seconds, cause): the scope waits that long with it
        (slowdown.py)."""
        args = self._enqueue_args(queue=queue, account=account, job_id=job_id,
                                  envelope=envelope, due=due, job_key=job_key, dedupe=dedupe,
                                  task=task, shown_args=shown_args, replays=replays,
                                  priority=priority, expires=expires)
        # the script stores nothing past this deadline (Redis's clock), and a failure is raised
        # only once it has passed: an enqueue that raised is never stored (see deadline.py)
        with operation("enqueue"):
            deadline = self.redis_clock.deadline(self.settings.enqueue_timeout / 2)
        args.append(f"{deadline:.6f}")
        if moving_to is not None or slow_down:  # reshard
            args.append("" if moving_to is None else moving_to)
        if slow_down:
            args += ["", *slow_down_args(job_id, slow_down)]
        try:
            return self._store(queue, args)
        except StoreUnavailableError as exc:
            failure = exc
        if may_run_later(failure):
            # no reply: wait until no try of it can store any more, then ask once (the same
            # call, which past the deadline only says whether the delivery is stored)
            self.redis_clock.wait_past(deadline)
            with contextlib.suppress(StoreUnavailableError):
                return self._store(queue, args)
        self.redis_clock.forget()
        raise failure

    def enqueue_many(self, jobs: Sequence[dict[str, Any]]) -> list[EnqueueOutcomeOrError]:
        """Store ``jobs`` (each :meth:`enqueue`'s keywords, ``moving_to`` too), in order,
        ``fairqueue_enqueue_batch`` a round trip, each job its own script call: per job its
        result, or the error that one :meth:`enqueue` of it would raise (it is not stored;
        AccountMoved: a reshard moved its account, the sharded store sends it on). A batch
        that fails leaves it and the jobs after it not stored, each with that error."""
        outcomes: list[EnqueueOutcomeOrError] = []
        start = 0
        while start < len(jobs):
            end, size = start, 0
            # a batch is a round trip within one try's socket timeout: bounded in bytes too
            while end < len(jobs) and end - start < self.settings.enqueue_batch and \
                    (size < BATCH_BYTES or end == start):
                size += len(jobs[end]["envelope"])
                end += 1
            try:
                outcomes += self._store_batch(jobs[start:end])
            except StoreUnavailableError as exc:  # not stored, nor are those not sent
                outcomes += [exc] * (len(jobs) - start)
                break
            start = end
        return outcomes

    def fleet_size(self) -> int:
        """The most idle workers a bulk enqueue rings for (shard.py: the registry's size)."""
        return 1

    def _store_batch(self, jobs: Sequence[dict[str, Any]]) -> list[EnqueueOutcomeOrError]:
        """One round trip of :meth:`enqueue_many`, with :meth:`enqueue`'s deadline: a batch
        with no reply is asked again once no call of it can store any more; raises when
        that fails too (none of its jobs is stored)."""
        with operation("enqueue"):
            deadline = f"{self.redis_clock.deadline(self.settings.enqueue_timeout / 2):.6f}"
        calls = []
        fleet = self.fleet_size()
        places: dict[str, int] = {}
        for job in jobs:
            fields = dict(job)
            moving_to = fields.pop("moving_to", None)
            slow_down = fields.pop("slow_down", None)
            args = [*self._enqueue_args(**fields), deadline]
            places[job["queue"]] = place = places.get(job["queue"], 0) + 1
            if moving_to is not None or place <= fleet or slow_down:
                args.append("" if moving_to is None else moving_to)  # reshard
            if place <= fleet or slow_down:  # rings for as many idle workers as it can feed
                args.append(place if place <= fleet else "")
            if slow_down:
                args += slow_down_args(job["job_id"], slow_down)
            calls.append(([self.keys.queue(job["queue"])], args))
        wanted = self.settings.wait_replicas
        failure: StoreUnavailableError | None = None
        try:
            replies, acked = self._run_batch("enqueue", calls, wanted)
        except StoreUnavailableError as exc:
            failure = exc
        if failure is not None and may_run_later(failure):
            self.redis_clock.wait_past(float(deadline))
            with contextlib.suppress(StoreUnavailableError):
                replies, acked = self._run_batch("enqueue", calls, wanted)
                failure = None
        if failure is not None:
            self.redis_clock.forget()
            raise failure
        outcomes = [_outcome(reply) for reply in replies]
        if wanted:
            try:
                self.client.check_replicated(acked, wanted)
            except StoreUnavailableError as exc:  # stored, but maybe not after a failover
                outcomes = [exc if isinstance(o, EnqueueResult) else o for o in outcomes]
        return outcomes

    def _store(self, queue: str, args: list[Any]) -> EnqueueResult:
        wanted = self.settings.wait_replicas
        if not wanted:
            return EnqueueResult.from_reply(self._run("enqueue", [self.keys.queue(queue)], args))
        with operation("enqueue"):
            reply, acked = self.client.run_and_wait(
                self._scripts["enqueue"], self._keys_for("enqueue", [self.keys.queue(queue)]),
                self._args_for("enqueue", args), wanted)
        result = EnqueueResult.from_reply(reply)  # refused (a full backlog): nothing to lose
        # stored on the primary, not on enough replicas: the one error that does not mean
        # "not stored" (a failover may lose the job or keep it); said so in its message
        self.client.check_replicated(acked, wanted)
        return result

    def claim(self, queues: Sequence[str], want: int, token: str, default_limit: str,
              first: int = 0, acks: Sequence[Lease] = (), *, keeps_time: bool = True,
              tick: bool = False, grants: Sequence[int | None] = ()) -> Claim:
        """Ack ``acks`` (this worker's finished leases), then lease up to ``want`` jobs from
        ``queues``, rotating over accounts with capacity; also say when the next deferred
        account or delayed job is due. ``first`` is the 0-based index of the queue to look at
        first (workers rotate it so no queue starves). One round trip for the whole turn.
        ``keeps_time``: the worker arms its own timer for the next due time (else a deferral
        due first calls the queues' time keeper). ``tick``: the time keeper's call with no
        free slot, which promotes what is due and rings for it though it leases nothing.
        ``grants``: in a sharded store, per queue the jobs its shared limit lets this claim
        lease (None: no grant taken; shards/quota.py)."""
        want = min(want, self.settings.claim_batch) if queues else 0
        if want <= 0 and not acks and not (tick and queues):
            return Claim([], None)
        s = self.settings
        names = list(queues)
        names += dict.fromkeys(a.queue for a in acks if a.queue not in names)
        position = {name: n + 1 for n, name in enumerate(names)}
        flat = self._run("claim", [self.keys.queue(q) for q in names], [
            max(want, 0), s.lease_seconds, token, default_limit, s.promote_batch, s.max_skips,
            s.max_deliveries, first % len(queues) + 1 if queues else 1, len(queues),
            s.job_retention, "1" if keeps_time else "0", len(acks),
            *(arg for ack in acks for arg in ack.ack_args(position[ack.queue])),
            *("-" if grant is None else grant for grant in grants),
        ])
        next_due = float(flat[0])
        claim = Claim([], next_due if next_due >= 0 else None, runnable=int(flat[2]),
                      lost=list(flat[1]), granted=[int(used) for used in flat[3]],
                      waiting=[int(weight) for weight in flat[4]])
        for n in range(5, len(flat), 7):
            index = int(flat[n])  # negated for an expired job the claim dropped
            lease = Lease(self, token, queue=names[abs(index) - 1], job_id=flat[n + 1],
                          envelope=flat[n + 2], deliveries=int(flat[n + 3]),
                          account=decode_id(flat[n + 4]), stored_key=flat[n + 5],
                          marker=flat[n + 6], expired=index < 0)
            (claim.expired if lease.expired else claim.leases).append(lease)
        return claim

    def ack(self, lease: Lease) -> bool:
        """The job ran (or handed over to its retry): release its lease and slot; a success
        marks its business key done."""
        return bool(self._run("ack", [self.keys.queue(lease.queue)],
                              [lease.token, self.settings.job_retention, *lease.ack_args(1)]))

    def requeue(self, lease: Lease) -> bool:
        """Give a leased job back to ready, in its FIFO place."""
        return bool(self._run("requeue", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token]))

    def give_back(self, lease: Lease, wait: float) -> bool:
        """A leased job whose run the store failed (full, read-only, busy) waits ``wait``
        seconds and runs again; the failed delivery does not count toward the poison limit."""
        return bool(self._run("give_back", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token, wait]))

    def reject(self, lease: Lease, reason: str) -> bool:
        """Dead-letter a leased job with ``reason``."""
        return bool(self._run("reject", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token, reason]))

    def bury(self, job_id: str, reason: str, record: dict[str, Any] | None = None) -> None:
        """Keep a failed job as a dead letter with ``reason``; ``record`` (task, account, args,
        error, ...) is kept as JSON, as it is, and read back by DeadLetter."""
        self._run("bury", [], [job_id, reason, build_dead_record(record)])

    def emit(self, type: str, **fields: Any) -> bool:
        """Record a task-side transition (see protocol.EventType) for the recorder; a no-op
        until a recorder created the stream (asked every few seconds: see recording)."""
        if not self.recording():
            return False
        return bool(self._run("emit", [], event_fields(type, **fields)))

    def marker(self, job_key: str) -> Marker | None:
        """The business key's idempotency marker, or None."""
        return Marker.read(self.client.get(self.keys.job_key(encode_id(job_key))))

    def mark_started(self, job_key: str, job_id: str) -> None:
        """Before the side effect: a redelivery that finds only this asks for reconciliation."""
        self._run("mark", [], [encode_id(job_key), job_id, "started", "",
                               self.settings.job_retention])

    def mark_done(self, job_key: str, job_id: str, external_id: str | None = None) -> None:
        """After the side effect: a redelivery that finds this returns without running; kept
        for ``fairqueue_job_retention``."""
        self._run("mark", [], [encode_id(job_key), job_id, "done",
                               marker_external_id(external_id), self.settings.job_retention])

    def mark_done_unless_done(self, stored_key: str, job_id: str) -> bool:
        """Mark the business key ``stored_key`` (encoded) done, unless it is done already
        (keeping that marker and its external id); False when it was."""
        return bool(self._run("mark", [], [stored_key, job_id, "done", "",
                                           self.settings.job_retention, "1"]))

    def reap(self, batch: int = 500) -> int:
        """Return jobs with expired leases (crashed or hung workers) to ready."""
        queues = self.known_queues()
        if not queues:
            return 0
        return int(self._run("reap", [self.keys.queue(q) for q in queues], [batch]))
