"""Operator reports and batch replay/purge of dead letters, shared by ``celery -A proj
fairqueue``, ``manage.py fairqueue`` and the admin: one set of names for one set of reports.

Everything here reads and changes the fair store through the store package; callers decide who
may do what (the admin and the management command check Django permissions, the Celery
sub-command is for whoever can reach Redis).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.utils.text import pluralize

from .errors import DeadLetterNotFound, FairqueueError, StoreUnavailableError
from .idempotency import bound_arguments
from .install import cancel, run_now
from .limit_reports import default_limit_text, limit_text
from .reasons import reason_text, slow_down_cause
from .redaction import redact_arguments
from .states import ACCOUNTS_DEFERRED, ACCOUNTS_PAUSED, ACCOUNTS_READY
from .store import (
    AccountPage,
    AccountRow,
    DeadLetter,
    DeadLetters,
    LiveJob,
    OperatorPause,
    QueueState,
    ScheduledJob,
    StoreInspector,
    StoreStatus,
    WorkerInfo,
    display_url,
    store_for,
)
from .tables import ago, duration, moment, render

HIDDEN_ARGS = "(hidden: --show-args shows them, redacted)"


def status_report(app: Celery, status: StoreStatus) -> str:
    """Per-queue totals with the oldest waiting job's age and the live workers, a warning per
    queue with ready jobs that no live worker consumes, accounts deferred by their limit,
    accounts and queues paused by an operator, dead letters, leases and counters."""
    settings = store_for(app).settings
    now = status.server_time
    lines = [f"Fair store {display_url(settings.redis_url or '')} "
             f"(prefix {settings.key_prefix}) at {moment(now)}", ""]
    if status.queues:
        lines.append(render(
            ["QUEUE", "READY", "DELAYED", "RUNNING", ACCOUNTS_READY.upper(),
             ACCOUNTS_DEFERRED.upper(), ACCOUNTS_PAUSED.upper(), "OLDEST WAITING", "WORKERS"],
            [[q.queue, q.ready, q.delayed, q.running,
              q.accounts_ready, q.accounts_deferred, q.accounts_paused,
              ago(q.oldest_waiting, now) if q.oldest_waiting else "-", q.workers]
             for q in status.queues]))
    else:
        lines.append("No fair queue has held a job yet.")
    warnings = [f"WARNING: queue {q.queue!r} has {q.ready} ready "
                f"{pluralize(q.ready, 'job')} but no live worker consumes it"
                for q in status.unconsumed()]
    if status.layout_format != "2":
        warnings.append(f"WARNING: the store's layout is at format {status.layout_format} (an "
                        "earlier celery-fairqueue wrote it): workers of this version claim no "
                        "job until `fairqueue upgrade` has converted it (docs/deployment.md)")
    lines += ["", *warnings] if warnings else []
    if status.pauses:
        lines += ["", "Paused by an operator (resume with `fairqueue resume`):", render(
            ["QUEUE", "ACCOUNT", "BY", "SINCE", "REASON"],
            [[p.queue or "(every queue)", p.account or "(the whole queue)", p.by or "-",
              moment(p.at), p.reason or "-"] for p in status.pauses])]
    if status.slow_downs:
        lines += ["", "Slowed down by the provider (lift with `fairqueue lift`):", render(
            ["QUEUE", "ACCOUNT", "UNTIL", "BECAUSE"],
            [[h.queue, h.account or "(the whole queue)", moment(h.until), slow_down_cause(h)]
             for h in status.slow_downs])]
    lines += ["", workers_report(status.workers, now)]
    if status.deferred:
        lines += ["", "Accounts deferred by their limit, soonest to run first:", render(
            ["QUEUE", "ACCOUNT", "REASON", "RUNS IN"],
            [[d.queue, d.account, d.reason.label if d.reason else "-",
              duration(d.until - status.server_time)] for d in status.deferred])]
    lines += ["", default_limit_text(status.default_limit)]
    if status.queue_limits:
        lines += ["", "Queues' shared limits (all their accounts together):", render(
            ["QUEUE", "LIMIT"], [[queue, limit_text(limit)] for queue, limit in
                                 status.queue_limits])]
    lines += ["", f"Dead letters: {status.dead_letters}    Leased jobs: {status.leased}"]
    if status.counters:
        lines += ["", "Counters since the store was created:",
                  render(["COUNTER", "VALUE"], sorted(status.counters.items()))]
    return "\n".join(lines)


def waiting_text(row: AccountRow, state: QueueState | None) -> str:
    """The row's state with the jobs that wait outside READY, in the words and counts of the
    one-account view (its QueueState when read): ``deferred (1 deferred)``,
    ``idle (1 due, 2 delayed)``."""
    counts = ((state.deferred, "deferred"), (state.delayed_due, "due"),
              (state.delayed_future, "delayed")) if state else (
        (row.deferred, "deferred"), (row.delayed, "delayed"))
    parts = [f"{count} {word}" for count, word in counts if count]
    return row.state.label + (f" ({', '.join(parts)})" if parts else "")


def accounts_report(page: AccountPage, now: float,
                    states: Mapping[tuple[str, str], QueueState] | None = None) -> str:
    """One row per account and queue: ready, running, state (with its deferred and delayed
    jobs), limit and, given the accounts' ``states`` by (queue, account), the reason each
    does not run now. The counts are the one-account view's (``--account``): deferred jobs
    are not ready, and delayed ones are listed."""
    if not page.rows:
        return "No account has jobs in the fair store (ready, deferred, delayed or running)."
    states = states or {}
    table = render(
        ["ACCOUNT", "QUEUE", "READY", "RUNNING", "STATE", "RESUMES IN", "LIMIT", "REASON"],
        [[r.account, r.queue, s.ready if s else r.ready, s.running if s else r.running,
          waiting_text(r, s), duration(r.deferred_until - now) if r.deferred_until else "-",
          limit_text(r.limit), reason_text(s) if s else "-"]
         for r, s in ((r, states.get((r.queue, r.account))) for r in page.rows)])
    footer = f"{len(page.rows)} rows; {page.accounts_ready} accounts have ready jobs."
    if not page.complete:
        footer += " The listing stopped at --limit; use --account NAME for one account."
    return f"{table}\n\n{footer}"


def accounts_text(app: Celery, queues: list[str] | None, account: str | None,
                  limit: int) -> str:
    """The ``accounts`` report of both CLIs: one account in full, or the accounts with any job
    in the store (ready, deferred, delayed, running), each with the reason it does not run
    now."""
    inspector = StoreInspector(app)
    if account is not None:
        return account_report(inspector.console.account_state(account, queues))
    page = inspector.accounts(queues, limit=limit)
    shown = sorted({r.queue for r in page.rows})
    workers = inspector.console.workers()
    states = {(s.queue, s.account): s for a in dict.fromkeys(r.account for r in page.rows)
              for s in inspector.console.account_state(a, shown, workers=workers)}
    return accounts_report(page, inspector.console.server_time(), states)


def account_report(states: Sequence[QueueState]) -> str:
    """One account's live state per queue, and why it does not run now in full words."""
    if not states:
        return "No fair queue has held a job yet."
    now = states[0].server_time
    account = states[0].account
    table = render(
        ["QUEUE", "READY", "DEFERRED", "DUE", "DELAYED", "RUNNING", "OLDEST WAITING", "LIMIT"],
        [[s.queue, s.ready, s.deferred, s.delayed_due, s.delayed_future, s.running,
          ago(s.oldest_waiting, now) if s.oldest_waiting else "-",
          limit_text(s.limit) + (" (default)" if s.limit_is_default and s.limit else "")
          + (f"; in {s.queue}: {limit_text(s.limit_here)}" if s.limit_here else "")]
         for s in states])
    reasons = [f"{s.queue}: {reason_text(s)}" + (f" (until {moment(s.until)})" if s.until else "")
               for s in states]
    return f"Account {account!r}\n\n{table}\n\n" + "\n".join(reasons)


def jobs_report(jobs: Sequence[LiveJob], now: float) -> str:
    """An account's jobs in the store now: running, ready or deferred, delayed."""
    if not jobs:
        return "The account has no job in the fair store (nothing ready, delayed or running)."
    return render(["JOB", "TASK", "QUEUE", "STATE", "FOR", "DUE IN"],
                  [[j.job_id, j.task or "?", j.queue, j.state, ago(j.since, now),
                    duration(j.due - now) if j.due is not None else "-"] for j in jobs])


def workers_report(workers: Sequence[WorkerInfo], now: float) -> str:
    """The live workers: their queues, slots and last heartbeat."""
    if not workers:
        return "Live workers: none registered (no worker claims fair jobs)."
    return f"Live workers: {len(workers)}\n" + render(
        ["WORKER", "QUEUES", "SLOTS", "LAST BEAT"],
        [[w.name, ",".join(w.queues), w.slots, f"{ago(w.heartbeat, now)} ago"]
         for w in workers])


def pause_scope_text(account: str | None, queue: str | None) -> str:
    if account is None:
        return f"queue {queue!r}"
    return f"account {account!r} in " + (f"queue {queue!r}" if queue is not None
                                         else "every queue")


def pause_report(pause: OperatorPause) -> str:
    """What a pause holds, who paused it, when and why."""
    text = (f"paused {pause_scope_text(pause.account, pause.queue)} "
            f"(by {pause.by or 'an operator'} at {moment(pause.at)})")
    return f"{text}: {pause.reason}" if pause.reason else text


def resume_report(account: str | None, queue: str | None, resumed: bool) -> str:
    what = pause_scope_text(account, queue)
    return f"resumed {what}" if resumed else f"{what} was not paused (nothing to resume)"


def lift_report(account: str | None, queue: str, lifted: bool) -> str:
    what = f"account {account!r} in queue {queue!r}" if account is not None else \
        f"queue {queue!r}"
    return f"lifted the provider's slow-down of {what}" if lifted else \
        f"{what} was not slowed down (nothing to lift)"


def each_job(action: Callable[[str], bool], ids: Sequence[str], refused: str) -> BatchOutcome:
    """Apply ``action`` (cancel, run now) to each id, stopping if the store goes away."""
    outcome = BatchOutcome()
    for task_id in ids:
        try:
            done = action(task_id)
        except StoreUnavailableError as exc:
            outcome.unreachable = str(exc)
            break
        if done:
            outcome.done[task_id] = ""
        else:
            outcome.failed[task_id] = refused
    return outcome


def cancel_each(app: Celery, ids: Sequence[str]) -> BatchOutcome:
    """Cancel each waiting job (the task id, or the delivery id the store shows)."""
    return each_job(lambda task_id: cancel(app, task_id), ids,
                    "not waiting in the fair store (running, finished or unknown)")


def run_now_each(app: Celery, ids: Sequence[str]) -> BatchOutcome:
    """Make each delayed job ready now; it still waits for its account's limits."""
    return each_job(lambda task_id: run_now(app, task_id), ids,
                    "not delayed (ready, running, finished or unknown)")


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


def named_letters_report(app: Celery, name: str, letters: Sequence[DeadLetter],
                         show_args: bool) -> str:
    """``dlq show``: the dead letter a name stands for; every one when a task id has several
    (a task and its replacement, say), oldest delivery first."""
    shown = "\n\n".join(dead_letter_report(app, letter, show_args) for letter in letters)
    if len(letters) == 1:
        return shown
    return (f"{name!r} names {len(letters)} dead letters; replay or purge one by its id."
            f"\n\n{shown}")


@dataclass
class BatchOutcome:
    """What a batch (replay, purge, cancel, run now) did, id by id."""

    done: dict[str, str] = field(default_factory=dict)  # id -> new task id ("" for purge)
    failed: dict[str, str] = field(default_factory=dict)  # id -> why not
    unreachable: str | None = None  # the store could not be reached; later ids were not tried


NOT_FOUND = "not found: replayed or purged already"


def each_letter(dlq: DeadLetters, names: Sequence[str],
                action: Callable[[str], str | None]) -> BatchOutcome:
    """Resolve each name (its id, the task id or ``task.name[id]``) to its one dead letter and
    apply ``action`` to the letter id, stopping if the store goes away. ``done`` is keyed by
    the letter id, ``failed`` by the name as given."""
    outcome = BatchOutcome()
    for name in names:
        try:
            letter_id = dlq.letter_id(name)
            result = action(letter_id)
        except DeadLetterNotFound:
            outcome.failed[name] = NOT_FOUND
        except StoreUnavailableError as exc:
            outcome.unreachable = str(exc)
            break
        except FairqueueError as exc:  # ambiguous, or nothing readable to replay
            outcome.failed[name] = str(exc)
        else:
            if result is None:
                outcome.failed[name] = NOT_FOUND
            else:
                outcome.done[letter_id] = result
    return outcome


def replay_each(dlq: DeadLetters, names: Sequence[str]) -> BatchOutcome:
    """Replay the dead letters one by one; ``done`` maps each letter id to its new task id."""
    return each_letter(dlq, names, lambda letter_id: dlq.replay(letter_id).id)


def purge_each(dlq: DeadLetters, names: Sequence[str]) -> BatchOutcome:
    """Purge the dead letters one by one, with their markers."""
    return each_letter(dlq, names, lambda letter_id: "" if dlq.purge([letter_id]) else None)


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
