"""Why an account's next job does not run now, in words: the store's facts (a QueueState:
reason, until when by the store's clock, the running count, the limit, the pause) turned into
the sentence both CLIs and the console show. The store itself returns no sentences.

Durations use :func:`~celery_fairqueue.tables.duration` (``57m 33s``), the one format of the
CLI and the console.
"""

from __future__ import annotations

from datetime import datetime

from .limits import zone
from .states import Reason
from .store import QueueQuota, QueueState, SlowDownHold
from .tables import duration


def format_clock(at: float) -> str:
    """``12:03:07 UTC`` (today's time of a pause, in UTC like the CLI's other times)."""
    return datetime.fromtimestamp(at, zone("UTC")).strftime("%H:%M:%S UTC")


def format_opening(at: float, tz: str | None, now: float) -> str:
    """``09:00 Europe/Berlin``, with the weekday and date when it is not within a day."""
    local = datetime.fromtimestamp(at, zone(tz or "UTC"))
    shown = local.strftime("%H:%M") if at - now < 86400 else local.strftime("%a %Y-%m-%d %H:%M")
    return f"{shown} {tz or 'UTC'}"


def pause_text(state: QueueState) -> str:
    """``paused by alice at 12:03:07 UTC: customer asked`` (``queue paused ...`` for a queue)."""
    who = state.paused_by or "an operator"
    text = f"{'queue ' if state.pause_scope == 'queue' else ''}paused by {who}"
    text += f" at {format_clock(state.paused_at)}" if state.paused_at else ""
    return f"{text}: {state.pause_reason}" if state.pause_reason else text


def slow_down_cause(hold: SlowDownHold) -> str:
    """``429 on job 3f2a...``: what asked to slow down, and the job it answered."""
    return f"{hold.cause} on job {hold.job}"


def slow_down_text(hold: SlowDownHold) -> str:
    """``the provider asked to slow down until 12:00:05 UTC (429 on job 3f2a...)``."""
    whom = f" queue {hold.queue}" if hold.account is None else ""
    return (f"the provider asked{whom} to slow down until {format_clock(hold.until)} "
            f"({slow_down_cause(hold)})")


def reason_text(state: QueueState) -> str:
    """The reason the account's next job in ``state.queue`` does not run now, in words."""
    reason, now = state.reason, state.server_time
    if reason == Reason.PAUSED:
        return pause_text(state)
    if reason == Reason.SLOWED and state.slowed is not None:
        return slow_down_text(state.slowed)
    if reason == Reason.MOVING:
        since = f" since {format_clock(state.paused_at)}" if state.paused_at else ""
        return (f"{state.pause_reason or 'moving to another shard'} (fairqueue reshard{since}):"
                " its jobs wait until the move ends")
    if reason == Reason.NO_READY_JOBS:
        return "no ready jobs"
    if reason == Reason.NO_WORKER:
        return "no worker consumes this queue"
    if reason == Reason.CONCURRENCY_CAP:
        cap = state.limit.concurrency if state.limit and state.limit.concurrency \
            else state.running
        return f"concurrency cap: {state.running} of {cap} running"
    if reason == Reason.WINDOW_CLOSED and state.until is not None:
        tz = state.limit.tz if state.limit else None
        return f"window closed until {format_opening(state.until, tz, now)}"
    if reason == Reason.RATE_LIMITED and state.until is not None:
        return f"rate limit: next token in {duration(state.until - now)}"
    if reason == Reason.QUEUE_QUOTA and state.quota is not None:
        return quota_text(state.queue, state.quota)
    return "runnable: next in turn for a free worker slot"


def quota_text(queue: str, quota: QueueQuota) -> str:
    """``queue linkedin is at its shared limit of 1000/m; next token 12:00:03 UTC``, or at its
    shared concurrency."""
    limit = quota.limit
    if quota.next_token is not None:
        return (f"queue {queue} is at its shared limit of {limit.rate}; next token "
                f"{format_clock(quota.next_token)}")
    return (f"queue {queue} is at its shared concurrency: {quota.running} of "
            f"{limit.concurrency} running")
