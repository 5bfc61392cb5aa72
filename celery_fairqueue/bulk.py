"""Bulk enqueue: a group, a chord's header, ``chunks`` and ``FairTask.apply_many`` store their
fair jobs in pipelined batches, one round trip per shard per ``fairqueue_enqueue_batch`` jobs,
each job still its own atomic script call.

Celery sends every task of a group through ``app.amqp.send_task_message`` inside one
``app.producer_or_acquire()`` block, each task's own ``send_task`` opening a block within it
given the group's producer (canvas.py ``group._apply_tasks``; the ``celery.group`` task and a
user's ``with app.producer_or_acquire() as p:`` loop alike). ``install`` wraps
``producer_or_acquire``: a block that acquires a producer opens a :class:`Batch`; a fair
message sent from a block given that producer joins the batch, which is stored as the block
that opened it ends, or dropped, nothing stored, when it ends by an exception. A lone
``.delay()`` acquires its own producer (so does one sent from a signal handler during
another's publish): its job is stored at once, as it always was.

Each job's outcome is reported on its own (:class:`EnqueueOutcome`); when any job was not
stored the block raises the error one ``.delay()`` of that job would have raised, whose
``outcomes`` say which jobs were stored.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Signature

from .errors import DeadLetterNotFound, FairqueueError, ReplayLostError, StoreUnavailableError
from .protocol import task_id_of
from .store import EnqueueResult, store_for


@dataclass(frozen=True)
class EnqueueOutcome:
    """One job of a bulk enqueue: ``stored`` (it is in the store now), a duplicate (the job
    ``duplicate_of``, a task id, holds its business key: nothing new was stored), or not stored
    for ``error``, the error one ``.delay()`` of it would raise (a full backlog, the producer's
    deadline, an unreachable store)."""

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
    """A fair job waiting in a batch: the store's enqueue keywords, and what its publish does
    once it is stored (Celery's signals and event, the result subscription)."""

    job: dict[str, Any]
    announce: Callable[[EnqueueResult], None]
    result: Any = None  # the AsyncResult its apply_async returned (see follow)


@dataclass
class Batch:
    """The fair jobs sent inside one outermost ``producer_or_acquire`` block."""

    app: Celery
    depth: int = 1  # the blocks open: a send from a block inside the first joins the batch
    jobs: list[PendingJob] = field(default_factory=list)
    outcomes: list[EnqueueOutcome] = field(default_factory=list)  # once stored

    def store(self) -> list[EnqueueOutcome]:
        """Store the jobs (the store's enqueue_many), each announced as stored; raise the
        first failure's error, carrying every job's outcome, when any job was not stored."""
        jobs, self.jobs = self.jobs, []
        if not jobs:
            return []
        replies = store_for(self.app).enqueue_many([pending.job for pending in jobs])
        outcomes = [_announced(pending, reply) for pending, reply in zip(jobs, replies,
                                                                         strict=True)]
        self.outcomes = outcomes
        failed = [outcome for outcome in outcomes if outcome.error is not None]
        if failed:
            raise _bulk_error(outcomes, failed)
        return outcomes


_batch: ContextVar[Batch | None] = ContextVar("fairqueue_batch", default=None)


def joining() -> Batch | None:
    """The batch a fair message sent now joins, or None: store it at once."""
    batch = _batch.get()
    return batch if batch is not None and batch.depth > 1 else None


def follow(result: Any) -> None:
    """``apply_async`` returned ``result`` for the job just batched: a duplicate's result is
    pointed at the job holding its key once the batch is stored, as one ``.delay()``'s is."""
    batch = _batch.get()
    if batch is not None and batch.jobs and \
            task_id_of(batch.jobs[-1].job["job_id"]) == getattr(result, "id", None):
        batch.jobs[-1].result = result


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
                if kind is None:  # an exception drops the batch: nothing of it is stored
                    self.batch.store()
        finally:
            self.inner.__exit__(kind, value, traceback)


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
    """One job's outcome; a stored one (or a duplicate) announced as its publish would."""
    asked = task_id_of(pending.job["job_id"])
    if isinstance(reply, EnqueueResult):
        pending.announce(reply)
        if reply.task_id == asked:
            return EnqueueOutcome(asked, stored=True)
        if pending.result is not None:
            pending.result.id = reply.task_id
        return EnqueueOutcome(asked, stored=False, duplicate_of=reply.task_id)
    if isinstance(reply, DeadLetterNotFound):  # a KeyError: see publish.py
        reply = ReplayLostError(str(reply))
    if not isinstance(reply, FairqueueError):  # the account moved again in a reshard
        reply = StoreUnavailableError(f"not stored: {reply}")
    return EnqueueOutcome(asked, stored=False, error=reply)


def _bulk_error(outcomes: list[EnqueueOutcome], failed: list[EnqueueOutcome]) -> FairqueueError:
    """The first failed job's error, as its class, saying how many jobs were stored; its
    ``outcomes`` are every job's."""
    first = failed[0]
    assert first.error is not None
    stored = sum(outcome.stored for outcome in outcomes)
    duplicates = sum(outcome.duplicate_of is not None for outcome in outcomes)
    error = type(first.error)(
        f"{len(failed)} of {len(outcomes)} jobs were not stored ({stored} stored, "
        f"{duplicates} duplicates of stored jobs; each job's outcome is in .outcomes): the "
        f"first, task {first.task_id}: {first.error}")
    error.outcomes = outcomes
    error.__cause__ = first.error
    return error
