"""The account overview page, and the dead-letter operations the admin and manage.py share.

Replay and purge act on the fair store first (the dead letters live in Redis) and then have the
recorder bring the recorded rows in line; they check the user's permission themselves, so
neither caller can forget to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from ...reports import BatchOutcome, purge_each, replay_each
from ...store import DeadLetters
from ...tables import duration
from .conf import celery_app
from .queries import account_overview_rows, overview_row
from .recording import record_purge, record_replay

REPLAY_PERMISSION = "celery_fairqueue.replay_job"
PURGE_PERMISSION = "celery_fairqueue.purge_job"
OVERVIEW_PAGE_SIZE = 100
OVERVIEW_COUNTS = ("ready", "deferred", "running", "failed", "dead")


class User(Protocol):
    """Whom replay and purge act for: a Django user, or the anonymous one."""

    is_active: bool

    def has_perm(self, perm: str, obj: Any = None) -> bool: ...


def require(user: User, permission: str) -> None:
    """Refuse, naming the permission, unless ``user`` is active and holds ``permission``."""
    if not (user.is_active and user.has_perm(permission)):
        raise PermissionDenied(f"{user} lacks the permission {permission!r}")


def replay_dead_letters(user: User, ids: Sequence[str]) -> BatchOutcome:
    """Replay dead letters by id (``Job.delivery_id``); replayed rows become ready again."""
    require(user, REPLAY_PERMISSION)
    outcome = replay_each(DeadLetters(celery_app()), ids)
    record_replay(outcome.done)
    return outcome


def purge_dead_letters(user: User, ids: Sequence[str]) -> BatchOutcome:
    """Delete dead letters by id for good, and their rows."""
    require(user, PURGE_PERMISSION)
    outcome = purge_each(DeadLetters(celery_app()), ids)
    record_purge(list(outcome.done))
    return outcome


def _changelist_url(**filters: str) -> str:
    return f"{reverse('admin:celery_fairqueue_job_changelist')}?{urlencode(filters)}"


def overview_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of :func:`queries.account_overview` as the page shows them, with their links."""
    shown = []
    for row in rows:
        account = row["account"]
        shown.append({
            "account": account,
            "url": _changelist_url(account=account),
            "counts": [(row[s], _changelist_url(account=account, status__exact=s))
                       for s in OVERVIEW_COUNTS],
            "oldest_ready_age": duration(row["oldest_ready_age"]),
            "next_run_at": row["next_run_at"],
            "last_error": row["last_error"],
        })
    return shown


def account_overview_view(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """One row per account: what waits, runs and failed, how long the oldest has waited."""
    query = request.GET.get("q", "").strip()
    page = Paginator(account_overview_rows(query), OVERVIEW_PAGE_SIZE).get_page(
        request.GET.get("p"))
    now = timezone.now()
    return TemplateResponse(request, "admin/celery_fairqueue/account_overview.html", {
        **context,
        "title": "Account overview",
        "query": query,
        "page_obj": page,
        "rows": overview_rows([overview_row(row, now) for row in page.object_list]),
        "columns": [s.capitalize() for s in OVERVIEW_COUNTS],
    })
