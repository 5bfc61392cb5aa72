"""``celery -A proj fairqueue ...``: the operator's view of the fair store, from Redis alone.

``status``, ``accounts``, ``jobs``, ``workers`` and ``scheduled`` only read. ``pause``,
``resume``, ``cancel`` and ``run-now`` act on waiting jobs; ``reshard`` moves the store to more
shards. ``dlq list`` and ``dlq show`` read the dead letters; ``dlq replay`` and ``dlq purge``
change them, and purge asks for confirmation unless ``--yes``.
Whoever can run this command can reach Redis and the Celery app, so it checks no user
permissions; ``manage.py fairqueue`` is the command that does. Arguments of jobs are shown only
with ``--show-args``, and then masked by the task's ``redact`` names. The reports themselves
live in reports.py, shared with ``manage.py fairqueue`` and the admin.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from celery import Celery
from celery.bin.base import COMMA_SEPARATED_LIST, CeleryCommand, CeleryOption
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE, EX_UNAVAILABLE
from celery.utils.text import pluralize

from .errors import (
    AccountMovingError,
    DeadLetterNotFound,
    InvalidLimitError,
    StoreUnavailableError,
)
from .install import lift_slow_down
from .install import pause as pause_account
from .install import resume as resume_account
from .limit_reports import default_limit_text, limits_command
from .reports import (
    BatchOutcome,
    PurgeSelectionError,
    accounts_text,
    cancel_each,
    dead_letters_report,
    failure_lines,
    jobs_report,
    lift_report,
    named_letters_report,
    pause_report,
    purge_each,
    purge_selection,
    replay_each,
    resume_report,
    run_now_each,
    scheduled_report,
    status_report,
    workers_report,
)
from .settings import MAX_SHARDS, settings_for
from .store import ConsoleReader, DeadLetters, StoreInspector, store_for
from .store.shards.format_upgrade import FormatUpgrader, UpgradeError
from .store.shards.format_upgrade import describe as describe_upgrade
from .store.shards.reshard import Resharder, ReshardError, describe

# -- the celery sub-command ------------------------------------------------------------------


class StoreCommand(CeleryCommand):
    """A Celery sub-command that turns an unreachable fair store, or an account a reshard is
    moving (try again), into a clear exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreUnavailableError as exc:
            raise CeleryCommandException(
                message=f"The fair store (Redis) cannot be reached: {exc}",
                exit_code=EX_UNAVAILABLE) from exc
        except AccountMovingError as exc:
            raise CeleryCommandException(message=str(exc), exit_code=os.EX_TEMPFAIL) from exc


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
    """Fair queues, accounts, jobs and dead letters, read from the fair store (Redis).

    `pause`, `resume`, `cancel`, `run-now`, `dlq replay` and `dlq purge` change something;
    purge asks first unless --yes.
    """


@fairqueue.command(cls=StoreCommand)
@queues_option
@click.option("--deferred", cls=CeleryOption, type=click.IntRange(1), default=10,
              show_default=True, help_group="Store Options",
              help="Accounts deferred by their limit to list per queue.")
@click.pass_context
def status(ctx: click.Context, queues: list[str] | None, deferred: int, **kwargs: Any) -> None:
    """Jobs, oldest waiting age and live workers per queue (with a warning for a queue no
    worker consumes), accounts deferred by their limit, accounts and queues paused by an
    operator, DLQ size, counters."""
    app = _app(ctx)
    ctx.obj.echo(status_report(app, StoreInspector(app).status(queues, deferred_limit=deferred)))


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
    """Per-account jobs, state, limit and the reason it does not run now, from the store;
    with --account, that account in every queue, in full."""
    ctx.obj.echo(accounts_text(_app(ctx), queues, account, limit))


@fairqueue.command(cls=StoreCommand)
@click.option("--account", cls=CeleryOption, required=True, help_group="Store Options",
              help="The account whose jobs to list.")
@click.option("--limit", cls=CeleryOption, type=click.IntRange(1), default=50,
              show_default=True, help_group="Store Options", help="Most jobs to show.")
@click.pass_context
def jobs(ctx: click.Context, account: str, limit: int, **kwargs: Any) -> None:
    """An account's jobs in the fair store now: running, ready or deferred, delayed."""
    reader = ConsoleReader(store_for(_app(ctx)))
    ctx.obj.echo(jobs_report(reader.live_jobs(account, limit), reader.server_time()))


@fairqueue.command(cls=StoreCommand)
@click.pass_context
def workers(ctx: click.Context, **kwargs: Any) -> None:
    """Live workers (registered by their heartbeat): queues, slots, last heartbeat."""
    reader = ConsoleReader(store_for(_app(ctx)))
    ctx.obj.echo(workers_report(reader.workers(), reader.server_time()))


scope_options = [
    click.option("--account", cls=CeleryOption, help_group="Pause Options",
                 help="The account (with --queue: only in that queue; else in every queue)."),
    click.option("--queue", cls=CeleryOption, help_group="Pause Options",
                 help="The queue (without --account: the whole queue)."),
]


def _scope(account: str | None, queue: str | None) -> None:
    if account is None and queue is None:
        raise click.UsageError("give --account, --queue, or both")


@fairqueue.command(cls=StoreCommand)
@scope_options[0]
@scope_options[1]
@click.option("--by", cls=CeleryOption, help_group="Pause Options",
              help="Who pauses (default: the login name).")
@click.option("--reason", cls=CeleryOption, default="", help_group="Pause Options",
              help="Why, for whoever looks at it later.")
@click.pass_context
def pause(ctx: click.Context, account: str | None, queue: str | None, by: str | None,
          reason: str, **kwargs: Any) -> None:
    """Stop handing out an account's (or a queue's) jobs; they stay ready until resume."""
    _scope(account, queue)
    done = pause_account(_app(ctx), account, queue, by=by or getpass.getuser(), reason=reason)
    ctx.obj.echo(pause_report(done))


@fairqueue.command(cls=StoreCommand)
@scope_options[0]
@scope_options[1]
@click.pass_context
def resume(ctx: click.Context, account: str | None, queue: str | None, **kwargs: Any) -> None:
    """End the pause made with the same --account and --queue."""
    _scope(account, queue)
    resumed = resume_account(_app(ctx), account, queue)
    ctx.obj.echo(resume_report(account, queue, resumed))
    if not resumed:
        ctx.exit(EX_FAILURE)


@fairqueue.command(cls=StoreCommand)
@click.option("--queue", cls=CeleryOption, required=True, help_group="Pause Options",
              help="The queue whose provider asked to slow down.")
@click.option("--account", cls=CeleryOption, help_group="Pause Options",
              help="The account in that queue (without it: the whole queue's slow-down).")
@click.pass_context
def lift(ctx: click.Context, queue: str, account: str | None, **kwargs: Any) -> None:
    """End a provider's "slow down" now (`fairqueue status` lists them): the jobs it held run
    again at their limits."""
    lifted = lift_slow_down(_app(ctx), queue, account)
    ctx.obj.echo(lift_report(account, queue, lifted))
    if not lifted:
        ctx.exit(EX_FAILURE)


@fairqueue.command(cls=StoreCommand)
@click.argument("task_ids", nargs=-1, required=True)
@click.pass_context
def cancel(ctx: click.Context, task_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Take waiting fair jobs out of the store (task ids, or the job ids `jobs` shows)."""
    outcome = cancel_each(_app(ctx), task_ids)
    for task_id in outcome.done:
        ctx.obj.echo(f"cancelled {task_id}")
    report_failures(ctx, "cancelled", outcome)


@fairqueue.command(name="run-now", cls=StoreCommand)
@click.argument("task_ids", nargs=-1, required=True)
@click.pass_context
def run_now(ctx: click.Context, task_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Make delayed fair jobs ready now; they still obey their account's limits."""
    outcome = run_now_each(_app(ctx), task_ids)
    for task_id in outcome.done:
        ctx.obj.echo(f"made {task_id} ready")
    report_failures(ctx, "made ready", outcome)


@fairqueue.command(cls=StoreCommand)
@queues_option
@click.option("--limit", cls=CeleryOption, type=click.IntRange(1), default=50,
              show_default=True, help_group="Store Options", help="Most jobs to show.")
@click.pass_context
def scheduled(ctx: click.Context, queues: list[str] | None, limit: int, **kwargs: Any) -> None:
    """Fair jobs waiting for their time (eta, countdown, retry backoff), soonest first.

    They wait in the fair store, not in a worker; `celery inspect scheduled` lists them too, each
    under one worker that consumes its queue."""
    inspector = StoreInspector(_app(ctx))
    ctx.obj.echo(scheduled_report(inspector.scheduled(queues, limit),
                                  inspector.store.server_time()))


@fairqueue.command(cls=StoreCommand)
@click.option("--default", "set_default", cls=CeleryOption, is_flag=True,
              help_group="Limit Options",
              help="Set the store's default limit (for accounts without their own) to the "
                   "options given; every worker applies it from its next claim.")
@click.option("--account", cls=CeleryOption, help_group="Limit Options",
              help="Set this account's own limit to the options given (show it when none is "
                   "given); every worker applies it from its next claim.")
@click.option("--queue", cls=CeleryOption, help_group="Limit Options",
              help="Alone: set this queue's shared limit (all its accounts together: --rate, "
                   "--burst, --concurrency), show it when none is given; with --account: the "
                   "account's limit in this queue; with --default: the queue's default for its "
                   "accounts.")
@click.option("--clear", cls=CeleryOption, is_flag=True, help_group="Limit Options",
              help="Drop the limit the other options name (an account's own: the default "
                   "applies again).")
@click.option("--weight", cls=CeleryOption, type=int, help_group="Limit Options",
              help="Share of the claim beside accounts of weight 1 (default 1).")
@click.option("--rate", cls=CeleryOption, help_group="Limit Options",
              help="Rate in Celery's format, e.g. 10/s.")
@click.option("--burst", cls=CeleryOption, type=float, help_group="Limit Options",
              help="Tokens an idle account may save up.")
@click.option("--concurrency", cls=CeleryOption, type=click.IntRange(1),
              help_group="Limit Options", help="Most jobs of one account running at once.")
@click.option("--window", cls=CeleryOption, help_group="Limit Options",
              help="Working hours, e.g. 09:00-17:00.")
@click.option("--tz", cls=CeleryOption, help_group="Limit Options",
              help="Time zone of the window.")
@click.pass_context
def limits(ctx: click.Context, set_default: bool, account: str | None, queue: str | None,
           clear: bool, weight: int | None, rate: str | None, burst: float | None,
           concurrency: int | None, window: str | None, tz: str | None,
           **kwargs: Any) -> None:
    """The store's default limit, the accounts' own limits with their weights and the queues'
    limits; with --default, --account or --queue, set one (no other option: no limit, weight
    1)."""
    app = _app(ctx)
    store = store_for(app)
    given = {"rate": rate, "burst": burst, "concurrency": concurrency, "window": window,
             "tz": tz, "weight": weight}
    try:
        ctx.obj.echo(limits_command(app, set_default=set_default, account=account, clear=clear,
                                    given=given, queue=queue))
    except InvalidLimitError as exc:
        raise click.UsageError(str(exc)) from None
    if account is None and queue is None:
        ctx.obj.echo(default_limit_text(store.default_limit()))


F = TypeVar("F", bound=Callable[..., Any])


def fleet_wait_options(group: str, read: str) -> Callable[[F], F]:
    """``--settle`` and ``--timeout`` of a command that changes the whole store once every
    worker and producer has read the change (reshard, upgrade: store/shards/fleet_wait.py)."""
    def decorate(command: F) -> F:
        command = click.option(
            "--timeout", cls=CeleryOption, type=click.FloatRange(0), default=None,
            help_group=group,
            help=f"Most seconds to wait for every worker and producer to {read} (default: "
                 "twice fairqueue_shards_check_interval and 5 s); past it the command names "
                 "those that did not and changes nothing.")(command)
        return click.option(
            "--settle", cls=CeleryOption, type=click.FloatRange(0), default=None,
            help_group=group,
            help=f"Seconds waited once every worker and producer has {read}, for their calls "
                 "under way (default: 5).")(command)
    return decorate


@fairqueue.command(cls=StoreCommand)
@click.option("--to", "to", cls=CeleryOption, type=click.IntRange(2, MAX_SHARDS), required=True,
              help_group="Reshard Options", help="The number of shards to move the store to.")
@fleet_wait_options("Reshard Options", "read the move")
@click.pass_context
def reshard(ctx: click.Context, to: int, settle: float | None, timeout: float | None,
            **kwargs: Any) -> None:
    """Move the store to --to shards (more than it has), while workers and producers run: they
    follow the move, nothing restarts. Safe to interrupt: run it again to finish the move
    (docs/deployment.md, "Resharding")."""
    try:
        report = Resharder(settings_for(_app(ctx)), to, settle=settle, timeout=timeout,
                           say=ctx.obj.echo).run()
    except ReshardError as exc:
        raise CeleryCommandException(message=str(exc), exit_code=EX_FAILURE) from None
    for line in describe(report):
        ctx.obj.echo(line)


@fairqueue.command(cls=StoreCommand)
@fleet_wait_options("Upgrade Options", "read each step")
@click.pass_context
def upgrade(ctx: click.Context, settle: float | None, timeout: float | None,
            **kwargs: Any) -> None:
    """Convert a store an earlier celery-fairqueue wrote (layout format 1) to this version's
    layout, in short steps, while workers and producers of this version run; once no process
    of an earlier version reads it. Safe to interrupt: run it again to finish
    (docs/deployment.md, "Upgrading the layout to format 2")."""
    try:
        report = FormatUpgrader(settings_for(_app(ctx)), settle=settle, timeout=timeout,
                                say=ctx.obj.echo).run()
    except UpgradeError as exc:
        raise CeleryCommandException(message=str(exc), exit_code=EX_FAILURE) from None
    ctx.obj.echo(describe_upgrade(report))


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
    """One dead letter in full: reason, attempts, error and traceback. JOB_ID is its id, the
    Celery task id, or `task.name[task id]` as the worker log prints it; every letter of the
    task when it has several."""
    app = _app(ctx)
    try:
        letters = DeadLetters(app).named(job_id)
    except DeadLetterNotFound as exc:
        raise CeleryCommandException(message=str(exc.args[0]), exit_code=EX_FAILURE) from None
    ctx.obj.echo(named_letters_report(app, job_id, letters, show_args))


@dlq.command(name="replay", cls=StoreCommand)
@click.argument("job_ids", nargs=-1, required=True)
@click.pass_context
def dlq_replay(ctx: click.Context, job_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Run dead jobs again, as new jobs with the same task, arguments and business key.
    Each JOB_ID is a letter's id, the Celery task id, or `task.name[task id]` as the worker
    log prints it; a task id with several letters is refused, naming them."""
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
    """Delete dead letters for good: the ones named (as `dlq replay` takes them), or all
    older than --older-than."""
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
