"""The query API over recorded job state, for code, the admin and alerting.

Everything here reads the tables the recorder writes (see recorder.py), so it answers "how is
account X doing" without touching Redis. The alerting signal is the age of the oldest ready job
(how long work waits for a worker), not the queue depth: a deep queue that drains fast is fine,
a short one that nobody claims is not.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, F, Max, Min, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from .models import Job

Status = Job.Status
COUNTED = (Status.READY, Status.DEFERRED, Status.RUNNING, Status.SUCCEEDED, Status.FAILED,
           Status.DEAD)
WAITING = (Status.READY, Status.DEFERRED)
BROKEN = (Status.FAILED, Status.DEAD)


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


def account_overview_rows(search: str = "") -> QuerySet[Job, dict[str, Any]]:
    """The account overview as one grouped query, for paging in the database: one row per
    account (whose id contains ``search``, if given), ordered by account. Pass each row through
    :func:`overview_row`.

    The counts and times are conditional aggregates, and the last error (of the account's most
    recently finished failed or dead job) is a correlated subquery, so the cost does not grow
    with a query per account, and a page reads only its own accounts' rows.
    """
    last_broken = (Job.objects.filter(account=OuterRef("account"), status__in=BROKEN)
                   .order_by(F("finished_at").desc(nulls_last=True), "-updated_at", "-id"))
    counts = {str(status): Count("id", filter=Q(status=status)) for status in COUNTED}
    jobs = Job.objects.filter(account__icontains=search) if search else Job.objects.all()
    return (jobs.values("account")
            .annotate(**counts,
                      oldest_ready=Min("enqueued_at", filter=Q(status=Status.READY)),
                      next_run_at=Min("next_run_at", filter=Q(status__in=WAITING)),
                      last_failed_at=Max("finished_at", filter=Q(status__in=BROKEN)),
                      last_error=Subquery(last_broken.values("last_error")[:1]))
            .order_by("account"))


def overview_row(row: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """A row of :func:`account_overview_rows` with the oldest ready job's age in seconds."""
    row = dict(row)
    row["oldest_ready_age"] = _age(row.pop("oldest_ready"), now)
    row["last_error"] = row["last_error"] or ""
    return row


def account_overview(now: datetime | None = None) -> list[dict[str, Any]]:
    """One row per account: job counts by status, oldest ready age, next run, last error."""
    now = now or timezone.now()
    return [overview_row(row, now) for row in account_overview_rows()]
