"""Beat for fair tasks: each scheduled occurrence is enqueued once, however many beats run.

Run ``celery -A proj beat -S celery_fairqueue.beat:FairScheduler`` (django-celery-beat's
``DatabaseScheduler`` plus this) or ``-S celery_fairqueue.beat:FairPersistentScheduler``
(Celery's file-based default plus this). A second beat, started for availability or by
mistake, sends every due entry too; for a fair task the scheduler gives the job the business
key (schedule name, occurrence slot), so the fair store's enqueue dedupe keeps the first and
hands the existing job to the second.

The slot is the time of sending truncated to the schedule's period: an interval schedule's
interval, the minute for crontab and solar schedules (they never fire twice in a minute), the
clocked time of a one-off. The time is Redis server time, so beats on machines with skewed
clocks agree. A beat fires an entry a little after it is due and at most once per period, so
two beats sending "the same" occurrence land in one slot; what beats cannot agree on is an
occurrence that falls within a few milliseconds of a slot boundary, which they may then send
as two consecutive slots (each still once).

The key reaches the job through the ``job_key=`` option of ``apply_async``, which the fair
publish path honours in place of the key the task's ``job_key`` spec would derive. Plain
(non-fair) tasks are sent as Celery sends them.

This module imports Django only when ``FairScheduler`` is asked for.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from celery import schedules
from celery.beat import PersistentScheduler, ScheduleEntry, Scheduler

from .idempotency import hash_identity
from .protocol import is_fair
from .store import store_for

MINUTE = 60.0


def occurrence_slot(schedule: Any, now: float) -> datetime:
    """The occurrence a send at ``now`` (epoch seconds) belongs to, for ``schedule``."""
    clocked_time = getattr(schedule, "clocked_time", None)
    if isinstance(clocked_time, datetime):
        return clocked_time.astimezone(UTC)
    period = MINUTE
    if isinstance(schedule, schedules.schedule) and schedule.run_every.total_seconds() > 0:
        period = schedule.run_every.total_seconds()
    return datetime.fromtimestamp(now - now % period, UTC)


def occurrence_key(task_name: str, entry_name: str, slot: datetime) -> str:
    """The business key of one occurrence of a schedule entry."""
    return hash_identity(["beat", task_name, entry_name, slot.isoformat()])


class FairSchedulerMixin(Scheduler):
    """Adds the occurrence key to the jobs of fair tasks; mix into any Celery scheduler."""

    def apply_async(self, entry: ScheduleEntry, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> Any:
        if advance:  # advancing makes a new entry, which would drop the key added below
            entry = self.reserve(entry)
        if not is_fair(self.app.tasks.get(entry.task)):
            return super().apply_async(entry, producer, advance=False, **kwargs)
        slot = occurrence_slot(entry.schedule, store_for(self.app).server_time())
        options = entry.options  # entries do not copy (model entries rebuild from their row)
        entry.options = {**options, "job_key": occurrence_key(entry.task, entry.name, slot)}
        try:
            return super().apply_async(entry, producer, advance=False, **kwargs)
        finally:
            entry.options = options


class FairPersistentScheduler(FairSchedulerMixin, PersistentScheduler):
    """Celery's default scheduler (schedule in a shelve file), once per occurrence."""


def __getattr__(name: str) -> Any:
    # FairScheduler needs django-celery-beat, hence Django: built when first asked for.
    if name == "FairScheduler":
        from django_celery_beat.schedulers import DatabaseScheduler

        scheduler = type("FairScheduler", (FairSchedulerMixin, DatabaseScheduler), {
            "__doc__": "django-celery-beat's DatabaseScheduler, once per occurrence.",
            "__module__": __name__,
        })
        globals()[name] = scheduler
        return scheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
