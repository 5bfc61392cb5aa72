"""``celery -A proj fairqueue ...``: the operator's view of the fair store, from Redis alone.

``status`` and ``accounts`` only read. ``dlq list`` and ``dlq show`` read the dead letters;
``dlq replay`` and ``dlq purge`` change them, and purge asks for confirmation unless ``--yes``.
Whoever can run this command can reach Redis and the Celery app, so it checks no user
permissions; ``manage.py fairqueue`` is the command that does. Arguments of jobs are shown only
with ``--show-args``, and then masked by the task's ``redact`` names.

The reports and the batch replay and purge below are shared with ``manage.py fairqueue``
and the admin.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import redis
from celery import Celery
from celery.bin.base import COMMA_SEPARATED_LIST, CeleryCommand, CeleryOption
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE, EX_UNAVAILABLE
from celery.utils.text import pluralize
from kombu.utils.url import maybe_sanitize_url

from .dlq import DeadLetter, DeadLetterNotFound, DeadLetters
from .errors import FairqueueError, StoreUnavailableError
from .idempotency import bound_arguments
from .inspect import AccountPage, StoreInspector, StoreStatus
from .limits import AccountLimit
from .publish import get_store
from .redaction import redact_arguments
from .tables import ago, duration, moment, render

HIDDEN_ARGS = "(hidden: --show-args shows them, redacted)"


# -- reports and batch operations, shared with manage.py fairqueue and the admin ---------------


def status_report(app: Celery, status: StoreStatus) -> str:
    """Per-queue totals, paused accounts, dead letters, leases and counters."""
    settings = get_store(app).settings
    lines = [f"Fair store {maybe_sanitize_url(settings.redis_url or '')} "
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
        except (redis.RedisError, StoreUnavailableError) as exc:
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
        except (redis.RedisError, StoreUnavailableError) as exc:
            outcome.unreachable = str(exc)
            break
        if purged:
            outcome.done[job_id] = ""
        else:
            outcome.failed[job_id] = "not found: replayed or purged already"
    return outcome


# -- the celery sub-command ------------------------------------------------------------------


class StoreCommand(CeleryCommand):
    """A Celery sub-command that turns an unreachable fair store into a clear exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (redis.RedisError, StoreUnavailableError) as exc:
            raise CeleryCommandException(
                message=f"The fair store (Redis) cannot be reached: {exc}",
                exit_code=EX_UNAVAILABLE) from exc


def _app(ctx: click.Context) -> Celery:
    return ctx.obj.app


queues_option = click.option(
    "-Q", "--queues", cls=CeleryOption, type=COMMA_SEPARATED_LIST, help_group="Store Options",
    help="Comma-separated fair queues to show (default: every queue that held a job).")
show_args_option = click.option(
    "--show-args", cls=CeleryOption, is_flag=True, help_group="Dead Letter Options",
    help="Show job arguments, masked by the task's redact names.")


@click.group(name="fairqueue")
@click.pass_context
def fairqueue(ctx: click.Context, **kwargs: Any) -> None:
    """Fair queues and dead letters, read from the fair store (Redis).

    Only `dlq replay` and `dlq purge` change anything; purge asks first unless --yes.
    """


@fairqueue.command(cls=StoreCommand)
@queues_option
@click.option("--paused", cls=CeleryOption, type=click.IntRange(1), default=10, show_default=True,
              help_group="Store Options", help="Paused accounts to list per queue.")
@click.pass_context
def status(ctx: click.Context, queues: list[str] | None, paused: int, **kwargs: Any) -> None:
    """Ready, delayed and running jobs per queue, paused accounts, DLQ size, counters."""
    app = _app(ctx)
    ctx.obj.echo(status_report(app, StoreInspector(app).status(queues, paused_limit=paused)))


@fairqueue.command(cls=StoreCommand)
@queues_option
@click.option("--account", cls=CeleryOption, help_group="Store Options",
              help="Show this one account (also when it has nothing ready).")
@click.option("--limit", cls=CeleryOption, type=click.IntRange(1), default=50,
              show_default=True, help_group="Store Options",
              help="Most accounts to read (they are scanned, not sorted, in the store).")
@click.pass_context
def accounts(ctx: click.Context, queues: list[str] | None, account: str | None, limit: int,
             **kwargs: Any) -> None:
    """Per-account ready and running jobs, state and limit, from the store."""
    inspector = StoreInspector(_app(ctx))
    page = inspector.accounts(queues, account=account, limit=limit)
    ctx.obj.echo(accounts_report(page, inspector.store.server_time()))


@fairqueue.group()
def dlq() -> None:
    """The dead letters: list, show, replay, purge."""


@dlq.command(name="list", cls=StoreCommand)
@click.option("--account", cls=CeleryOption, help_group="Dead Letter Options",
              help="Only this account's.")
@click.option("--task", cls=CeleryOption, help_group="Dead Letter Options",
              help="Only this task's (full name).")
@click.option("--reason", cls=CeleryOption, help_group="Dead Letter Options",
              help="Only those whose reason contains this text.")
@click.option("--limit", cls=CeleryOption, type=click.IntRange(1), default=50,
              show_default=True, help_group="Dead Letter Options", help="Most to show.")
@show_args_option
@click.pass_context
def dlq_list(ctx: click.Context, account: str | None, task: str | None, reason: str | None,
             limit: int, show_args: bool, **kwargs: Any) -> None:
    """Dead letters, newest first."""
    app = _app(ctx)
    letters = DeadLetters(app)
    found = letters.list(account=account, task=task, reason=reason, limit=limit)
    ctx.obj.echo(dead_letters_report(app, found, show_args, letters.count()))


@dlq.command(name="show", cls=StoreCommand)
@click.argument("job_id")
@show_args_option
@click.pass_context
def dlq_show(ctx: click.Context, job_id: str, show_args: bool, **kwargs: Any) -> None:
    """One dead letter in full: reason, attempts, error and traceback."""
    app = _app(ctx)
    try:
        letter = DeadLetters(app).get(job_id)
    except DeadLetterNotFound as exc:
        raise CeleryCommandException(message=str(exc.args[0]), exit_code=EX_FAILURE) from None
    ctx.obj.echo(dead_letter_report(app, letter, show_args))


@dlq.command(name="replay", cls=StoreCommand)
@click.argument("job_ids", nargs=-1, required=True)
@click.pass_context
def dlq_replay(ctx: click.Context, job_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Run dead jobs again, as new jobs with the same task, arguments and business key."""
    outcome = replay_each(DeadLetters(_app(ctx)), job_ids)
    for job_id, task_id in outcome.done.items():
        ctx.obj.echo(f"replayed {job_id} as task {task_id}")
    report_failures(ctx, "replayed", outcome)


@dlq.command(name="purge", cls=StoreCommand)
@click.argument("job_ids", nargs=-1)
@click.option("--older-than", cls=CeleryOption, type=click.FloatRange(0), metavar="SECONDS",
              help_group="Dead Letter Options",
              help="Purge every dead letter that died more than SECONDS ago.")
@click.option("--yes", cls=CeleryOption, is_flag=True, help_group="Dead Letter Options",
              help="Do not ask for confirmation.")
@click.pass_context
def dlq_purge(ctx: click.Context, job_ids: tuple[str, ...], older_than: float | None, yes: bool,
              **kwargs: Any) -> None:
    """Delete dead letters for good: the ones named, or all older than --older-than."""
    if bool(job_ids) == (older_than is not None):
        raise click.UsageError("name the dead letters to purge, or give --older-than (not both)")
    letters = DeadLetters(_app(ctx))
    cutoff = None
    if older_than is not None:
        cutoff = letters.store.server_time() - older_than
        count = int(letters.store.client.zcount(letters.keys.dead_index, "-inf", cutoff))
        what = f"{count} {pluralize(count, 'dead letter')} older than {duration(older_than)}"
    else:
        what = f"{len(job_ids)} {pluralize(len(job_ids), 'dead letter')}"
    if not yes:
        click.confirm(f"Purge {what}? There is no undo.", abort=True)
    if cutoff is not None:
        count = letters.purge(older_than=cutoff)
        ctx.obj.echo(f"purged {count} {pluralize(count, 'dead letter')}")
        return
    outcome = purge_each(letters, job_ids)
    ctx.obj.echo(f"purged {len(outcome.done)} {pluralize(len(outcome.done), 'dead letter')}")
    report_failures(ctx, "purged", outcome)


def report_failures(ctx: click.Context, verb: str, outcome: BatchOutcome) -> None:
    """Say which ids failed and why; exit non-zero if any did."""
    for job_id, why in outcome.failed.items():
        ctx.obj.error(f"not {verb} {job_id}: {why}")
    if outcome.unreachable:
        raise CeleryCommandException(
            message=f"The fair store (Redis) cannot be reached: {outcome.unreachable}",
            exit_code=EX_UNAVAILABLE)
    if outcome.failed:
        ctx.exit(EX_FAILURE)
