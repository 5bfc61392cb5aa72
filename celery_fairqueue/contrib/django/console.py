"""What the support console reads from the database: the overview's page of accounts, an
account's recorded history per queue, throughput over the last hour.

The overview pages in the database, so its cost does not grow with the number of accounts: the
sort by oldest waiting job reads only waiting jobs (``Job.waiting_since``, indexed), the sort by
account walks the account index, and the counts are then read for the page's accounts alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, F, Max, Min, OuterRef, Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast, Substr, TruncMinute
from django.utils import timezone

from .models import Attempt, Job

Status = Job.Status
HOUR = timedelta(hours=1)
SORTS = ("oldest", "account")
FAILED_OUTCOMES = (Attempt.Outcome.RETRYING, Attempt.Outcome.FAILED, Attempt.Outcome.DEAD)
BROKEN = (Status.FAILED, Status.DEAD)


@dataclass
class OverviewPage:
    """One page of the overview: its accounts in order, and where the next page starts."""

    accounts: list[str]
    number: int
    has_next: bool
    waiting_accounts: int | None  # accounts with a waiting job (the oldest-first sort only)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # account -> its figures


def _jobs(search: str) -> QuerySet[Job]:
    return Job.objects.filter(account__icontains=search) if search else Job.objects.all()


def _waiting(now: datetime) -> Q:
    return Q(waiting_since__lte=now)


def overview_accounts(sort: str, search: str, number: int, size: int,
                      now: datetime) -> OverviewPage:
    """The accounts of page ``number`` (from 1): by oldest waiting job (those with a waiting job
    first, oldest first, then the others by id), or by id."""
    start = (max(number, 1) - 1) * size
    if sort == "account":
        accounts = list(_jobs(search).values_list("account", flat=True).distinct()
                        .order_by("account")[start:start + size + 1])
        return OverviewPage(accounts[:size], number, len(accounts) > size, None)
    waiting = (_jobs(search).filter(_waiting(now)).values("account")
               .annotate(oldest=Min("waiting_since")).order_by("oldest", "account"))
    accounts = [row["account"] for row in waiting[start:start + size + 1]]
    count = waiting.count() if start or len(accounts) > size else len(accounts)
    if len(accounts) <= size:  # past the waiting accounts: the others, by id
        skip = max(start - count, 0)
        want = size + 1 - len(accounts)
        others = (_jobs(search).values("account")
                  .annotate(waiting=Count("id", filter=_waiting(now))).filter(waiting=0)
                  .order_by("account").values_list("account", flat=True))
        accounts += list(others[skip:skip + want])
    return OverviewPage(accounts[:size], number, len(accounts) > size, count)


def overview_rows(accounts: list[str], now: datetime) -> dict[str, dict[str, Any]]:
    """Counts by status, oldest waiting, last success and last error of these accounts."""
    if not accounts:
        return {}
    last_broken = (Job.objects.filter(account=OuterRef("account"), status__in=BROKEN)
                   .order_by(F("finished_at").desc(nulls_last=True), "-id"))
    counts = {str(s): Count("id", filter=Q(status=s)) for s in
              (Status.READY, Status.DEFERRED, Status.RUNNING, Status.FAILED, Status.DEAD)}
    rows = (Job.objects.filter(account__in=accounts).values("account")
            .annotate(**counts, oldest_waiting=Min("waiting_since", filter=_waiting(now)),
                      last_success=Max("finished_at", filter=Q(status=Status.SUCCEEDED)),
                      last_error=Subquery(last_broken.values("last_error")[:1]))
            .order_by())
    return {row["account"]: row for row in rows}


def age(since: datetime | None, now: datetime) -> float | None:
    """Seconds from ``since`` to ``now``; None for no time."""
    return None if since is None else max(0.0, (now - since).total_seconds())


def account_queues(account: str, now: datetime) -> dict[str, dict[str, Any]]:
    """Per queue of one account, from the recorded jobs: oldest waiting, running, last success,
    failed attempts and dead letters in the last hour, and the counts by status."""
    hour_ago = now - HOUR
    rows = (Job.objects.filter(account=account).values("queue")
            .annotate(oldest_waiting=Min("waiting_since", filter=_waiting(now)),
                      running=Count("id", filter=Q(status=Status.RUNNING)),
                      waiting=Count("id", filter=_waiting(now)),
                      last_success=Max("finished_at", filter=Q(status=Status.SUCCEEDED)),
                      dead_hour=Count("id", filter=Q(status=Status.DEAD,
                                                     finished_at__gte=hour_ago)),
                      dead=Count("id", filter=Q(status=Status.DEAD)))
            .order_by("queue"))
    found = {row["queue"]: {**row, "failed_hour": 0} for row in rows}
    failures = (Attempt.objects.filter(job__account=account, finished_at__gte=hour_ago,
                                       outcome__in=FAILED_OUTCOMES)
                .values("job__queue").annotate(n=Count("id")).order_by())
    for row in failures:
        found.setdefault(row["job__queue"], {"queue": row["job__queue"]})["failed_hour"] = row["n"]
    return found


def recent_jobs(account: str, limit: int = 20) -> list[Job]:
    """The account's most recently enqueued jobs."""
    return list(Job.objects.filter(account=account).order_by("-enqueued_at", "-id")[:limit])


_THROUGHPUT: dict[str, tuple[float, list[tuple[datetime, int, int]]]] = {}
THROUGHPUT_TTL = 10.0  # seconds; a per-minute chart of the last hour changes little in ten


def throughput(now: datetime, minutes: int = 60) -> list[tuple[datetime, int, int]]:
    """Per minute over the last ``minutes``: (minute, jobs succeeded, jobs dead-lettered).

    Kept for ``THROUGHPUT_TTL`` seconds per database: the overview refreshes itself every few
    seconds, and an hour of a busy deployment is a few hundred thousand rows to count.
    """
    db = Job.objects.db
    held = _THROUGHPUT.get(db)
    if held and held[0] > time.monotonic() and held[1] and \
            held[1][-1][0] == now.replace(second=0, microsecond=0):
        return held[1]
    series = _count_throughput(now, minutes)
    _THROUGHPUT[db] = (time.monotonic() + THROUGHPUT_TTL, series)
    return series


def _count_throughput(now: datetime, minutes: int) -> list[tuple[datetime, int, int]]:
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    jobs = Job.objects.filter(status__in=(Status.SUCCEEDED, Status.DEAD), finished_at__gte=start)
    if connections[jobs.db].vendor == "sqlite":
        # Django's date functions are Python callbacks on SQLite, a second per 200,000 rows;
        # the stored text's first 16 characters are the UTC minute.
        minute: Any = Substr(Cast("finished_at", TextField()), 1, 16)
    else:
        minute = TruncMinute("finished_at", tzinfo=UTC)
    rows = (jobs.annotate(minute=minute).values("minute", "status").annotate(n=Count("id"))
            .order_by())
    done: dict[datetime, list[int]] = {start + timedelta(minutes=m): [0, 0]
                                       for m in range(minutes)}
    for row in rows:
        at = row["minute"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at.replace(" ", "T")).replace(tzinfo=UTC)
        if at in done:
            done[at][0 if row["status"] == Status.SUCCEEDED else 1] += row["n"]
    return [(minute, ok, dead) for minute, (ok, dead) in sorted(done.items())]


def now() -> datetime:
    return timezone.now()
