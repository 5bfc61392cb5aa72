"""The recorder's writer: reads the rows a fold needs and writes back what it changed.

A fold's changes become :class:`Writes`, plain tuples of column values (rows.py), before they
are written, so the next batch can be folded while they are. On PostgreSQL they go through COPY
(:class:`PostgresCopy`), elsewhere through Django's bulk operations; both in one transaction.
The fold itself (fold.py) never touches the database; this module and recording.py are the
only writers of Job rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from ....protocol import Event
from ..columns import to_column
from ..models import Attempt, Job
from .fold import Fold
from .rows import (
    ARGS_FIELDS,
    ATTEMPT_FIELDS,
    ATTEMPT_LOADED,
    CLOSE_FIELDS,
    STATE_FIELDS,
    attempt_columns,
    attempt_row,
    closed_attempt_columns,
    fresh_job_columns,
    job_columns,
    job_row,
)

logger = logging.getLogger("celery_fairqueue.contrib.django.recorder")
#: A set of ids passed as one JSON array (:func:`_ids_json`), matched through an index.
IDS = "ANY(ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)))"


@dataclass
class Writes:
    """One batch's writes as column values: one row per job, the jobs that were enqueued in
    the batch with their arguments (``new`` to insert, ``fresh`` to update), the others
    without (``moved``)."""

    account_updates: list[tuple[str, dict, dict]] = field(default_factory=list)
    new: list[tuple] = field(default_factory=list)
    fresh: list[tuple] = field(default_factory=list)
    moved: list[tuple] = field(default_factory=list)
    new_attempts: list[tuple] = field(default_factory=list)
    closed_attempts: list[tuple] = field(default_factory=list)


class PostgresCopy:
    """The batch's writes on PostgreSQL through COPY, in the batch's transaction.

    Django's bulk_create spends most of the recorder's time turning values into SQL in Python;
    COPY hands them over in C. New jobs are copied straight into the table; every other write
    goes through a staging table emptied at commit, then one statement: an upsert of the jobs
    enqueued again, an update of the moved ones (their arguments, the largest values, stay as
    stored), an insert of the attempts (joined to their job by its key, so no job id travels
    back to Python) and an update of the attempts closed.
    """

    def __init__(self, cursor: Any, now: datetime) -> None:
        self.cursor = cursor  # the driver's (psycopg) cursor
        self.now = now

    def _stage(self, name: str, table: str, columns: list[str], rows: list[tuple]) -> None:
        self.cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS "
                            f"SELECT {', '.join(columns)} FROM {table} WITH NO DATA")
        with self.cursor.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def insert_jobs(self, rows: list[tuple]) -> None:
        """Jobs new to the table (only this stream's leader writes its jobs' keys): copied
        straight in; a key stored after all fails the batch, which is then applied event by
        event, each on the rows as stored."""
        if not rows:
            return
        names = ["job_key", *STATE_FIELDS, *ARGS_FIELDS, "updated_at"]
        args = names.index("args")
        with self.cursor.copy(f"COPY {Job._meta.db_table} ({', '.join(names)}) FROM STDIN"
                              ) as copy:
            for row in rows:
                copy.write_row((*row[:args], json.dumps(row[args]), *row[args + 1:],
                                self.now))

    def upsert_jobs(self, rows: list[tuple]) -> None:
        if not rows:
            return
        names = ["job_key", *STATE_FIELDS, *ARGS_FIELDS]
        args = names.index("args")
        rows = [(*row[:args], json.dumps(row[args]), *row[args + 1:]) for row in rows]
        self._stage("fairqueue_job_fresh", Job._meta.db_table, names, rows)
        listed = ", ".join(names)
        updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in names[1:])
        self.cursor.execute(
            f"INSERT INTO {Job._meta.db_table} ({listed}, updated_at) SELECT {listed}, %s FROM "
            f"fairqueue_job_fresh ON CONFLICT (job_key) DO UPDATE SET {updates}, "
            "updated_at = EXCLUDED.updated_at", [self.now])

    def update_jobs(self, rows: list[tuple]) -> None:
        if not rows:
            return
        names = ["job_key", *STATE_FIELDS]
        self._stage("fairqueue_job_moved", Job._meta.db_table, names, rows)
        updates = ", ".join(f"{name} = s.{name}" for name in STATE_FIELDS)
        self.cursor.execute(f"UPDATE {Job._meta.db_table} AS j SET {updates}, updated_at = %s "
                            "FROM fairqueue_job_moved AS s WHERE j.job_key = s.job_key",
                            [self.now])

    def insert_attempts(self, rows: list[tuple]) -> None:
        if not rows:
            return
        self.cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS fairqueue_attempt_new (seq serial, job_key "
            "varchar(200), number integer, delivery_id varchar(300), worker varchar(255), "
            "started_at timestamptz, finished_at timestamptz, outcome varchar(16), error text) "
            "ON COMMIT DELETE ROWS")
        with self.cursor.copy(f"COPY fairqueue_attempt_new ({', '.join(ATTEMPT_FIELDS)}) "
                              "FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        names = ATTEMPT_FIELDS[1:]
        self.cursor.execute(
            f"INSERT INTO {Attempt._meta.db_table} (job_id, {', '.join(names)}) SELECT j.id, "
            f"{', '.join(f's.{name}' for name in names)} FROM fairqueue_attempt_new AS s JOIN "
            f"{Job._meta.db_table} AS j ON j.job_key = s.job_key ORDER BY s.seq")

    def close_attempts(self, rows: list[tuple]) -> None:
        if not rows:
            return
        table = Attempt._meta.db_table
        self._stage("fairqueue_attempt_closed", table, CLOSE_FIELDS, rows)
        self.cursor.execute(
            f"UPDATE {table} AS a SET outcome = s.outcome, error = s.error, finished_at = "
            "s.finished_at FROM fairqueue_attempt_closed AS s WHERE a.delivery_id = "
            "s.delivery_id AND a.started_at IS NOT DISTINCT FROM s.started_at AND a.outcome = "
            f"'{Attempt.Outcome.RUNNING}'")


def load(fold: Fold, events: Sequence[Event], db: str) -> None:
    """Hand ``fold`` the stored rows ``events`` may touch that it does not hold yet, in two
    queries (on PostgreSQL with each set of ids as one JSON array: no SQL to build)."""
    keys, tasks, deliveries = fold.unknown(events)
    job_fields = ["job_key", *STATE_FIELDS]
    connection = connections[db]
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        # the driver's own cursor binds on the server (Django's client-side binding would
        # quote each id of the arrays in Python) and reads the rows in binary
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            if keys or tasks:
                cursor.execute(f"SELECT {', '.join(job_fields)} FROM {Job._meta.db_table} "
                               f"WHERE job_key = {IDS} OR task_id = {IDS}",
                               [_ids_json(keys), _ids_json(tasks)], binary=True)
                fold.know(map(job_row, cursor.fetchall()))
            if deliveries:
                cursor.execute(f"SELECT {', '.join(ATTEMPT_LOADED)} FROM "
                               f"{Attempt._meta.db_table} WHERE delivery_id = {IDS} "
                               "ORDER BY id", [_ids_json(deliveries)], binary=True)
                fold.know((), map(attempt_row, cursor.fetchall()))
        return
    if keys or tasks:
        jobs = Job.objects.using(db).filter(Q(job_key__in=_columns(keys))
                                            | Q(task_id__in=_columns(tasks)))
        fold.know(map(job_row, jobs.values_list(*job_fields)))
    if deliveries:
        attempts = (Attempt.objects.using(db).filter(delivery_id__in=_columns(deliveries))
                    .order_by("id").values_list(*ATTEMPT_LOADED))
        fold.know((), map(attempt_row, attempts))


def _columns(ids: set[str]) -> list[str]:
    return [to_column(value) for value in ids]


def _ids_json(ids: set[str]) -> str:
    """Ids as one JSON array: json.dumps builds it in C, where the driver dumps an array
    parameter element by element in Python."""
    return json.dumps(_columns(ids))


def prepare(fold: Fold) -> Writes:
    """What ``fold`` changed, as column values (the fold may change on after this)."""
    writes = Writes(account_updates=[
        (update, {name: to_column(value) if name in ("queue", "account") else value
                  for name, value in where.items()}, values)
        for update, where, values in fold.account_updates])
    for job in fold.dirty.values():
        if job.args is None:
            writes.moved.append(job_columns(job))
        else:
            (writes.fresh if job.stored else writes.new).append(fresh_job_columns(job))
    writes.new_attempts = [attempt_columns(attempt) for attempt in fold.new_attempts]
    writes.closed_attempts = [closed_attempt_columns(a) for a in fold.closed_attempts.values()]
    return writes


def write(writes: Writes, db: str) -> None:
    """Write a batch in one transaction: the account-wide updates, then jobs and attempts."""
    now = timezone.now()
    with transaction.atomic(using=db):
        for update, where, values in writes.account_updates:
            Job.objects.using(db).filter(**where).update(**values, updated_at=now)
            logger.debug("fairqueue recorder: %s %s", update, where)
        connection = connections[db]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor, connection.wrap_database_errors:
                copy = PostgresCopy(cursor.cursor, now)  # the driver's errors as Django's
                copy.insert_jobs(writes.new)
                copy.upsert_jobs(writes.fresh)
                copy.update_jobs(writes.moved)
                copy.insert_attempts(writes.new_attempts)
                copy.close_attempts(writes.closed_attempts)
            return
        _write_with_django(writes, db, now)


def _write_with_django(writes: Writes, db: str, now: datetime) -> None:
    """The writes through Django's bulk operations, for databases other than PostgreSQL."""
    jobs = Job.objects.using(db)
    for rows, names in ((writes.new + writes.fresh, STATE_FIELDS + ARGS_FIELDS),
                        (writes.moved, STATE_FIELDS)):
        if rows:
            jobs.bulk_create([Job(**dict(zip(["job_key", *names], row, strict=True)),
                                  updated_at=now) for row in rows],
                             update_conflicts=True, unique_fields=["job_key"],
                             update_fields=[*names, "updated_at"])
    if writes.new_attempts:
        ids = dict(jobs.filter(job_key__in={row[0] for row in writes.new_attempts})
                   .values_list("job_key", "id"))
        Attempt.objects.using(db).bulk_create(
            Attempt(job_id=ids[row[0]], **dict(zip(ATTEMPT_FIELDS[1:], row[1:], strict=True)))
            for row in writes.new_attempts if row[0] in ids)
    for delivery, started, outcome, error, finished in writes.closed_attempts:
        Attempt.objects.using(db).filter(
            delivery_id=delivery, started_at=started, outcome=Attempt.Outcome.RUNNING,
        ).update(outcome=outcome, error=error, finished_at=finished)
