"""The support console's pages: the accounts overview and one page per account.

Each page joins two sources: the recorded jobs (the database: history, counts, last success)
and the fair store (Redis: what holds each account back right now, and until when). The store
part is read only for the accounts on the page, so a page costs the same with 100 accounts or
100,000.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from ....limit_reports import limit_text
from ....reasons import reason_text
from ....states import ACCOUNTS_DEFERRED, ACCOUNTS_PAUSED, ACCOUNTS_READY, Reason
from ....store import QueueState
from ....tables import duration, truncate
from ..conf import celery_app
from . import history, overview
from .actions import (
    CANCEL_PERMISSION,
    LIFT_PERMISSION,
    LIMIT_PERMISSION,
    PAUSE_PERMISSION,
    RESUME_PERMISSION,
    RUN_NOW_PERMISSION,
)
from .charts import throughput_svg
from .formatting import ID_WIDTH, account_url, exact, exact_epoch
from .live import StoreLive, account_live, store_live, unserved_queues

PAGE_SIZE = 50  # each account on the page costs a read of the store
OVERVIEW_ID_WIDTH = 24  # an account id in the overview's first column: one line
REFRESH_SECONDS = 5
REASON_ORDER = (Reason.MOVING, Reason.PAUSED, Reason.NO_WORKER, Reason.WINDOW_CLOSED,
                Reason.RATE_LIMITED, Reason.CONCURRENCY_CAP, Reason.QUEUE_QUOTA,
                Reason.RUNNABLE, Reason.NO_READY_JOBS)
#: The overview's column heads: the words of states.py, as the CLI's status uses them.
LABELS = {"accounts_ready": ACCOUNTS_READY, "accounts_deferred": ACCOUNTS_DEFERRED,
          "accounts_paused": ACCOUNTS_PAUSED}


#: An account with nothing ready whose recent jobs all dead-lettered: not idle, failing (read
#: from the recorded jobs, so the console's own word beside states.Reason's).
FAILING = "failing"


def reason_label(reason: str) -> str:
    """A reason in words (states.Reason's label); an unknown one as it is."""
    if reason == FAILING:
        return "Failing"
    try:
        return Reason(reason).label
    except ValueError:
        return reason


def failing(state: QueueState | None, recorded: dict[str, Any], now: datetime) -> bool:
    """Nothing ready, dead letters in the last hour and no success in it: not "no ready jobs"
    but an account whose jobs all fail."""
    last_success = recorded.get("last_success")
    return (state is not None and state.reason == Reason.NO_READY_JOBS
            and bool(recorded.get("dead_hour"))
            and (last_success is None or last_success < now - history.HOUR))


def uptime(started: float | None, server_time: float | None) -> str:
    return duration(server_time - started) if started and server_time else "-"


def _changelist(name: str, **filters: str) -> str:
    return f"{reverse(f'admin:celery_fairqueue_{name}_changelist')}?{urlencode(filters)}"


def waited(value: float | None, server_time: float | None) -> float | None:
    """Seconds waited, from the store's oldest-waiting time (an epoch) or age (seconds)."""
    if value is None:
        return None
    if value > 1e9 and server_time:  # a point in time, not an age
        return max(0.0, server_time - value)
    return max(0.0, value)


def until_words(until: float | None, server_time: float | None) -> str:
    if not until or not server_time:
        return ""
    return f"until {exact_epoch(until)} (in {duration(until - server_time)})"


def permissions(request: HttpRequest) -> dict[str, bool]:
    user = request.user
    return {"pause": user.has_perm(PAUSE_PERMISSION), "resume": user.has_perm(RESUME_PERMISSION),
            "cancel": user.has_perm(CANCEL_PERMISSION),
            "run_now": user.has_perm(RUN_NOW_PERMISSION),
            "limit": user.has_perm(LIMIT_PERMISSION), "lift": user.has_perm(LIFT_PERMISSION)}


def _queue_row(queue: str, state: QueueState | None, recorded: dict[str, Any],
               server_time: float | None, now: datetime, unreachable: bool) -> dict[str, Any]:
    live_wait = waited(state.oldest_waiting, server_time) if state else None
    reason = (FAILING if failing(state, recorded, now) else state.reason) if state else "unknown"
    dead = recorded.get("dead_hour", 0)
    return {
        "queue": queue, "state": state,
        "reason": reason,
        "label": reason_label(reason),
        "reason_text": failing_text(dead) if reason == FAILING else reason_text(state)
        if state else ("the fair store cannot be read" if unreachable
                       else "not in the fair store now"),
        "until": until_words(state.until, server_time) if state else "",
        "limit": limit_text(state.limit) if state and state.limit else "none",
        "limit_is_default": state.limit_is_default if state else True,
        "oldest_waiting": duration(live_wait if state else
                                   history.age(recorded.get("oldest_waiting"), now)),
        "running": state.running if state else recorded.get("running", 0),
        "last_success": exact(recorded.get("last_success")),
        "failed_hour": recorded.get("failed_hour", 0),
        "dead_hour": recorded.get("dead_hour", 0),
        # resume ends exactly the pause that holds it: of the queue, of the account there,
        # or of the account everywhere
        "resume_queue": "" if state and state.pause_scope == "account_everywhere" else queue,
        "resume_account": "" if state and state.pause_scope == "queue" else state.account
        if state else "",
        # a lift ends the slow-down that holds it: of the account in the queue, or the queue's
        "lift_account": state.slowed.account or "" if state and state.slowed else "",
    }


def account_view(request: HttpRequest, account: str, context: dict[str, Any]) -> HttpResponse:
    """One account: per queue its state now and why, its limit, waits, recent history. The
    store is read once (live.py), then the database (history.py); this only joins them."""
    now = history.now()
    live = account_live(celery_app(), account)
    recorded = history.account_queues(account, now)
    share = history.completion_share(account, live.weight, now, live.default_weight)
    recent = history.recent_jobs(account)
    states = {state.queue: state for state in live.states}
    queues = sorted(states.keys() | recorded.keys())
    rows = [_queue_row(q, states.get(q), recorded.get(q, {}), live.server_time, now,
                       live.error is not None) for q in queues]
    live_jobs = [{"job": job, "since": exact_epoch(job.since), "due": exact_epoch(job.due),
                  "delayed": job.due is not None and bool(live.server_time)
                  and job.due > (live.server_time or 0)} for job in live.jobs]
    return TemplateResponse(request, "admin/celery_fairqueue/account.html", {
        **context,
        "title": f"Account {account}",
        "account": account,
        "rows": rows,
        "paused": any(s.reason == Reason.PAUSED for s in live.states),
        "own_limit": live.limit,
        "weight": live.weight,
        "share": share,
        "live_error": live.error,
        "live_jobs": live_jobs,
        "recent": recent,
        "jobs_url": _changelist("job", account=account),
        "dead_url": _changelist("deadjob", account=account),
        "limits_url": _changelist("accountlimit", q=account),
        "action_url": reverse("admin:celery_fairqueue_account_action"),
        "can": permissions(request),
        "server_time": exact_epoch(live.server_time),
    })


def failing_text(dead: int) -> str:
    return f"failing: {dead} dead {'letter' if dead == 1 else 'letters'} in the last hour"


def reason_of(states: list[QueueState], recorded: dict[str, Any] | None = None,
              now: datetime | None = None) -> list[dict[str, str]]:
    """The account's queues, most telling reason first; "failing" where nothing is ready and
    its jobs of the last hour (``recorded``: dead_hour, last_success) all dead-lettered."""
    ordered = sorted(states, key=lambda s: (REASON_ORDER.index(s.reason)
                                            if s.reason in REASON_ORDER else 0, s.queue))
    rows = []
    for s in ordered:
        if recorded is not None and now is not None and failing(s, recorded, now):
            rows.append({"queue": s.queue, "reason": FAILING, "label": reason_label(FAILING),
                         "text": failing_text(recorded["dead_hour"])})
        else:
            rows.append({"queue": s.queue, "reason": s.reason, "label": reason_label(s.reason),
                         "text": reason_text(s)})
    return rows


def recording_lag(live: StoreLive) -> dict[str, Any]:
    """The recorders' lag for the overview: events waiting, the oldest's age, and the event
    streams (shards) behind."""
    behind = [{"shard": lag.shard, "waiting": lag.waiting, "oldest": duration(lag.oldest_age)}
              for lag in live.recording if lag.waiting]
    return {"waiting": sum(lag.waiting for lag in live.recording),
            "oldest": duration(max((lag.oldest_age for lag in live.recording), default=0.0)),
            "behind": behind}


def overview_view(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """Accounts by oldest waiting job (or by id), paged in the database, with their reason
    now; per-queue totals, throughput over the last hour, live workers."""
    sort = request.GET.get("o", "oldest")
    sort = sort if sort in overview.SORTS else "oldest"
    query = request.GET.get("q", "").strip()
    try:
        number = max(int(request.GET.get("p", "1")), 1)
    except ValueError:
        number = 1
    now = history.now()
    page = overview.overview_page(sort, query, number, PAGE_SIZE, now)
    recorded = {row["account"]: row
                for row in overview.account_overview(now, accounts=page.accounts)}
    live = store_live(celery_app(), page.accounts)
    dead = history.dead_last_hour(page.accounts, now)
    rows = []
    for account in page.accounts:
        row = recorded.get(account, {})
        rows.append({
            "account": account, "url": account_url(account),
            "account_short": truncate(account, OVERVIEW_ID_WIDTH),
            "reasons": reason_of(live.states.get(account, []),
                                 {"dead_hour": dead.get(account, 0),
                                  "last_success": row.get("last_success")}, now),
            "counts": [row.get(s, 0) for s in ("ready", "deferred", "running", "failed", "dead")],
            "oldest_waiting": duration(row.get("oldest_waiting_age")),
            "last_success": exact(row.get("last_success")),
            "last_error": row.get("last_error") or "",
        })
    queues = [{"status": q, "oldest": duration(waited(live.oldest.get(q.queue),
                                                      live.server_time))}
              for q in live.queues]
    workers = [{"worker": w, "queues": ", ".join(w.queues),
                "heartbeat": duration((live.server_time or w.heartbeat) - w.heartbeat),
                "uptime": uptime(w.started, live.server_time),
                "running": [truncate(job_id, ID_WIDTH) for job_id in w.running]}
               for w in live.workers]

    def link(**changes: Any) -> str:
        params = {"o": sort, "q": query, "p": number, **changes}
        return "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})

    return TemplateResponse(request, "admin/celery_fairqueue/overview.html", {
        **context,
        "title": "Accounts",
        "query": query,
        "labels": LABELS,
        "sort": sort,
        "rows": rows,
        "page": page,
        "previous_url": link(p=number - 1) if number > 1 else None,
        "next_url": link(p=number + 1) if page.has_next else None,
        "sort_oldest_url": link(o="oldest", p=1),
        "sort_account_url": link(o="account", p=1),
        "queues": queues,
        "workers": workers,
        "recording": recording_lag(live),
        "unserved": unserved_queues(live),
        "layout_format": live.layout_format,
        "live_error": live.error,
        "chart": throughput_svg(history.throughput(now)),
        "action_url": reverse("admin:celery_fairqueue_account_action"),
        "can": permissions(request),
        "refresh_seconds": REFRESH_SECONDS,
        "server_time": exact_epoch(live.server_time),
    })

