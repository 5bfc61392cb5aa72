"""The recorder's writer: reads the rows a fold needs and writes back what it changed.

On PostgreSQL the rows go through COPY (:class:`PostgresCopy`), elsewhere through Django's bulk
operations; both in the caller's transaction. The fold itself (fold.py) never touches the
database; this module and recording.py are the only writers of Job rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Q
from django.utils import timezone

from ...protocol import Event
from .columns import fit, from_columns, to_column
from .fold import Fold, rows_needed
from .models import Attempt, Job

logger = logging.getLogger("celery_fairqueue.contrib.django.recorder")

JOB_FIELDS = ["task_id", "delivery_id", "task", "queue", "account", "status", "attempts", "args",
              "args_text", "enqueued_at", "next_run_at", "started_at", "finished_at", "last_error",
              "waiting_since", "dead_reason", "external_id", "worker", "updated_at"]
CLOSE_FIELDS = ["outcome", "error", "finished_at"]


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


def load(fold: Fold, events: Sequence[Event], db: str) -> None:
    """Hand ``fold`` the stored rows ``events`` may touch, in two queries."""
    keys, tasks, deliveries = rows_needed(events)
    if not deliveries:
        return
    jobs = Job.objects.using(db).filter(Q(job_key__in=_columns(keys))
                                        | Q(task_id__in=_columns(tasks)))
    attempts = (Attempt.objects.using(db).filter(delivery_id__in=_columns(deliveries))
                .order_by("id"))
    fold.know(map(from_columns, jobs), map(from_columns, attempts))


def _columns(ids: set[str]) -> list[str]:
    return [to_column(value) for value in ids]


def write(fold: Fold, db: str) -> None:
    """Write what ``fold`` changed: the account-wide updates, then jobs and attempts."""
    now = timezone.now()
    for update, where, values in fold.account_updates:
        where = {name: to_column(value) if name in ("queue", "account") else value
                 for name, value in where.items()}
        Job.objects.using(db).filter(**where).update(**values, updated_at=now)
        logger.debug("fairqueue recorder: %s %s", update, where)
    jobs = [fit(job) for job in fold.dirty.values()]
    attempts = [fit(attempt) for attempt in fold.new_attempts]
    closed = [fit(attempt) for attempt in fold.closed_attempts.values()]
    connection = connections[db]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor, connection.wrap_database_errors:
            copy = PostgresCopy(cursor.cursor)  # the driver's errors as Django's
            copy.upsert_jobs(jobs, now)
            copy.insert_attempts(attempts)
            copy.close_attempts(closed)
        return
    if jobs:
        Job.objects.using(db).bulk_create(
            jobs, update_conflicts=True, unique_fields=["job_key"], update_fields=JOB_FIELDS)
    if attempts:
        Attempt.objects.using(db).bulk_create(attempts)
    if closed:
        Attempt.objects.using(db).bulk_update(closed, CLOSE_FIELDS)
