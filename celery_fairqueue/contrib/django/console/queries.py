"""The query API over recorded job state, for code, the admin and alerting.

Everything here reads the tables the recorder writes (see recorder.py), so it answers "how is
account X doing" without touching Redis. The alerting signal is the age of the oldest ready job
(how long work waits for a worker), not the queue depth: a deep queue that drains fast is fine,
a short one that nobody claims is not. The account overview is overview.py's.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Min, QuerySet
from django.utils import timezone

from ..models import Job

Status = Job.Status


def jobs_for(account: str, status: str | None = None) -> QuerySet[Job]:
    """The jobs of one account, newest first; ``status`` narrows to one ``Job.Status``."""
    jobs = Job.objects.filter(account=account)
    return jobs.filter(status=status) if status else jobs


def _age(enqueued_at: datetime | None, now: datetime | None) -> float | None:
    if enqueued_at is None:
        return None
    return max(0.0, ((now or timezone.now()) - enqueued_at).total_seconds())


def oldest_ready_age(queue: str | None = None, account: str | None = None,
                     now: datetime | None = None) -> float | None:
    """Seconds the oldest ready job has waited since it was enqueued; None when none is ready."""
    ready = Job.objects.filter(status=Status.READY)
    if queue is not None:
        ready = ready.filter(queue=queue)
    if account is not None:
        ready = ready.filter(account=account)
    return _age(ready.aggregate(oldest=Min("enqueued_at"))["oldest"], now)


def oldest_ready_age_by_queue(now: datetime | None = None) -> dict[str, float]:
    """:func:`oldest_ready_age` of every queue that has a ready job, in one query."""
    now = now or timezone.now()
    rows = (Job.objects.filter(status=Status.READY, enqueued_at__isnull=False)
            .values("queue").annotate(oldest=Min("enqueued_at")).order_by())
    return {row["queue"]: _age(row["oldest"], now) or 0.0 for row in rows}
