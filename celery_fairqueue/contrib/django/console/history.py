"""What the support console reads from the database besides the account overview
(overview.py): an account's recorded history per queue, its recent jobs, throughput over the
last hour.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, Max, Min, Q, Sum, TextField
from django.db.models.functions import Cast, Substr, TruncMinute
from django.utils import timezone

from ..models import AccountLimit, Attempt, Job
from .overview import age

__all__ = ["account_queues", "age", "completion_share", "dead_last_hour", "now", "recent_jobs",
           "throughput"]

Status = Job.Status
HOUR = timedelta(hours=1)
FAILED_OUTCOMES = (Attempt.Outcome.RETRYING, Attempt.Outcome.FAILED, Attempt.Outcome.DEAD)


def _waiting(now: datetime) -> Q:
    return Q(waiting_since__lte=now)


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


def completion_share(account: str, weight: int, now: datetime,
                     default_weight: int = 1) -> dict[str, float | None]:
    """The account's share of the last hour's succeeded jobs beside the share its ``weight``
    entitles it to among the accounts that had any (those with a limit of their own at the
    weight the admin's mirror of the store holds, the others at ``default_weight``): two
    aggregate queries, whatever the number of accounts."""
    done = Job.objects.filter(status=Status.SUCCEEDED, finished_at__gte=now - HOUR)
    counts = done.aggregate(total=Count("id"), mine=Count("id", filter=Q(account=account)),
                            accounts=Count("account", distinct=True))
    own = (AccountLimit.objects.filter(account__in=done.values("account"))
           .exclude(account=account).aggregate(n=Count("id"), weights=Sum("weight")))
    others = counts["accounts"] - (1 if counts["mine"] else 0)
    other_weights = (own["weights"] or 0) + (others - own["n"]) * default_weight
    return {"share": counts["mine"] / counts["total"] if counts["total"] else None,
            "entitled": weight / (weight + other_weights), "completed": counts["mine"],
            "total": counts["total"]}


def dead_last_hour(accounts: list[str], now: datetime) -> dict[str, int]:
    """Per account of ``accounts`` (a page's), the jobs dead-lettered in the last hour."""
    rows = (Job.objects.filter(account__in=accounts, status=Status.DEAD,
                               finished_at__gte=now - HOUR)
            .values("account").annotate(n=Count("id")).order_by())
    return {row["account"]: row["n"] for row in rows}


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
