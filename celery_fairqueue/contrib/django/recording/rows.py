"""The recorder's rows: a Job or Attempt row as plain values, and as its columns hold them.

The fold (fold.py) changes these in memory rather than model objects: building a model object
costs more than folding all of its job's events. The writer (writer.py) loads them from the
tables and writes them back as tuples of column values (:func:`job_columns`,
:func:`attempt_columns`), with ids in their lossless form and texts cut to fit (columns.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter, le
from typing import Any

from django.db.models import CharField, TextField

from ..columns import ID_FIELDS, from_column, to_column, to_text_column
from ..models import Attempt, Job

#: The Job columns the fold reads and changes, in :class:`JobRow`'s order, after ``job_key``.
STATE_FIELDS = ["task_id", "delivery_id", "task", "queue", "account", "status", "attempts",
                "enqueued_at", "next_run_at", "started_at", "finished_at", "last_error",
                "waiting_since", "dead_reason", "external_id", "worker"]
#: What an ``enqueued`` event sets besides: the arguments, written only when they change.
ARGS_FIELDS = ["args", "args_text"]
#: An attempt as the writer inserts it (``job_key`` names its job) ...
ATTEMPT_FIELDS = ["job_key", "number", "delivery_id", "worker", "started_at", "finished_at",
                  "outcome", "error"]
#: ... and as it closes one stored before: found by its delivery and start.
CLOSE_FIELDS = ["delivery_id", "started_at", "outcome", "error", "finished_at"]
ATTEMPT_LOADED = ["delivery_id", "number", "worker", "started_at", "finished_at", "outcome",
                  "error"]


@dataclass(slots=True, eq=False)
class JobRow:
    """A Job row; ``args`` is None while the stored arguments stand, ``stored`` once the
    table holds the row (a new one is inserted, a stored one updated)."""

    job_key: str
    task_id: str
    delivery_id: str = ""
    task: str = ""
    queue: str = ""
    account: str = ""
    status: str = Job.Status.READY
    attempts: int = 0
    enqueued_at: datetime | None = None
    next_run_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str = ""
    waiting_since: datetime | None = None
    dead_reason: str = ""
    external_id: str = ""
    worker: str = ""
    args: dict | None = None
    args_text: str = ""
    stored: bool = False


@dataclass(slots=True, eq=False)
class AttemptRow:
    """An Attempt row; ``stored`` once the table holds it (closing it is then an update)."""

    delivery_id: str
    number: int
    worker: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    outcome: str = Attempt.Outcome.RUNNING
    error: str = ""
    job_key: str = ""
    stored: bool = False


def _fitter(model: type[Job] | type[Attempt], name: str) -> Callable[[Any], Any] | None:
    """How a value becomes its column's: ids lossless, texts readable, both cut to fit."""
    field = (Job if name == "job_key" else model)._meta.get_field(name)
    if not isinstance(field, CharField | TextField):
        return None
    limit = field.max_length or None
    convert = to_column if name in ID_FIELDS else to_text_column

    def fit(value: str) -> str:
        if value.isascii() and "\x00" not in value and (limit is None or len(value) <= limit):
            return value
        return convert(value)[:limit]
    return fit


def _columns(model: type[Job] | type[Attempt], names: list[str]
             ) -> Callable[[Any], tuple]:
    get = attrgetter(*names)
    fitters = [(n, fit) for n, name in enumerate(names) if (fit := _fitter(model, name))]
    positions = [n for n, _ in fitters]
    texts = (itemgetter(*positions) if len(positions) > 1
             else lambda values: (values[positions[0]],))
    limits = [(Job if names[n] == "job_key" else model)._meta.get_field(names[n]).max_length
              or sys.maxsize for n, _ in fitters]

    def columns(row: Any) -> tuple:
        values = get(row)
        found = texts(values)
        try:  # the usual row, ASCII and short, checked at once rather than a call a column
            joined = "".join(found)
        except TypeError:
            joined = "\x00"
        if joined.isascii() and "\x00" not in joined and all(map(le, map(len, found), limits)):
            return values
        fitted = list(values)
        for n, fit in fitters:
            fitted[n] = fit(fitted[n])
        return tuple(fitted)
    return columns


#: A row as the tuple of its columns: a job's state, a fresh job's (with its arguments), an
#: attempt to insert, an attempt to close.
job_columns = _columns(Job, ["job_key", *STATE_FIELDS])
fresh_job_columns = _columns(Job, ["job_key", *STATE_FIELDS, *ARGS_FIELDS])
attempt_columns = _columns(Attempt, ATTEMPT_FIELDS)
closed_attempt_columns = _columns(Attempt, CLOSE_FIELDS)

_JOB_IDS = [n for n, name in enumerate(["job_key", *STATE_FIELDS]) if name in ID_FIELDS]
_ATTEMPT_IDS = [n for n, name in enumerate(ATTEMPT_LOADED) if name in ID_FIELDS]


def job_row(values: tuple) -> JobRow:
    """A loaded job (``job_key`` and :data:`STATE_FIELDS`) with its ids as the store's."""
    row = JobRow(*_ids(values, _JOB_IDS))
    row.stored = True
    return row


def attempt_row(values: tuple) -> AttemptRow:
    """A loaded attempt (:data:`ATTEMPT_LOADED`), stored."""
    row = AttemptRow(*_ids(values, _ATTEMPT_IDS))
    row.stored = True
    return row


def _ids(values: tuple, positions: list[int]) -> list:
    found = list(values)
    for n in positions:
        if not found[n].isascii():
            found[n] = from_column(found[n])
    return found
