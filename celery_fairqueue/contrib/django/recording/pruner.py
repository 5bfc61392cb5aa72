"""The pruner: deletes recorded jobs (Job rows with their attempts) past their retention.

``fairqueue_record_retention`` says how long a finished job is kept after it finished, by
status. The pruner walks each status's old rows in ``finished_at`` order through its index,
``fairqueue_record_prune_batch`` at a time, and deletes a batch in one short transaction, so
it never holds a lock for long and the recorder goes on writing beside it. A job the store
still holds (waiting or running again, or a dead letter not yet purged) is kept whatever its
age: held under the row's own delivery, or under any other its business key's marker names
(a replay or retry waiting, running or dead, that the recorder may not have caught up on). It
runs from ``manage.py fairqueue prune``, from the ``prune_records`` task that a beat
schedule can call, and by default in the leading recorder's idle time (recorder.py); each
batch deleted adds to the store's ``pruned`` counter (``fairqueue_pruned_total``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from celery import Celery
from django.db import connections, router, transaction
from django.db.models import Q

from ....settings import RETAINED_STATUSES, settings_for
from ....store import store_for
from ....store.readers.retention import count_pruned, held_jobs
from ..columns import from_column
from ..models import Attempt, Job

# the name it logged under before the app had rooms: logging settings name it
logger = logging.getLogger("celery_fairqueue.contrib.django.pruner")


class Pruner:
    """Deletes the recorded jobs of ``app``'s store that are past their retention."""

    def __init__(self, app: Celery, clock: Callable[[], float] = time.time) -> None:
        settings = settings_for(app)
        self.store = store_for(app)
        self.retention = {status: settings.record_retention.get(status)
                          for status in RETAINED_STATUSES}
        self.batch = settings.record_prune_batch
        self.interval = settings.record_prune_interval
        self.clock = clock
        self.db = router.db_for_write(Job)
        # where each status's walk has got to: (finished_at, id) of the last row looked at
        self._after: dict[str, tuple[datetime, int] | None] = dict.fromkeys(RETAINED_STATUSES)
        self.unfinished = False  # the last call stopped at its time, with more to delete

    def prune(self, seconds: float | None = None) -> int:
        """Delete what is past its retention, a batch a transaction; returns the jobs deleted.
        With ``seconds``, stop after about that long (the rest waits for the next call)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        deleted = 0
        self.unfinished = False
        for status, kept in self.retention.items():
            if kept is None:
                continue
            cutoff = datetime.fromtimestamp(self.clock() - kept, UTC)
            while deadline is None or time.monotonic() < deadline:
                found, done = self._prune_batch(status, cutoff)
                deleted += found
                if done:
                    self._after[status] = None  # walked to the cutoff: next time from the start
                    break
            else:
                self.unfinished = True
                break
        return deleted

    def _prune_batch(self, status: str, cutoff: datetime) -> tuple[int, bool]:
        """One batch of a status's rows older than ``cutoff``: (deleted, whether none is left
        after it)."""
        rows = Job.objects.using(self.db).filter(status=status, finished_at__lt=cutoff)
        after = self._after[status]
        if after is not None:
            rows = rows.filter(Q(finished_at__gt=after[0]) | Q(finished_at=after[0],
                                                                id__gt=after[1]))
        batch = list(rows.order_by("finished_at", "id")
                     .values_list("id", "finished_at", "account", "delivery_id", "job_key")
                     [:self.batch])
        if not batch:
            return 0, True
        self._after[status] = (batch[-1][1], batch[-1][0])
        # held by the row's delivery, or by its business key under another (a replay, a
        # retry the recorder has not caught up on)
        held = held_jobs(self.store, [(from_column(account), from_column(job_id),
                                       from_column(key)) for _, _, account, job_id, key in batch])
        ids = [pk for pk, _, _, job_id, _ in batch if from_column(job_id) not in held]
        deleted = self._delete(ids, status, cutoff) if ids else 0
        count_pruned(self.store, deleted)
        return deleted, len(batch) < self.batch

    def _delete(self, ids: list[int], status: str, cutoff: datetime) -> int:
        """Delete the jobs ``ids`` that are still ``status`` and older than ``cutoff`` (the
        recorder may have moved one on since), with their attempts, in one transaction."""
        marks = ", ".join(["%s"] * len(ids))
        with transaction.atomic(using=self.db), connections[self.db].cursor() as cursor:
            cursor.execute(f"DELETE FROM {Attempt._meta.db_table} WHERE job_id IN (SELECT id "
                           f"FROM {Job._meta.db_table} WHERE id IN ({marks}) AND status = %s "
                           "AND finished_at < %s)", [*ids, status, cutoff])
            cursor.execute(f"DELETE FROM {Job._meta.db_table} WHERE id IN ({marks}) AND "
                           "status = %s AND finished_at < %s", [*ids, status, cutoff])
            deleted = cursor.rowcount
        logger.debug("fairqueue pruner: deleted %d %s jobs", deleted, status)
        return deleted
