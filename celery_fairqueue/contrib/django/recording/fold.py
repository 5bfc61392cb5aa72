"""The recorder's fold: how a batch of events changes the Job and Attempt rows it touches.

Pure logic on plain rows (rows.py): the fold is handed the rows the writer loaded
(:meth:`Fold.know`) and those of the batch before (:meth:`Fold.carry`, whose write may still be
under way), applies the events in stream order to them in memory, and leaves what to write in
``dirty`` (one row per job, however many of its events the batch holds), ``new_attempts``,
``closed_attempts`` and ``account_updates``; writer.py reads and writes the database,
recorder.py runs both. Each event type has one handler, in :data:`HANDLERS`, keyed by
``EventType``.

A job's latest attempt lives in its Job row (``delivery_id``, ``attempts``, ``worker``,
``started_at``, ``finished_at``, the status); it gets an Attempt row of its own only when it
ends other than in success (retrying, failed, dead, requeued, settled without an outcome) or
when a later one begins while it stands (a new run under the same key, a redelivery whose
attempt never ended). Most jobs succeed at their first attempt, and they cost no Attempt row:
``Job.attempt_list()`` reads the rows and the latest attempt together. An Attempt row an
earlier recorder wrote ``running`` is closed as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import lru_cache

from ....protocol import Event, EventType, parse_delivery_id
from ....search import arguments_text
from ..models import Attempt, Job
from .rows import AttemptRow, JobRow

logger = logging.getLogger("celery_fairqueue.contrib.django.recorder")

Status = Job.Status
Outcome = Attempt.Outcome
NO_OUTCOME = "settled without an outcome (revoked or rejected)"
EXPIRED = "expired before it ran (Celery's expires): dropped from the fair store"
FINAL = (Status.SUCCEEDED, Status.DEAD, Status.REVOKED)
#: Events that never touch an attempt.
NO_ATTEMPT = frozenset((EventType.ENQUEUED, EventType.PROMOTED))
#: Every event type of the stream (``EventType``'s constants).
EVENT_TYPES = frozenset(value for name, value in vars(EventType).items() if name.isupper())


def _time(seconds: float | None) -> datetime | None:
    """A stream time as a datetime; one past what a datetime holds (a Retry-After of years,
    before max_retry_delay cut it) is the latest one, not an error."""
    if not seconds:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return datetime.max.replace(tzinfo=UTC) if seconds > 0 else None


@lru_cache(maxsize=65536)
def _retries(job_id: str) -> int:
    """The retry count in a delivery id ``<task id>:<retries>`` (-1 when there is none)."""
    task_id, retries = parse_delivery_id(job_id)
    return retries if task_id != job_id else -1


def _args(event: Event) -> dict:
    try:  # PostgreSQL's jsonb refuses NUL characters
        shown = json.loads((event.args or "{}").replace("\\u0000", ""))
    except ValueError:
        return {}
    return shown if isinstance(shown, dict) else {"args": shown}


def key_of(event: Event) -> str:
    """The business key of an ``enqueued`` event's job (``task:<id>`` when it has none)."""
    return event.job_key or f"task:{event.task_id}"


def rows_needed(events: Iterable[Event]) -> tuple[set[str], set[str], set[str]]:
    """What the writer loads before a fold of ``events``: (business keys, task ids, delivery
    ids); the jobs that have one of the keys or task ids, the attempts of the deliveries."""
    deliveries = {e.job_id: e for e in events if e.job_id}
    keys = {key_of(e) for e in deliveries.values() if e.type == EventType.ENQUEUED}
    # the attempts of the deliveries that run or end here: a job only enqueued has none yet
    ran = {e.job_id for e in events if e.job_id and e.type not in NO_ATTEMPT}
    return keys, {e.task_id for e in deliveries.values() if e.task_id}, ran


class Fold:
    """The rows one batch of events touches, changed in memory; no database, no Redis."""

    def __init__(self, paused: dict[tuple[str, str], datetime] | None = None) -> None:
        self.paused = {} if paused is None else paused  # (queue, account) -> pause ends
        self.by_key: dict[str, JobRow] = {}
        self.by_task: dict[str, JobRow] = {}
        self.attempts: dict[str, list[AttemptRow]] = {}  # delivery id -> attempts, oldest first
        self.dirty: dict[str, JobRow] = {}
        self.new_attempts: list[AttemptRow] = []
        self.closed_attempts: dict[int, AttemptRow] = {}  # by id(): stored rows to update
        self.account_updates: list[tuple[str, dict, dict]] = []

    def carry(self, before: Fold) -> None:
        """Start from the rows of the batch before, as it left them (newer than the tables
        while its write is under way)."""
        for job in before.dirty.values():
            job.stored = True  # as its attempts: written before this batch is
            self.by_key[job.job_key] = self.by_task[job.task_id] = job
        touched = [*before.new_attempts, *before.closed_attempts.values()]
        for attempt in touched:  # with all its delivery's attempts, oldest first
            self.attempts[attempt.delivery_id] = before.attempts[attempt.delivery_id]
        for attempt in before.new_attempts:
            attempt.stored = True  # its batch writes it before this one's write starts

    def unknown(self, events: Iterable[Event]) -> tuple[set[str], set[str], set[str]]:
        """:func:`rows_needed` less the rows this fold holds already."""
        keys, tasks, deliveries = rows_needed(events)
        return keys - self.by_key.keys(), tasks - self.by_task.keys(), deliveries - set(
            self.attempts)

    def know(self, jobs: Iterable[JobRow], attempts: Iterable[AttemptRow] = ()) -> None:
        """The stored rows the events may touch: jobs, and attempts oldest first."""
        for job in jobs:
            self.by_key[job.job_key] = job
            self.by_task[job.task_id] = job
        for attempt in attempts:
            self.attempts.setdefault(attempt.delivery_id, []).append(attempt)

    def apply(self, events: Iterable[Event]) -> None:
        """Fold ``events``, in stream order, into the rows."""
        for event in events:
            handler = HANDLERS.get(event.type)
            if handler is None:
                logger.debug("fairqueue recorder: ignoring event type %r", event.type)
                continue
            handler(self, event)

    # -- helpers -------------------------------------------------------------------------------

    def job_for(self, event: Event) -> JobRow | None:
        """The job of a job event, or None when it is unknown or the event is stale."""
        job = self.by_task.get(event.task_id or "")
        if job is None:
            logger.debug("fairqueue recorder: %s of unknown job %s skipped", event.type,
                         event.job_id)
            return None
        if _retries(event.job_id or "") < _retries(job.delivery_id):
            return None  # an earlier delivery's late news: the job has moved on
        self.dirty[job.job_key] = job
        return job

    def _add_attempt(self, job: JobRow, outcome: str, error: str = "",
                     finished: datetime | None = None) -> None:
        """Give the job's latest attempt (as its row describes it) an Attempt row of its own,
        unless it has one (a batch applied again after its ack was lost)."""
        attempts = self.attempts.setdefault(job.delivery_id, [])
        if any(a.started_at == job.started_at for a in attempts):
            return
        attempt = AttemptRow(delivery_id=job.delivery_id, number=job.attempts,
                             worker=job.worker, started_at=job.started_at,
                             finished_at=finished, outcome=outcome, error=error,
                             job_key=job.job_key)
        attempts.append(attempt)
        self.new_attempts.append(attempt)

    def keep_latest_attempt(self, job: JobRow) -> None:
        """Before a job moves past its latest attempt with no row of its own (one that
        succeeded, or one still running whose end was never heard of), write it one."""
        if job.started_at is None or job.status not in (Status.RUNNING, Status.SUCCEEDED):
            return
        if job.status == Status.SUCCEEDED:
            self._add_attempt(job, Outcome.SUCCEEDED, finished=job.finished_at)
        else:
            self._add_attempt(job, Outcome.RUNNING)

    def close_attempt(self, job: JobRow, was_running: bool, event: Event, outcome: str,
                      error: str = "") -> None:
        """The job's attempt of ``event``'s delivery ends (``was_running``: the job ran it
        until this event): an attempt row written running is closed; an attempt that ends
        other than in success gets its row; one that succeeded is told by the job row."""
        attempts = self.attempts.get(event.job_id or "")
        if (attempts and attempts[-1].outcome == Outcome.RUNNING
                and job.started_at in (None, attempts[-1].started_at)):
            attempt = attempts[-1]
            attempt.outcome, attempt.error = outcome, error
            attempt.finished_at = _time(event.at)
            if attempt.stored:
                self.closed_attempts[id(attempt)] = attempt
            return
        if (outcome == Outcome.SUCCEEDED or not was_running or job.started_at is None
                or job.delivery_id != event.job_id):
            return
        self._add_attempt(job, outcome, error, _time(event.at))

    def run_at(self, job: JobRow, due: datetime | None, now: datetime | None) -> datetime | None:
        """When a job due at ``due`` (None: now) runs: later if its account is paused by a
        limit, since its job is ready in Redis but waits for the account; None for now."""
        pause_ends = self.paused.get((job.queue, job.account))
        if pause_ends and now and pause_ends > (due or now):
            return pause_ends
        return due

    def same_account(self, event: Event) -> list[JobRow]:
        return [job for job in self.by_key.values()
                if job.queue == event.queue and job.account == event.account]

    # -- job events ----------------------------------------------------------------------------

    def on_enqueued(self, event: Event) -> None:
        if not event.task_id:
            return
        key = key_of(event)
        job = self.by_key.get(key)
        if job is None:
            job = JobRow(job_key=key, task_id=event.task_id, enqueued_at=_time(event.at))
        elif job.task_id != event.task_id:
            # the key's earlier job is gone (replayed from the dead letters, or done long ago)
            self.keep_latest_attempt(job)
            self.by_task.pop(job.task_id, None)
            job.task_id, job.enqueued_at = event.task_id, _time(event.at)
            job.started_at = job.finished_at = None
            job.last_error = job.external_id = job.worker = job.dead_reason = ""
        elif _retries(event.job_id or "") < _retries(job.delivery_id):
            return
        job.enqueued_at = job.enqueued_at or _time(event.at)
        job.delivery_id = event.job_id or ""
        job.task = event.task or job.task
        job.queue = event.queue or job.queue
        job.account = event.account or job.account
        job.args = _args(event)
        job.args_text = arguments_text(job.args)
        job.attempts = event.attempt - 1
        due = _time(event.due) if event.due and event.due > event.at else None
        job.waiting_since = due or _time(event.at)
        due = self.run_at(job, due, _time(event.at))
        job.status = Status.DEFERRED if due else Status.READY
        job.next_run_at = due
        self.by_key[key] = self.by_task[job.task_id] = self.dirty[key] = job

    def on_promoted(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status != Status.DEFERRED or job.delivery_id != event.job_id:
            return
        due = self.run_at(job, None, _time(event.at))
        job.status, job.next_run_at = (Status.DEFERRED if due else Status.READY), due

    def on_running(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or (job.status in FINAL and job.delivery_id == event.job_id):
            return
        started = _time(event.at)
        if job.started_at is not None and started is not None and job.started_at < started:
            self.keep_latest_attempt(job)  # a redelivery: the attempt before never ended
        job.status, job.started_at, job.next_run_at = Status.RUNNING, started, None
        job.waiting_since = None
        job.worker = event.worker
        job.attempts = event.attempt
        job.delivery_id = event.job_id or job.delivery_id

    def on_succeeded(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        self.close_attempt(job, job.status == Status.RUNNING, event, Outcome.SUCCEEDED)
        job.status, job.finished_at, job.next_run_at = Status.SUCCEEDED, _time(event.at), None
        job.waiting_since = None
        job.external_id = event.external_id

    def on_retrying(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        error = event.error or event.reason
        self.close_attempt(job, job.status == Status.RUNNING, event, Outcome.RETRYING, error)
        job.last_error = error
        job.status, job.next_run_at = Status.DEFERRED, _time(event.due)
        job.waiting_since = _time(event.due) or _time(event.at)

    def on_failed(self, event: Event) -> None:
        # the dead event follows; failed until then, so a lost dead event still shows a failure
        job = self.job_for(event)
        if job is None:
            return
        error = event.error or event.reason
        self.close_attempt(job, job.status == Status.RUNNING, event, Outcome.FAILED, error)
        job.last_error = error
        job.status, job.finished_at = Status.FAILED, _time(event.at)
        job.waiting_since, job.dead_reason = None, event.reason or job.dead_reason

    def on_dead(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        reason = event.reason
        # rejected or poison: no failed event closed the attempt
        self.close_attempt(job, job.status == Status.RUNNING, event, Outcome.DEAD, reason)
        job.status, job.finished_at, job.next_run_at = Status.DEAD, _time(event.at), None
        job.last_error = job.last_error or reason
        job.waiting_since, job.dead_reason = None, reason or job.dead_reason

    def on_requeued(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status in FINAL:
            return
        self.close_attempt(job, job.status == Status.RUNNING, event, Outcome.REQUEUED,
                           event.reason or "given back by the worker")
        job.status, job.next_run_at = Status.READY, None
        job.waiting_since = _time(event.at)

    def on_cancelled(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status in FINAL:
            return
        job.status, job.finished_at, job.next_run_at = Status.REVOKED, _time(event.at), None
        job.waiting_since = None

    def on_expired(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status in FINAL:
            return
        job.status, job.finished_at, job.next_run_at = Status.REVOKED, _time(event.at), None
        job.last_error, job.waiting_since = EXPIRED, None

    def on_acked(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status != Status.RUNNING or job.delivery_id != event.job_id:
            return
        self.close_attempt(job, True, event, Outcome.FAILED, NO_OUTCOME)
        job.status, job.finished_at, job.last_error = Status.FAILED, _time(event.at), NO_OUTCOME
        job.waiting_since = None

    # -- account events ------------------------------------------------------------------------

    def on_account_deferred(self, event: Event) -> None:
        due = _time(event.due)
        assert due is not None and event.queue and event.account
        self.paused[(event.queue, event.account)] = due
        for job in self.same_account(event):
            if job.status == Status.READY:
                job.status, job.next_run_at = Status.DEFERRED, due
                self.dirty[job.job_key] = job
        self.account_updates.append((
            "deferred", {"queue": event.queue, "account": event.account, "status": Status.READY},
            {"status": Status.DEFERRED, "next_run_at": due}))

    def on_account_ready(self, event: Event) -> None:
        at = _time(event.at)
        assert at is not None and event.queue and event.account
        self.paused.pop((event.queue, event.account), None)
        for job in self.same_account(event):
            if job.status == Status.DEFERRED and job.next_run_at and job.next_run_at <= at:
                job.status, job.next_run_at = Status.READY, None
                self.dirty[job.job_key] = job
        self.account_updates.append((
            "ready", {"queue": event.queue, "account": event.account,
                      "status": Status.DEFERRED, "next_run_at__lte": at},
            {"status": Status.READY, "next_run_at": None}))


#: The one handler of each event type.
HANDLERS: dict[str, Callable[[Fold, Event], None]] = {
    EventType.ENQUEUED: Fold.on_enqueued,
    EventType.PROMOTED: Fold.on_promoted,
    EventType.RUNNING: Fold.on_running,
    EventType.REQUEUED: Fold.on_requeued,
    EventType.ACKED: Fold.on_acked,
    EventType.DEAD: Fold.on_dead,
    EventType.ACCOUNT_DEFERRED: Fold.on_account_deferred,
    EventType.ACCOUNT_READY: Fold.on_account_ready,
    EventType.CANCELLED: Fold.on_cancelled,
    EventType.EXPIRED: Fold.on_expired,
    EventType.SUCCEEDED: Fold.on_succeeded,
    EventType.FAILED: Fold.on_failed,
    EventType.RETRYING: Fold.on_retrying,
}
