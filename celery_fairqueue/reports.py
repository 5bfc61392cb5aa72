"""Operator reports and batch replay/purge of dead letters, shared by ``celery -A proj
fairqueue``, ``manage.py fairqueue`` and the admin: one set of names for one set of reports.

Everything here reads and changes the fair store through the store package; callers decide who
may do what (the admin and the management command check Django permissions, the Celery
sub-command is for whoever can reach Redis).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.utils.text import pluralize

from .errors import DeadLetterNotFound, FairqueueError, StoreUnavailableError
from .idempotency import bound_arguments
from .limits import AccountLimit
from .redaction import redact_arguments
from .store import (
    AccountPage,
    DeadLetter,
    DeadLetters,
    ScheduledJob,
    StoreStatus,
    display_url,
    store_for,
)
from .tables import ago, duration, moment, render

HIDDEN_ARGS = "(hidden: --show-args shows them, redacted)"


def status_report(app: Celery, status: StoreStatus) -> str:
    """Per-queue totals, paused accounts, dead letters, leases and counters."""
    settings = store_for(app).settings
    lines = [f"Fair store {display_url(settings.redis_url or '')} "
             f"(prefix {settings.key_prefix}) at {moment(status.server_time)}", ""]
    if status.queues:
        lines.append(render(
            ["QUEUE", "READY", "DELAYED", "RUNNING", "ACCOUNTS READY", "ACCOUNTS PAUSED"],
            [[q.queue, q.ready, q.delayed, q.running if q.running_exact else f"{q.running}+",
              q.accounts_ready, q.accounts_paused] for q in status.queues]))
    else:
        lines.append("No fair queue has held a job yet.")
    if status.paused:
        lines += ["", "Paused accounts, soonest to resume first:", render(
            ["QUEUE", "ACCOUNT", "RESUMES IN"],
            [[p.queue, p.account, duration(p.until - status.server_time)]
             for p in status.paused])]
    lines += ["", f"Dead letters: {status.dead_letters}    Leased jobs: {status.leased}"]
    if status.counters:
        lines += ["", "Counters since the store was created:",
                  render(["COUNTER", "VALUE"], sorted(status.counters.items()))]
    return "\n".join(lines)


def limit_text(limit: AccountLimit | None) -> str:
    """An account's own limit in a few words; "default" when it has none."""
    if limit is None:
        return "default"
    parts = []
    if limit.rate:
        parts.append(limit.rate + (f" burst {limit.burst:g}" if limit.burst else ""))
    if limit.concurrency:
        parts.append(f"{limit.concurrency} at once")
    if limit.window:
        parts.append(f"{limit.window} {limit.tz or 'UTC'}")
    return ", ".join(parts) or "none"


def accounts_report(page: AccountPage, now: float) -> str:
    """One row per account and queue: ready, running, state and limit."""
    if not page.rows:
        return "No account has ready or running jobs."
    table = render(
        ["ACCOUNT", "QUEUE", "READY", "RUNNING", "STATE", "RESUMES IN", "LIMIT"],
        [[r.account, r.queue, r.ready, r.running, r.state,
          duration(r.paused_until - now) if r.paused_until else "-", limit_text(r.limit)]
         for r in page.rows])
    footer = f"{len(page.rows)} rows; {page.accounts_ready} accounts have ready jobs."
    if not page.complete:
        footer += " The listing stopped at --limit; use --account NAME for one account."
    return f"{table}\n\n{footer}"


def scheduled_report(jobs: Sequence[ScheduledJob], now: float) -> str:
    """Jobs waiting for their time, soonest first."""
    if not jobs:
        return "No fair job waits for its time (eta, countdown or retry backoff)."
    return render(["JOB", "QUEUE", "ACCOUNT", "TASK", "DUE IN"],
                  [[j.job_id, j.queue, j.account, j.task or "?", duration(j.due - now)]
                   for j in jobs])


def shown_arguments(app: Celery, letter: DeadLetter) -> str:
    """A dead job's arguments by name, masked by its task's ``redact`` names.

    A task this app does not know has no known ``redact`` list, so nothing of it is shown.
    """
    task = app.tasks.get(letter.task or "")
    if task is None:
        return "(hidden: the task is not registered in this app, so its redact list is unknown)"
    fields = getattr(task, "redact", ())
    try:
        named = bound_arguments(task.run, letter.args, letter.kwargs)
    except TypeError:  # the task's signature changed since the job was sent
        return json.dumps(redact_arguments(letter.args, letter.kwargs, fields), default=str)
    return json.dumps(redact_arguments((), named, fields)["kwargs"], default=str)


def dead_letters_report(app: Celery, letters: Sequence[DeadLetter], show_args: bool,
                        total: int) -> str:
    """The dead letters as a table, newest first."""
    if not letters:
        return "No dead letters."
    headers = ["ID", "DIED", "TASK", "ACCOUNT", "ATTEMPTS", "REASON"]
    rows: list[list[Any]] = [
        [d.job_id, f"{ago(d.at)} ago", d.task or "?", d.account, d.attempts, d.reason]
        for d in letters]
    if show_args:
        headers.append("ARGS")
        for row, letter in zip(rows, letters, strict=True):
            row.append(shown_arguments(app, letter))
    return (f"{render(headers, rows)}\n\n{len(letters)} shown of {total} "
            f"{pluralize(total, 'dead letter')}.")


def dead_letter_report(app: Celery, letter: DeadLetter, show_args: bool) -> str:
    """Everything a dead letter says about its job, the traceback last."""
    fields: list[tuple[str, Any]] = [
        ("id", letter.job_id), ("task", letter.task or "? (unreadable message)"),
        ("account", letter.account), ("queue", letter.queue), ("job key", letter.job_key),
        ("reason", letter.reason), ("died", f"{moment(letter.at)} ({ago(letter.at)} ago)"),
        ("first failure", moment(letter.first_failure)), ("attempts", letter.attempts),
        ("deliveries", letter.deliveries), ("replayable", "yes" if letter.replayable else "no"),
        ("arguments", shown_arguments(app, letter) if show_args else HIDDEN_ARGS),
        ("error", letter.error),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {'-' if value is None else value}" for name, value in fields]
    if letter.traceback:
        lines += ["", "traceback:", letter.traceback.rstrip()]
    return "\n".join(lines)


@dataclass
class BatchOutcome:
    """What a replay or purge of several dead letters did, id by id."""

    done: dict[str, str] = field(default_factory=dict)  # id -> new task id ("" for purge)
    failed: dict[str, str] = field(default_factory=dict)  # id -> why not
    unreachable: str | None = None  # the store could not be reached; later ids were not tried


def replay_each(dlq: DeadLetters, ids: Sequence[str]) -> BatchOutcome:
    """Replay the dead letters one by one, stopping if the store goes away."""
    outcome = BatchOutcome()
    for job_id in ids:
        try:
            outcome.done[job_id] = dlq.replay(job_id).id
        except DeadLetterNotFound:
            outcome.failed[job_id] = "not found: replayed or purged already"
        except StoreUnavailableError as exc:
            outcome.unreachable = str(exc)
            break
        except FairqueueError as exc:
            outcome.failed[job_id] = str(exc)
    return outcome


def purge_each(dlq: DeadLetters, ids: Sequence[str]) -> BatchOutcome:
    """Purge the dead letters one by one, stopping if the store goes away."""
    outcome = BatchOutcome()
    for job_id in ids:
        try:
            purged = dlq.purge([job_id])
        except StoreUnavailableError as exc:
            outcome.unreachable = str(exc)
            break
        if purged:
            outcome.done[job_id] = ""
        else:
            outcome.failed[job_id] = "not found: replayed or purged already"
    return outcome


class PurgeSelectionError(FairqueueError, ValueError):
    """A purge named dead letters and also gave an age, or neither."""


@dataclass(frozen=True)
class PurgeSelection:
    """Which dead letters a purge means: the ids named, or those older than an age."""

    ids: list[str]
    description: str  # for the confirmation question and the result line


def purge_selection(dlq: DeadLetters, ids: Sequence[str],
                    older_than: float | None) -> PurgeSelection:
    """Resolve a purge's arguments: ids, or every letter that died over ``older_than`` seconds
    ago (by the store's clock); both or neither is refused."""
    if bool(ids) == (older_than is not None):
        raise PurgeSelectionError(
            "name the dead letters to purge, or give --older-than (not both)")
    if older_than is None:
        return PurgeSelection(list(ids), f"{len(ids)} {pluralize(len(ids), 'dead letter')}")
    chosen = dlq.ids(older_than=dlq.store.server_time() - older_than)
    return PurgeSelection(chosen, f"{len(chosen)} {pluralize(len(chosen), 'dead letter')} "
                                  f"older than {duration(older_than)}")


def failure_lines(verb: str, outcome: BatchOutcome) -> list[str]:
    """One line per id that was not replayed or purged, saying why."""
    return [f"not {verb} {job_id}: {why}" for job_id, why in outcome.failed.items()]
