"""Bulk enqueue: a group, a chord's header, ``chunks`` and ``FairTask.apply_many`` store their
fair jobs in pipelined batches, one round trip per shard per ``fairqueue_enqueue_batch`` jobs,
each job still its own atomic script call.

Celery sends every task of a group through ``app.amqp.send_task_message`` inside one
``app.producer_or_acquire()`` block, each task's own ``send_task`` opening a block within it
given the group's producer (canvas.py ``group._apply_tasks``; the ``celery.group`` task and a
user's ``with app.producer_or_acquire() as p:`` loop alike). ``install`` wraps
``producer_or_acquire``: a block that acquires a producer opens a :class:`Batch`; a fair
message sent from a block given that producer joins the batch, which is stored as the block
that opened it ends (even by an exception, as plain Celery's group has sent the tasks
before it), or earlier when full or slow to fill (``FLUSH_SECONDS``). A lone
``.delay()`` acquires its own producer (so does one sent from a signal handler during
another's publish): its job is stored at once, as it always was. ``apply_many`` holds its
batch until every call is judged (:func:`apply_many`).

One rule for every call of a batch, whoever refuses it: every call that can be stored is
stored, and each refused call is reported with its own error (:class:`EnqueueOutcome`) and
stored nothing: refused before Redis (no account, not JSON, too large: the error one
``.delay()`` of it would raise), by Redis (a full backlog), or not tried because the store
failed first (an outage: once a round trip failed, the calls after it are not sent, each
"not stored" with that failure). When any call was not stored, the block raises the first
failed call's error, whose ``outcomes`` hold every call's outcome, in order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Signature

from .errors import DeadLetterNotFound, FairqueueError, ReplayLostError, StoreUnavailableError
from .protocol import task_id_of
from .settings import settings_for
from .store import EnqueueResult, store_for


@dataclass(frozen=True)
class EnqueueOutcome:
    """One call of a bulk enqueue: ``stored`` (it is in the store now), a duplicate (the job
    ``duplicate_of``, a task id, holds its business key: nothing new was stored), or not stored
    for ``error``, the error one ``.delay()`` of it would raise (refused before Redis, a full
    backlog, the producer's deadline, an unreachable store; or not sent at all, since the
    store failed an earlier call of its batch)."""

    task_id: str
    stored: bool
    duplicate_of: str | None = None
    error: FairqueueError | None = None

    @property
    def state(self) -> str:
        """``"stored"``, ``"duplicate"`` or ``"not stored"``."""
        if self.stored:
            return "stored"
        return "duplicate" if self.duplicate_of else "not stored"


@dataclass
class PendingJob:
    """A fair call waiting in a batch: the store's enqueue keywords, and what its publish does
    once it is stored (Celery's signals and event, the result subscription); a call refused
    before Redis waits in its place with its outcome told (:meth:`Batch.refuse`)."""

    job: dict[str, Any]
    announce: Callable[[EnqueueResult], None]
    result: Any = None  # the AsyncResult its apply_async returned (see follow)
    outcome: EnqueueOutcome | None = None  # once stored, tried, or refused


#: A batch is stored once it holds ``fairqueue_enqueue_batch`` jobs, or its first job has
#: waited this long, or a job comes this long after the one before it; and a group's first
#: job is stored alone, at once. So a group fed by a slow generator (a chord header, Celery's
#: #3021, whose group reads two tasks ahead) runs its first jobs while the generator still
#: makes the others, as plain Celery's does.
FLUSH_SECONDS = 0.1


@dataclass
class Batch:
    """The fair calls sent inside one ``producer_or_acquire`` block, stored in batches."""

    app: Celery
    depth: int = 1  # the blocks open: a send from a block inside the first joins the batch
    jobs: list[PendingJob] = field(default_factory=list)  # the calls waiting, in order
    outcomes: list[EnqueueOutcome] = field(default_factory=list)  # of the calls told so far
    last: PendingJob | None = None  # the job added last (see follow)
    since: float = 0.0  # when the first job waiting was added (monotonic)
    last_at: float = field(default_factory=time.monotonic)  # the last job's, or the start
    first_at_once: bool = True  # a group's first job is stored alone
    sent: int = 0  # the calls sent to the store so far
    #: apply_many's: nothing is stored before the block ends, so every call is judged first
    #: and a call that raises stores none (see apply_many)
    hold: bool = False
    #: the store failed a call (an outage, a stall): the calls after it are not sent, each
    #: told "not stored" with this error, so a stalled Redis costs one producer's deadline
    failure: FairqueueError | None = None

    def add(self, pending: PendingJob) -> None:
        """Add a call; store the batch when it is full, or slow to fill (``FLUSH_SECONDS``),
        unless it is held."""
        now = time.monotonic()
        slow, self.last_at = now - self.last_at >= FLUSH_SECONDS, now
        if not self.jobs:
            self.since = now
        self.jobs.append(pending)
        self.last = pending
        if self.hold:
            return
        first = self.first_at_once and not self.sent  # (calls refused before it aside)
        if first or slow or now - self.since >= FLUSH_SECONDS or \
                len(self.jobs) >= settings_for(self.app).enqueue_batch:
            self.store()

    def refuse(self, task_id: str, error: FairqueueError) -> None:
        """A call refused before Redis (``error`` is the one its ``.delay()`` raises): told
        "not stored" in its place, while the other calls go on."""
        if not self.jobs:
            self.since = time.monotonic()
        self.jobs.append(PendingJob({}, _untold, outcome=EnqueueOutcome(
            task_id, stored=False, error=error)))
        self.last = None

    def store(self) -> list[EnqueueOutcome]:
        """Store the calls waiting (the store's enqueue_many), each announced as stored;
        returns every call's outcome so far, in order (:meth:`finish` raises)."""
        calls, self.jobs = self.jobs, []
        sent = [pending for pending in calls if pending.outcome is None]
        if sent and self.failure is None:
            self.sent += len(sent)
            try:
                replies: list[Any] = store_for(self.app).enqueue_many(
                    [pending.job for pending in sent])
            except FairqueueError as exc:  # raised before a round trip (reading the shards)
                replies = [exc] * len(sent)
            for pending, reply in zip(sent, replies, strict=True):
                error = _announced(pending, reply).error
                if isinstance(error, StoreUnavailableError) and self.failure is None:
                    self.failure = _not_sent(error)
        for pending in sent:
            if pending.outcome is None:  # not sent: the store failed an earlier call
                pending.outcome = _not_tried(pending, self.failure)
        self.outcomes += [pending.outcome for pending in calls if pending.outcome is not None]
        return self.outcomes

    def finish(self) -> list[EnqueueOutcome]:
        """Store the calls waiting; when any call of the block was not stored, raise the
        first failed call's error, its ``outcomes`` every call's. Returns every outcome."""
        outcomes = self.store()
        failed = [outcome for outcome in outcomes if outcome.error is not None]
        if failed:
            raise _bulk_error(outcomes, failed)
        return outcomes


logger = logging.getLogger(__name__)

_batch: ContextVar[Batch | None] = ContextVar("fairqueue_batch", default=None)


def joining() -> Batch | None:
    """The batch a fair message sent now joins, or None: store it at once."""
    batch = _batch.get()
    return batch if batch is not None and batch.depth > 1 else None


def follow(result: Any) -> None:
    """``apply_async`` returned ``result`` for the job just batched: a duplicate's result is
    pointed at the job holding its key once it is stored, as one ``.delay()``'s is."""
    batch = _batch.get()
    if batch is not None and batch.hold:  # apply_many tells outcomes, not results: keep none
        return
    pending = batch.last if batch is not None else None
    if pending is None or task_id_of(pending.job["job_id"]) != getattr(result, "id", None):
        return
    if pending.outcome is None:
        pending.result = result
    elif pending.outcome.duplicate_of:
        result.id = pending.outcome.duplicate_of


def current() -> Batch | None:
    """The batch of the innermost open block (``FairTask.apply_many`` reads its outcomes)."""
    return _batch.get()


class _Block:
    """``app.producer_or_acquire``'s block: one that acquires a producer opens a batch of its
    own (a ``send_task`` of its own, even one sent from a signal handler inside another's);
    one given the producer of an open block enters that block's batch."""

    __slots__ = ("app", "batch", "given", "inner", "token")

    def __init__(self, app: Celery, inner: Any, given: bool) -> None:
        self.app = app
        self.inner = inner
        self.given = given
        self.batch: Batch | None = None
        self.token: Token[Batch | None] | None = None

    def __enter__(self) -> Any:
        producer = self.inner.__enter__()
        self.batch = _batch.get()
        if self.batch is None or not self.given:
            self.batch = Batch(self.app)
            self.token = _batch.set(self.batch)
        else:
            self.batch.depth += 1
        return producer

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> Any:
        try:
            assert self.batch is not None
            if self.token is None:
                self.batch.depth -= 1
            else:
                _batch.reset(self.token)
                if kind is None:
                    self.batch.finish()
                elif not self.batch.hold:  # those sent before it are stored, as plain Celery's
                    _store_quietly(self.batch, value)
                # held (apply_many): a call raised as it was judged, so none is stored
        finally:
            self.inner.__exit__(kind, value, traceback)


def _store_quietly(batch: Batch, raised: BaseException) -> None:
    """Store the jobs sent before ``raised`` ended their block; the caller gets ``raised``, so
    a job of them that could not be stored is logged."""
    try:
        batch.finish()
    except FairqueueError as exc:
        logger.warning("fairqueue: %s ended a block of fair sends; of the jobs sent before it, "
                       "%s", raised.__class__.__name__, exc)


def signature_of(task: Any, call: Any) -> Signature:
    """A call of ``FairTask.apply_many`` (an args tuple or list, a kwargs dict, or a
    signature of ``task``) as a signature of ``task``."""
    if isinstance(call, Signature):
        if call.task != task.name:
            raise TypeError(f"task {task.name}: apply_many got a signature of {call.task}")
        return call
    if isinstance(call, dict):
        return task.signature((), call)
    if isinstance(call, (tuple, list)):
        return task.signature(tuple(call))
    raise TypeError(f"task {task.name}: apply_many takes args tuples, kwargs dicts or "
                    f"signatures, not {type(call).__name__}")


def apply_many(task: Any, calls: Iterable[Any], options: dict[str, Any]
               ) -> list[EnqueueOutcome]:
    """``FairTask.apply_many``: every call is judged (its message built, its account, key and
    size checked) before any is stored, then all are stored in batches. A call refused
    before Redis is told "not stored" with its own error while the others are stored; a call
    the task cannot take at all (arguments that do not fit its signature: Celery's
    ``TypeError``) raises as its ``.delay()`` would, and then none is stored."""
    signatures = [signature_of(task, call) for call in calls]
    if task.app.conf.task_always_eager:  # eager: runs each at once, touching no store
        return [EnqueueOutcome(sig.apply_async(**options).id, stored=True)
                for sig in signatures]
    with task.app.producer_or_acquire() as producer:  # stored as the block ends
        batch = current()
        if batch is not None:
            batch.hold = True
        for sig in signatures:
            sig.apply_async(producer=producer, **options)
    return batch.outcomes if batch is not None else []


def install_bulk(app: Celery) -> None:
    """Wrap ``app.producer_or_acquire`` so that the fair jobs sent inside one block are
    stored as one batch (see the module's docstring)."""
    if getattr(app.__dict__.get("producer_or_acquire"), "fairqueue", False):
        return
    acquire = app.producer_or_acquire

    def producer_or_acquire(producer: Any = None) -> _Block:
        return _Block(app, acquire(producer), producer is not None)

    producer_or_acquire.fairqueue = True  # type: ignore[attr-defined]
    app.producer_or_acquire = producer_or_acquire


def _announced(pending: PendingJob, reply: Any) -> EnqueueOutcome:
    """One call's outcome; a stored one (or a duplicate) announced as its publish would."""
    asked = task_id_of(pending.job["job_id"])
    if isinstance(reply, EnqueueResult):
        pending.announce(reply)
        if reply.task_id == asked:
            pending.outcome = EnqueueOutcome(asked, stored=True)
            return pending.outcome
        if pending.result is not None:
            pending.result.id = reply.task_id
        pending.outcome = EnqueueOutcome(asked, stored=False, duplicate_of=reply.task_id)
        return pending.outcome
    if isinstance(reply, DeadLetterNotFound):  # a KeyError: see publish.py
        reply = ReplayLostError(str(reply))
    if not isinstance(reply, FairqueueError):  # the account moved again in a reshard
        reply = StoreUnavailableError(f"not stored: {reply}")
    pending.outcome = EnqueueOutcome(asked, stored=False, error=reply)
    return pending.outcome


def _not_sent(failure: StoreUnavailableError) -> StoreUnavailableError:
    """The error of the calls a batch does not send after the store failed one with
    ``failure`` (whose own words may say that call's write stands: a replica's lag)."""
    error = type(failure)(f"not sent, so not stored: the fair store failed an earlier call "
                          f"of this bulk enqueue ({failure})")
    error.__cause__ = failure
    return error


def _not_tried(pending: PendingJob, failure: FairqueueError | None) -> EnqueueOutcome:
    """A call not sent, since the store failed an earlier one of its block."""
    assert failure is not None
    return EnqueueOutcome(task_id_of(pending.job["job_id"]), stored=False, error=failure)


def _untold(result: EnqueueResult) -> None:
    """The announcement of a refused call: never made, as it is never stored."""


def _bulk_error(outcomes: list[EnqueueOutcome], failed: list[EnqueueOutcome]) -> FairqueueError:
    """The first failed call's error, as its class, saying how many calls were stored; its
    ``outcomes`` are every call's, in order."""
    first = failed[0]
    assert first.error is not None
    stored = sum(outcome.stored for outcome in outcomes)
    duplicates = sum(outcome.duplicate_of is not None for outcome in outcomes)
    error = type(first.error)(
        f"{len(failed)} of {len(outcomes)} jobs were not stored ({stored} stored, "
        f"{duplicates} duplicates of stored jobs; .outcomes holds every call's outcome, in "
        f"order, each one not stored with its own error): the first, task {first.task_id}: "
        f"{first.error}")
    error.outcomes = outcomes
    error.__cause__ = first.error
    return error
