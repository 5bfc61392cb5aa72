"""What the support console reads from the database: the overview's page of accounts, an
account's recorded history per queue, throughput over the last hour.

The overview pages in the database, so its cost does not grow with the number of accounts: the
sort by oldest waiting job reads only waiting jobs (``Job.waiting_since``, indexed), the sort by
account walks the account index, and the counts are then read for the page's accounts alone.
"""

from __future__ import annotations

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
WALK_ACCOUNTS = 1000  # pages up to this many accounts deep walk the waiting jobs in order
WALK_ROWS = 10_000  # most waiting jobs one walk reads


@dataclass
class OverviewPage:
    """One page of the overview: its accounts in order, and where the next page starts."""

    accounts: list[str]
    number: int
    has_next: bool
    waiting_accounts: int | None  # accounts with a waiting job, when this page counted them
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # account -> its figures


def _jobs(search: str) -> QuerySet[Job]:
    return Job.objects.filter(account__icontains=search) if search else Job.objects.all()


def _waiting(now: datetime) -> Q:
    return Q(waiting_since__lte=now)


def _walk_waiting(search: str, now: datetime, want: int) -> list[str] | None:
    """The first ``want`` accounts by oldest waiting job, read from the waiting jobs in order
    of ``waiting_since`` (an index walk that stops early): the first pages cost a few hundred
    rows, not a grouping of every waiting job. Fewer when fewer wait; None when the walk read
    ``WALK_ROWS`` rows first (accounts with many waiting jobs: let the database group)."""
    seen: dict[str, None] = {}
    rows = (_jobs(search).filter(_waiting(now)).order_by("waiting_since", "account")
            .values_list("account", flat=True))
    for n, account in enumerate(rows[:WALK_ROWS].iterator(chunk_size=500)):
        seen.setdefault(account)
        if len(seen) >= want:
            return list(seen)
        if n + 1 >= WALK_ROWS:
            return None
    return list(seen)


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
    want = start + size + 1
    walked = _walk_waiting(search, now, want) if want <= WALK_ACCOUNTS else None
    count: int | None = None
    if walked is not None:
        accounts = walked[start:]
        count = len(walked) if len(walked) < want else None
    else:
        accounts = [row["account"] for row in waiting[start:start + size + 1]]
    if len(accounts) <= size:  # past the waiting accounts: the others, by id
        count = waiting.count() if count is None else count
        skip = max(start - count, 0)
        others = (_jobs(search).values("account")
                  .annotate(waiting=Count("id", filter=_waiting(now))).filter(waiting=0)
                  .order_by("account").values_list("account", flat=True))
        accounts += list(others[skip:skip + size + 1 - len(accounts)])
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


#: Counts of finished minutes, per database: a minute that is over keeps its count, so a
#: refresh counts only the last few minutes' rows instead of an hour of a busy deployment's.
_MINUTES: dict[str, dict[datetime, tuple[int, int]]] = {}
#: Minutes still counted afresh: the current one, and those the recorder may still be writing.
LIVE_MINUTES = 2


def throughput(now: datetime, minutes: int = 60) -> list[tuple[datetime, int, int]]:
    """Per minute over the last ``minutes``: (minute, jobs succeeded, jobs dead-lettered)."""
    current = now.replace(second=0, microsecond=0)
    start = current - timedelta(minutes=minutes - 1)
    series = [start + timedelta(minutes=m) for m in range(minutes)]
    kept = _MINUTES.setdefault(Job.objects.db, {})
    for minute in [m for m in kept if m < start]:
        del kept[minute]
    settled = current - timedelta(minutes=LIVE_MINUTES - 1)
    since = next((m for m in series if m >= settled or m not in kept), current)
    counted = _count_minutes(since)
    for minute in series:
        if since <= minute < settled:
            kept[minute] = counted.get(minute, (0, 0))
    return [(m, *(kept.get(m) or counted.get(m, (0, 0)))) for m in series]


def _count_minutes(since: datetime) -> dict[datetime, tuple[int, int]]:
    """Jobs succeeded and dead-lettered per minute from ``since`` on."""
    jobs = Job.objects.filter(status__in=(Status.SUCCEEDED, Status.DEAD), finished_at__gte=since)
    if connections[jobs.db].vendor == "sqlite":
        # Django's date functions are Python callbacks on SQLite, a second per 200,000 rows;
        # the stored text's first 16 characters are the UTC minute.
        minute: Any = Substr(Cast("finished_at", TextField()), 1, 16)
    else:
        minute = TruncMinute("finished_at", tzinfo=UTC)
    rows = (jobs.annotate(minute=minute).values("minute", "status").annotate(n=Count("id"))
            .order_by())
    found: dict[datetime, list[int]] = {}
    for row in rows:
        at = row["minute"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at.replace(" ", "T")).replace(tzinfo=UTC)
        found.setdefault(at, [0, 0])[0 if row["status"] == Status.SUCCEEDED else 1] += row["n"]
    return {at: (ok, dead) for at, (ok, dead) in found.items()}


def now() -> datetime:
    return timezone.now()
