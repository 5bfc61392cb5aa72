"""Recording: how a batch of events becomes Job and Attempt rows, and the other writes of those
rows (a replay's reset, a purge's delete). This module and recorder.py are the only writers of
Job rows; the admin and the management command call the functions here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import CharField, Q, TextField
from django.utils import timezone

from ...protocol import Event, delivery_id, parse_delivery_id, task_id_of
from .models import Attempt, Job

logger = logging.getLogger("celery_fairqueue.contrib.django.recorder")

Status = Job.Status
Outcome = Attempt.Outcome
NO_OUTCOME = "settled without an outcome (revoked or rejected)"
EXPIRED = "expired before it ran (Celery's expires): dropped from the fair store"
FINAL = (Status.SUCCEEDED, Status.DEAD, Status.REVOKED)
JOB_FIELDS = ["task_id", "delivery_id", "task", "queue", "account", "status", "attempts", "args",
              "enqueued_at", "next_run_at", "started_at", "finished_at", "last_error",
              "waiting_since", "dead_reason", "external_id", "worker", "updated_at"]
CLOSE_FIELDS = ["outcome", "error", "finished_at"]



def _time(seconds: float | None) -> datetime | None:
    """A stream time as a datetime; one past what a datetime holds (a Retry-After of years,
    before max_retry_delay cut it) is the latest one, not an error."""
    if not seconds:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return datetime.max.replace(tzinfo=UTC) if seconds > 0 else None


def _retries(job_id: str) -> int:
    """The retry count in a delivery id ``<task id>:<retries>`` (-1 when there is none)."""
    task_id, retries = parse_delivery_id(job_id)
    return retries if task_id != job_id else -1


class PostgresCopy:
    """The batch's writes on PostgreSQL through COPY, in the batch's transaction.

    Django's bulk_create spends most of the recorder's time turning values into SQL in Python;
    COPY hands them over in C (a quarter of the client time, and less server time), which is
    what keeps recording off the critical path of a busy machine. Jobs and closed attempts go
    through staging tables emptied at commit, then one upsert or update.
    """

    JOB_COLUMNS = ["job_key", *JOB_FIELDS]
    ATTEMPT_COLUMNS = ["job_id", "number", "delivery_id", "worker", "started_at", "finished_at",
                       "outcome", "error"]

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor  # the driver's (psycopg) cursor

    def _stage(self, name: str, table: str, columns: list[str], rows: list[tuple]) -> None:
        names = ", ".join(columns)
        self.cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS "
                            f"SELECT {names} FROM {table} WITH NO DATA")
        self._copy(name, columns, rows)

    def _copy(self, table: str, columns: list[str], rows: list[tuple]) -> None:
        with self.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def upsert_jobs(self, jobs: list[Job], now: datetime) -> None:
        if not jobs:
            return
        for job in jobs:
            job.updated_at = now
        rows = [tuple(json.dumps(job.args) if name == "args" else getattr(job, name)
                      for name in self.JOB_COLUMNS) for job in jobs]
        table, names = Job._meta.db_table, ", ".join(self.JOB_COLUMNS)
        self._stage("fairqueue_job_stage", table, self.JOB_COLUMNS, rows)
        updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in JOB_FIELDS)
        self.cursor.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM "
                            f"fairqueue_job_stage ON CONFLICT (job_key) DO UPDATE SET {updates} "
                            "RETURNING id, job_key")
        ids = {key: pk for pk, key in self.cursor.fetchall()}
        for job in jobs:
            job.pk = ids[job.job_key]

    def insert_attempts(self, attempts: list[Attempt]) -> None:
        rows = [(a.job.pk, *(getattr(a, name) for name in self.ATTEMPT_COLUMNS[1:]))
                for a in attempts]
        if rows:
            self._copy(Attempt._meta.db_table, self.ATTEMPT_COLUMNS, rows)

    def close_attempts(self, attempts: list[Attempt]) -> None:
        if not attempts:
            return
        columns = ["id", *CLOSE_FIELDS]
        table = Attempt._meta.db_table
        self._stage("fairqueue_attempt_stage", table, columns,
                    [tuple(getattr(a, name) for name in columns) for a in attempts])
        updates = ", ".join(f"{name} = s.{name}" for name in CLOSE_FIELDS)
        self.cursor.execute(f"UPDATE {table} AS a SET {updates} FROM fairqueue_attempt_stage "
                            "AS s WHERE a.id = s.id")


def _text_fields(model: type[Job] | type[Attempt]) -> list[tuple[str, int | None]]:
    return [(f.attname, f.max_length) for f in model._meta.concrete_fields
            if isinstance(f, CharField | TextField)]


TEXT_FIELDS = {Job: _text_fields(Job), Attempt: _text_fields(Attempt)}


def _fit(row: Job | Attempt) -> Any:
    """Make strings storable: ids in Redis may be longer than their column allows, PostgreSQL
    refuses NUL characters, which an error message may hold, and no database takes a lone
    surrogate (a file name from ``os.fsdecode``): it is kept as its escape."""
    for name, max_length in TEXT_FIELDS[type(row)]:
        value = getattr(row, name)
        if not value.isascii():
            value = value.encode("utf-8", "backslashreplace").decode()
        if "\x00" in value or (max_length and len(value) > max_length):
            value = value.replace("\x00", "")[:max_length]
        setattr(row, name, value)
    return row


def _args(event: Event) -> dict:
    try:  # PostgreSQL's jsonb refuses NUL characters
        shown = json.loads((event.args or "{}").replace("\\u0000", ""))
    except ValueError:
        return {}
    return shown if isinstance(shown, dict) else {"args": shown}


class Batch:
    """The rows one batch of events touches, loaded once, changed in memory, written once."""

    def __init__(self, events: list[Event], db: str,
                 paused: dict[tuple[str, str], datetime] | None = None) -> None:
        self.events = events
        self.db = db
        self.paused = {} if paused is None else paused  # (queue, account) -> pause ends
        self.by_key: dict[str, Job] = {}
        self.by_task: dict[str, Job] = {}
        self.attempts: dict[str, list[Attempt]] = {}  # delivery id -> its attempts, oldest first
        self.dirty: dict[str, Job] = {}
        self.new_attempts: list[Attempt] = []
        self.closed_attempts: dict[int, Attempt] = {}
        self.account_updates: list[tuple[str, dict, dict]] = []

    def load(self) -> None:
        deliveries = {e.job_id: e for e in self.events if e.job_id}
        if not deliveries:
            return
        tasks = {task_id_of(delivery) for delivery in deliveries}
        keys = {self.key_of(e) for e in deliveries.values() if e.type == "enqueued"}
        for job in Job.objects.using(self.db).filter(Q(job_key__in=keys) | Q(task_id__in=tasks)):
            self.by_key[job.job_key] = job
            self.by_task[job.task_id] = job
        for attempt in (Attempt.objects.using(self.db).filter(delivery_id__in=deliveries)
                        .order_by("id")):
            self.attempts.setdefault(attempt.delivery_id, []).append(attempt)

    @staticmethod
    def key_of(event: Event) -> str:
        return event.job_key or f"task:{event.task_id}"

    def apply(self) -> None:
        for event in self.events:
            handler: Callable[[Event], None] | None = getattr(self, f"on_{event.type}", None)
            if handler is None:
                logger.debug("fairqueue recorder: ignoring event type %r", event.type)
                continue
            handler(event)

    def write(self) -> None:
        now = timezone.now()
        for update, where, values in self.account_updates:
            Job.objects.using(self.db).filter(**where).update(**values, updated_at=now)
            logger.debug("fairqueue recorder: %s %s", update, where)
        jobs = [_fit(job) for job in self.dirty.values()]
        attempts = [_fit(attempt) for attempt in self.new_attempts]
        closed = list(self.closed_attempts.values())
        connection = connections[self.db]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor, connection.wrap_database_errors:
                copy = PostgresCopy(cursor.cursor)  # the driver's errors as Django's
                copy.upsert_jobs(jobs, now)
                copy.insert_attempts(attempts)
                copy.close_attempts(closed)
            return
        if jobs:
            Job.objects.using(self.db).bulk_create(
                jobs, update_conflicts=True, unique_fields=["job_key"], update_fields=JOB_FIELDS)
        if attempts:
            Attempt.objects.using(self.db).bulk_create(attempts)
        if closed:
            Attempt.objects.using(self.db).bulk_update(closed, CLOSE_FIELDS)

    # -- helpers -------------------------------------------------------------------------------

    def job_for(self, event: Event) -> Job | None:
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

    def open_attempt(self, event: Event) -> Attempt | None:
        attempts = self.attempts.get(event.job_id or "")
        if attempts and attempts[-1].outcome == Outcome.RUNNING:
            return attempts[-1]
        return None

    def close_attempt(self, event: Event, outcome: str, error: str = "") -> None:
        attempt = self.open_attempt(event)
        if attempt is None:
            return
        attempt.outcome = outcome
        attempt.error = error
        attempt.finished_at = _time(event.at)
        if attempt.pk is not None:
            self.closed_attempts[attempt.pk] = attempt

    def run_at(self, job: Job, due: datetime | None, now: datetime | None) -> datetime | None:
        """When a job due at ``due`` (None: now) runs: later if its account is paused by a
        limit, since its job is ready in Redis but waits for the account; None for now."""
        pause_ends = self.paused.get((job.queue, job.account))
        if pause_ends and now and pause_ends > (due or now):
            return pause_ends
        return due

    def same_account(self, event: Event) -> list[Job]:
        return [job for job in self.by_key.values()
                if job.queue == event.queue and job.account == event.account]

    # -- job events ----------------------------------------------------------------------------

    def on_enqueued(self, event: Event) -> None:
        if not event.task_id:
            return
        key = self.key_of(event)
        job = self.by_key.get(key)
        if job is None:
            job = Job(job_key=key, task_id=event.task_id, enqueued_at=_time(event.at))
        elif job.task_id != event.task_id:
            # the key's earlier job is gone (replayed from the dead letters, or done long ago)
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
        job.status, job.started_at, job.next_run_at = Status.RUNNING, started, None
        job.waiting_since = None
        job.worker = event.worker
        job.attempts = event.attempt
        job.delivery_id = event.job_id or job.delivery_id
        attempts = self.attempts.setdefault(job.delivery_id, [])
        if any(a.started_at == started for a in attempts):
            return  # this batch was applied before and its ack got lost
        attempt = Attempt(job=job, number=event.attempt, delivery_id=job.delivery_id,
                          worker=job.worker, started_at=started)
        attempts.append(attempt)
        self.new_attempts.append(attempt)

    def on_succeeded(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        job.status, job.finished_at, job.next_run_at = Status.SUCCEEDED, _time(event.at), None
        job.waiting_since = None
        job.external_id = event.external_id
        self.close_attempt(event, Outcome.SUCCEEDED)

    def on_retrying(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        error = event.error or event.reason
        job.last_error = error
        job.status, job.next_run_at = Status.DEFERRED, _time(event.due)
        job.waiting_since = _time(event.due) or _time(event.at)
        self.close_attempt(event, Outcome.RETRYING, error)

    def on_failed(self, event: Event) -> None:
        # the dead event follows; failed until then, so a lost dead event still shows a failure
        job = self.job_for(event)
        if job is None:
            return
        error = event.error or event.reason
        job.last_error = error
        job.status, job.finished_at = Status.FAILED, _time(event.at)
        job.waiting_since, job.dead_reason = None, event.reason or job.dead_reason
        self.close_attempt(event, Outcome.FAILED, error)

    def on_dead(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None:
            return
        reason = event.reason
        job.status, job.finished_at, job.next_run_at = Status.DEAD, _time(event.at), None
        job.last_error = job.last_error or reason
        job.waiting_since, job.dead_reason = None, reason or job.dead_reason
        self.close_attempt(event, Outcome.DEAD, reason)  # rejected or poison: no failed event

    def on_requeued(self, event: Event) -> None:
        job = self.job_for(event)
        if job is None or job.status in FINAL:
            return
        job.status, job.next_run_at = Status.READY, None
        job.waiting_since = _time(event.at)
        self.close_attempt(event, Outcome.REQUEUED,
                           event.reason or "given back by the worker")

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
        job.status, job.finished_at, job.last_error = Status.FAILED, _time(event.at), NO_OUTCOME
        job.waiting_since = None
        self.close_attempt(event, Outcome.FAILED, NO_OUTCOME)

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


def record_replay(replayed: dict[str, str]) -> None:
    """Dead letters replayed (old delivery id -> new task id): each row becomes the new job, as
    the recorder makes it when it sees the replay (same business key, the new task id, a fresh
    start). Only from dead, because the recorder may already have seen the new job run."""
    now = timezone.now()
    for old_id, task_id in replayed.items():
        old_task = task_id_of(old_id)
        rows = Job.objects.filter(task_id=old_task, delivery_id=old_id, status=Status.DEAD)
        fresh = {"status": Status.READY, "task_id": task_id,
                 "delivery_id": delivery_id(task_id, 0), "enqueued_at": now,
                 "next_run_at": None, "started_at": None, "finished_at": None,
                 "last_error": "", "external_id": "", "worker": "", "updated_at": now,
                 "waiting_since": now, "dead_reason": ""}
        # a job without a business key is keyed by its task id, which the replay changed
        rows.filter(job_key=f"task:{old_task}").update(job_key=f"task:{task_id}", **fresh)
        rows.update(**fresh)


def record_purge(purged: Sequence[str]) -> None:
    """Dead letters purged for good (delivery ids): their rows go too."""
    for job_id in purged:
        Job.objects.filter(task_id=task_id_of(job_id), delivery_id=job_id,
                           status=Status.DEAD).delete()
