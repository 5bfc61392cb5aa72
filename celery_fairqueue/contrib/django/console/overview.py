"""The account overview: one row per account from the recorded jobs, for the support console's
accounts page and the ``fairqueue recorded`` command alike.

A row holds the account's job counts by status, how long its oldest ready and oldest waiting
jobs have waited, its next run, its last success and its last error. :func:`account_overview`
reads any set of accounts in one grouped query (conditional aggregates, the last error as a
correlated subquery), so its cost does not grow with a query per account.

The console pages in the database (:func:`overview_page`), so its cost does not grow with the
number of accounts: the sort by oldest waiting job reads only waiting jobs
(``Job.waiting_since``, indexed), the sort by account walks the account index, and the rows are
then read for the page's accounts alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Max, Min, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from ..models import Job

Status = Job.Status
COUNTED = (Status.READY, Status.DEFERRED, Status.RUNNING, Status.SUCCEEDED, Status.FAILED,
           Status.DEAD)
WAITING = (Status.READY, Status.DEFERRED)
BROKEN = (Status.FAILED, Status.DEAD)
SORTS = ("oldest", "account")
WALK_ACCOUNTS = 1000  # pages up to this many accounts deep walk the waiting jobs in order
WALK_ROWS = 10_000  # most waiting jobs one walk reads


def age(since: datetime | None, now: datetime) -> float | None:
    """Seconds from ``since`` to ``now``; None for no time."""
    return None if since is None else max(0.0, (now - since).total_seconds())


def _jobs(search: str) -> QuerySet[Job]:
    return Job.objects.filter(account__icontains=search) if search else Job.objects.all()


def _waiting(now: datetime) -> Q:
    return Q(waiting_since__lte=now)


def account_overview(now: datetime | None = None, accounts: Sequence[str] | None = None,
                     search: str = "") -> list[dict[str, Any]]:
    """One row per account (of ``accounts`` if given, whose id contains ``search`` if given),
    ordered by account, in one query: job counts by status, ``oldest_ready_age`` and
    ``oldest_waiting`` (with its ``oldest_waiting_age``), ``next_run_at``, ``last_success``,
    ``last_failed_at`` and ``last_error`` (of the most recently finished failed or dead job)."""
    now = now or timezone.now()
    if accounts is not None and not accounts:
        return []
    last_broken = (Job.objects.filter(account=OuterRef("account"), status__in=BROKEN)
                   .order_by(F("finished_at").desc(nulls_last=True), "-updated_at", "-id"))
    counts = {str(status): Count("id", filter=Q(status=status)) for status in COUNTED}
    jobs = _jobs(search)
    if accounts is not None:
        jobs = jobs.filter(account__in=list(accounts))
    rows = (jobs.values("account")
            .annotate(**counts,
                      oldest_ready=Min("enqueued_at", filter=Q(status=Status.READY)),
                      oldest_waiting=Min("waiting_since", filter=_waiting(now)),
                      next_run_at=Min("next_run_at", filter=Q(status__in=WAITING)),
                      last_success=Max("finished_at", filter=Q(status=Status.SUCCEEDED)),
                      last_failed_at=Max("finished_at", filter=Q(status__in=BROKEN)),
                      last_error=Subquery(last_broken.values("last_error")[:1]))
            .order_by("account"))
    return [_row(row, now) for row in rows]


def _row(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    row["oldest_ready_age"] = age(row.pop("oldest_ready"), now)
    row["oldest_waiting_age"] = age(row["oldest_waiting"], now)
    row["last_error"] = row["last_error"] or ""
    return row


@dataclass
class OverviewPage:
    """One page of the overview: its accounts in order, and where the next page starts."""

    accounts: list[str]
    number: int
    has_next: bool
    waiting_accounts: int | None  # accounts with a waiting job, when this page counted them


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


def overview_page(sort: str, search: str, number: int, size: int,
                  now: datetime) -> OverviewPage:
    """The accounts of page ``number`` (from 1): by oldest waiting job (those with a waiting job
    first, oldest first, then the others by id), or by id. Their rows:
    :func:`account_overview` with ``accounts=page.accounts``."""
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
