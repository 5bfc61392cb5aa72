"""The other writes of Job rows: a dead-letter replay's reset and a purge's delete. The
recorder (recorder.py: the fold in fold.py, the writer in writer.py) and this module are the
only writers of Job rows; the admin and the management command call the functions here.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from ....protocol import delivery_id, task_id_of
from ..models import Job

Status = Job.Status


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
