"""``celery -A proj fairqueue ...``: the operator's view of the fair store, from Redis alone.

``status`` and ``accounts`` only read. ``dlq list`` and ``dlq show`` read the dead letters;
``dlq replay`` and ``dlq purge`` change them, and purge asks for confirmation unless ``--yes``.
Whoever can run this command can reach Redis and the Celery app, so it checks no user
permissions; ``manage.py fairqueue`` is the command that does. Arguments of jobs are shown only
with ``--show-args``, and then masked by the task's ``redact`` names. The reports themselves
live in reports.py, shared with ``manage.py fairqueue`` and the admin.
"""

from __future__ import annotations

from typing import Any

import click
from celery import Celery
from celery.bin.base import COMMA_SEPARATED_LIST, CeleryCommand, CeleryOption
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE, EX_UNAVAILABLE
from celery.utils.text import pluralize

from .errors import DeadLetterNotFound, StoreUnavailableError
from .reports import (
    BatchOutcome,
    PurgeSelectionError,
    accounts_report,
    dead_letter_report,
    dead_letters_report,
    failure_lines,
    purge_each,
    purge_selection,
    replay_each,
    scheduled_report,
    status_report,
)
from .store import DeadLetters, StoreInspector

# -- the celery sub-command ------------------------------------------------------------------


class StoreCommand(CeleryCommand):
    """A Celery sub-command that turns an unreachable fair store into a clear exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreUnavailableError as exc:
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


@fairqueue.command(cls=StoreCommand)
@queues_option
@click.option("--limit", cls=CeleryOption, type=click.IntRange(1), default=50,
              show_default=True, help_group="Store Options", help="Most jobs to show.")
@click.pass_context
def scheduled(ctx: click.Context, queues: list[str] | None, limit: int, **kwargs: Any) -> None:
    """Fair jobs waiting for their time (eta, countdown, retry backoff), soonest first.

    They wait in the fair store, not in a worker, so `celery inspect scheduled` does not show
    them."""
    inspector = StoreInspector(_app(ctx))
    ctx.obj.echo(scheduled_report(inspector.scheduled(queues, limit),
                                  inspector.store.server_time()))


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
    letters = DeadLetters(_app(ctx))
    try:
        selection = purge_selection(letters, job_ids, older_than)
    except PurgeSelectionError as exc:
        raise click.UsageError(str(exc)) from None
    if not yes:
        click.confirm(f"Purge {selection.description}? There is no undo.", abort=True)
    if older_than is not None:
        count = letters.purge(selection.ids)
        ctx.obj.echo(f"purged {count} {pluralize(count, 'dead letter')}")
        return
    outcome = purge_each(letters, selection.ids)
    ctx.obj.echo(f"purged {len(outcome.done)} {pluralize(len(outcome.done), 'dead letter')}")
    report_failures(ctx, "purged", outcome)


def report_failures(ctx: click.Context, verb: str, outcome: BatchOutcome) -> None:
    """Say which ids failed and why; exit non-zero if any did."""
    for line in failure_lines(verb, outcome):
        ctx.obj.error(line)
    if outcome.unreachable:
        raise CeleryCommandException(
            message=f"The fair store (Redis) cannot be reached: {outcome.unreachable}",
            exit_code=EX_UNAVAILABLE)
    if outcome.failed:
        ctx.exit(EX_FAILURE)
