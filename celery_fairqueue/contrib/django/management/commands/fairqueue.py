"""``manage.py fairqueue``: the fair store and its dead letters, for people with a Django login.

The sub-commands and their reports are those of ``celery -A proj fairqueue`` (reports.py), plus
``recorded``, the per-account counts of the recorded jobs in the database, and ``prune``, which
deletes those past their retention. Replay, purge,
pause, resume, cancel and run-now act on behalf of a user (``--user``) who must hold the
permission the admin asks for, so being able to run the project's management commands is not
enough to change anything; ``reshard`` and ``upgrade`` need a superuser. ``celery -A proj
fairqueue`` is the operator's tool instead: whoever can run it reaches Redis directly, so it
checks no users (and asks before it purges).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError

from celery_fairqueue.contrib.django.conf import celery_app
from celery_fairqueue.contrib.django.console.actions import (
    LIMIT_PERMISSION,
    QUEUE_LIMIT_PERMISSION,
)
from celery_fairqueue.contrib.django.console.overview import account_overview
from celery_fairqueue.contrib.django.console.views import (
    purge_dead_letters,
    replay_dead_letters,
    require,
)
from celery_fairqueue.contrib.django.recording.pruner import Pruner
from celery_fairqueue.errors import (
    AccountMovingError,
    ConfigurationError,
    DeadLetterNotFound,
    InvalidLimitError,
    StoreUnavailableError,
)
from celery_fairqueue.install import lift_slow_down, pause, resume
from celery_fairqueue.limit_reports import default_limit_text, limits_command
from celery_fairqueue.reports import (
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
    purge_selection,
    resume_report,
    run_now_each,
    scheduled_report,
    status_report,
    workers_report,
)
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import ConsoleReader, DeadLetters, StoreInspector, store_for
from celery_fairqueue.store.shards.format_upgrade import FormatUpgrader, UpgradeError
from celery_fairqueue.store.shards.format_upgrade import describe as describe_upgrade
from celery_fairqueue.store.shards.reshard import Resharder, ReshardError, describe
from celery_fairqueue.tables import duration, render

USER_HELP = ("Act as this user, who must hold the permission {perm} (as in the admin); the "
             "command refuses otherwise.")
LETTER_NAMES_HELP = ("Each a letter's id, the Celery task id, or task.name[task id] as the "
                     "worker logs it (a task id with several letters is refused).")
#: The permissions of the console's actions (the admin asks for the same).
PAUSE_PERMISSION = "celery_fairqueue.pause_account"
RESUME_PERMISSION = "celery_fairqueue.resume_account"
LIFT_PERMISSION = "celery_fairqueue.lift_slow_down"
CANCEL_PERMISSION = "celery_fairqueue.cancel_job"
RUN_NOW_PERMISSION = "celery_fairqueue.run_job_now"


class Command(BaseCommand):
    help = ("Fair queues, accounts, jobs and dead letters, with the reports of `celery -A proj "
            "fairqueue`; `recorded` reads the recorded jobs. `pause`, `resume`, `cancel`, "
            "`run-now`, `dlq replay` and `dlq purge` need --user USERNAME with the permission "
            "the admin asks for: they act for a Django user; `reshard` needs a superuser. "
            "(`celery -A proj fairqueue` is the operator's tool with Redis access and checks "
            "no users.)")

    def add_arguments(self, parser: ArgumentParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        status = commands.add_parser(
            "status", help="Jobs, oldest waiting age and live workers per queue, accounts "
                           "deferred by their limit, accounts and queues paused by an "
                           "operator, DLQ size, counters.")
        status.add_argument("-Q", "--queues", help="Comma-separated fair queues to show.")

        accounts = commands.add_parser(
            "accounts", help="Per-account jobs, state, limit and the reason it does not run "
                             "now, from the store; --account: one account in full.")
        accounts.add_argument("-Q", "--queues", help="Comma-separated fair queues to show.")
        accounts.add_argument("--account", help="Only this account, in full.")
        accounts.add_argument("--limit", type=int, default=50, help="Most accounts to read.")

        recorded = commands.add_parser("recorded", help="Per-account job counts, oldest ready "
                                                        "age and last error, from the database.")
        recorded.add_argument("--account", help="Only this account.")
        recorded.add_argument("--limit", type=int, default=50, help="Most accounts to show.")

        commands.add_parser("prune", help="Delete the recorded jobs (and their attempts) "
                                          "past fairqueue_record_retention, in small "
                                          "batches; the store's jobs and dead letters stay.")

        jobs = commands.add_parser("jobs", help="An account's jobs in the fair store now.")
        jobs.add_argument("--account", required=True, help="The account.")
        jobs.add_argument("--limit", type=int, default=50, help="Most jobs to show.")

        commands.add_parser("workers", help="Live workers: queues, slots, last heartbeat.")
        scheduled = commands.add_parser("scheduled", help="Delayed fair jobs, soonest first.")
        scheduled.add_argument("-Q", "--queues", help="Comma-separated fair queues to show.")
        scheduled.add_argument("--limit", type=int, default=50, help="Most jobs to show.")

        for name, perm, text in (
                ("pause", PAUSE_PERMISSION, "Stop handing out an account's or a queue's jobs"),
                ("resume", RESUME_PERMISSION, "End the pause made with the same --account and "
                                              "--queue")):
            action = commands.add_parser(name, help=f"{text} (needs --user with "
                                                    f"{perm.split('.')[1]}).")
            action.add_argument("--account", help="The account (with --queue: only there).")
            action.add_argument("--queue", help="The queue (without --account: all of it).")
            action.add_argument("--user", required=True, help=USER_HELP.format(perm=perm))
            if name == "pause":
                action.add_argument("--reason", default="", help="Why, for whoever looks later.")
        lift = commands.add_parser("lift", help="End a provider's slow-down now (needs --user "
                                                "with lift_slow_down).")
        lift.add_argument("--queue", required=True, help="The queue it slowed down.")
        lift.add_argument("--account", help="The account there (without: the whole queue's).")
        lift.add_argument("--user", required=True, help=USER_HELP.format(perm=LIFT_PERMISSION))
        for name, perm, text in (
                ("cancel", CANCEL_PERMISSION, "Take waiting fair jobs out of the store"),
                ("run-now", RUN_NOW_PERMISSION, "Make delayed fair jobs ready now")):
            action = commands.add_parser(name, help=f"{text} (needs --user with "
                                                    f"{perm.split('.')[1]}).")
            action.add_argument("ids", nargs="+", metavar="TASK_ID", help="Task or job ids.")
            action.add_argument("--user", required=True, help=USER_HELP.format(perm=perm))

        limits = commands.add_parser(
            "limits", help="The store's default limit, the accounts' own limits with their "
                           "weights and the queues' limits; --default or --account sets one "
                           f"(needs --user with {LIMIT_PERMISSION.split('.')[1]}), --queue "
                           "alone a queue's shared limit (needs --user with "
                           f"{QUEUE_LIMIT_PERMISSION.split('.')[1]}).")
        limits.add_argument("--default", action="store_true", dest="set_default",
                            help="Set the default limit to the options given.")
        limits.add_argument("--account", help="Set this account's own limit to the options "
                                              "given (show it when none is given).")
        limits.add_argument("--queue", help="Alone: set this queue's shared limit (--rate, "
                                            "--burst, --concurrency); with --account: the "
                                            "account's limit in it; with --default: its default "
                                            "for accounts.")
        limits.add_argument("--clear", action="store_true",
                            help="Drop the limit the other options name.")
        for option, kind in (("--rate", str), ("--burst", float), ("--concurrency", int),
                             ("--window", str), ("--tz", str), ("--weight", int)):
            limits.add_argument(option, type=kind)
        limits.add_argument("--user", help=USER_HELP.format(perm=LIMIT_PERMISSION))

        reshard = self.superuser_command(
            commands, "reshard", "Move the store to --to shards (more than it has) while "
            "workers and producers run", "read the move")
        reshard.add_argument("--to", type=int, required=True, help="The number of shards.")
        self.superuser_command(
            commands, "upgrade", "Convert a store an earlier celery-fairqueue wrote (layout "
            "format 1) while workers and producers run", "read each step")

        dlq = commands.add_parser("dlq", help="Dead letters: list, show, replay, purge.")
        dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
        listing = dlq_commands.add_parser("list", help="Dead letters, newest first.")
        listing.add_argument("--account", help="Only this account's.")
        listing.add_argument("--task", help="Only this task's (full name).")
        listing.add_argument("--reason", help="Only those whose reason contains this text.")
        listing.add_argument("--limit", type=int, default=50, help="Most to show.")
        listing.add_argument("--show-args", action="store_true",
                             help="Show job arguments, masked by the task's redact names.")
        show = dlq_commands.add_parser("show", help="One dead letter in full.")
        show.add_argument("id", metavar="ID", help="Its id, the Celery task id, or "
                                                   "task.name[task id] as the worker logs it.")
        show.add_argument("--show-args", action="store_true",
                          help="Show job arguments, masked by the task's redact names.")

        replay = dlq_commands.add_parser(
            "replay", help="Run dead jobs again (needs --user with replay_job).")
        replay.add_argument("ids", nargs="+", metavar="ID", help=LETTER_NAMES_HELP)
        replay.add_argument("--user", required=True,
                            help=USER_HELP.format(perm="celery_fairqueue.replay_job"))

        purge = dlq_commands.add_parser(
            "purge", help="Delete dead letters for good (needs --user with purge_job).")
        purge.add_argument("ids", nargs="*", metavar="ID", help=LETTER_NAMES_HELP)
        purge.add_argument("--older-than", type=float, metavar="SECONDS",
                           help="Purge every dead letter that died more than SECONDS ago.")
        purge.add_argument("--user", required=True,
                           help=USER_HELP.format(perm="celery_fairqueue.purge_job"))

    @staticmethod
    def superuser_command(commands: Any, name: str, what: str, read: str) -> ArgumentParser:
        """A command that changes the whole store, waiting for every process to read it: a
        superuser's (``--user``), with its ``--settle`` and ``--timeout``."""
        parser: ArgumentParser = commands.add_parser(
            name, help=f"{what} (needs --user, a superuser; docs/deployment.md).")
        parser.add_argument("--settle", type=float, help="Seconds waited once every worker "
                            f"and producer has {read}, for their "
                            "calls under way (default: 5).")
        parser.add_argument("--timeout", type=float, help="Most seconds to wait for every "
                            f"worker and producer to {read} (default: twice "
                            "fairqueue_shards_check_interval and 5 s).")
        parser.add_argument("--user", required=True,
                            help="Act as this user, who must be an active superuser.")
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["command"] == "dlq":
                getattr(self, f"dlq_{options['dlq_command']}")(options)
            else:
                getattr(self, options["command"].replace("-", "_"))(options)
        except StoreUnavailableError as exc:
            raise CommandError(f"The fair store (Redis) cannot be reached: {exc}") from exc
        except AccountMovingError as exc:
            raise CommandError(str(exc)) from exc
        except PermissionDenied as exc:
            raise CommandError(f"Refused: {exc}. Changes act for a Django user who holds the "
                               "permission, as in the admin.") from exc

    @staticmethod
    def queues(options: dict[str, Any]) -> list[str] | None:
        return options["queues"].split(",") if options.get("queues") else None

    def status(self, options: dict[str, Any]) -> None:
        app = celery_app()
        self.stdout.write(status_report(app, StoreInspector(app).status(self.queues(options))))

    def accounts(self, options: dict[str, Any]) -> None:
        self.stdout.write(accounts_text(celery_app(), self.queues(options), options["account"],
                                        options["limit"]))

    def jobs(self, options: dict[str, Any]) -> None:
        reader = ConsoleReader(store_for(celery_app()))
        self.stdout.write(jobs_report(reader.live_jobs(options["account"], options["limit"]),
                                      reader.server_time()))

    def workers(self, options: dict[str, Any]) -> None:
        reader = ConsoleReader(store_for(celery_app()))
        self.stdout.write(workers_report(reader.workers(), reader.server_time()))

    def scheduled(self, options: dict[str, Any]) -> None:
        inspector = StoreInspector(celery_app())
        self.stdout.write(scheduled_report(
            inspector.scheduled(self.queues(options), options["limit"]),
            inspector.console.server_time()))

    def limits(self, options: dict[str, Any]) -> None:
        store = store_for(celery_app())
        given = {name: options[name]
                 for name in ("rate", "burst", "concurrency", "window", "tz", "weight")}
        changes = options["set_default"] or options["clear"] or (
            (options["account"], options["queue"]) != (None, None)
            and any(v is not None for v in given.values()))
        if changes:
            if not options["user"]:
                raise CommandError("--default, --clear and setting an account's or a queue's "
                                   "limit need --user")
            shared = options["account"] is None and not options["set_default"]
            require(self.user(options["user"]),
                    QUEUE_LIMIT_PERMISSION if shared else LIMIT_PERMISSION)
        try:
            text = limits_command(celery_app(), set_default=options["set_default"],
                                  account=options["account"], clear=options["clear"],
                                  given=given, queue=options["queue"])
        except InvalidLimitError as exc:
            raise CommandError(str(exc)) from exc
        if text:
            self.stdout.write(text)
        if options["account"] is None and options["queue"] is None:
            self.stdout.write(default_limit_text(store.default_limit()))

    def scope(self, options: dict[str, Any]) -> tuple[str | None, str | None]:
        if options["account"] is None and options["queue"] is None:
            raise CommandError("give --account, --queue, or both")
        return options["account"], options["queue"]

    def pause(self, options: dict[str, Any]) -> None:
        account, queue = self.scope(options)
        user = self.user(options["user"])
        require(user, PAUSE_PERMISSION)
        self.stdout.write(pause_report(pause(celery_app(), account, queue,
                                             by=user.get_username(), reason=options["reason"])))

    def resume(self, options: dict[str, Any]) -> None:
        account, queue = self.scope(options)
        require(self.user(options["user"]), RESUME_PERMISSION)
        resumed = resume(celery_app(), account, queue)
        self.stdout.write(resume_report(account, queue, resumed))
        if not resumed:
            raise CommandError("nothing was resumed")

    def lift(self, options: dict[str, Any]) -> None:
        require(self.user(options["user"]), LIFT_PERMISSION)
        lifted = lift_slow_down(celery_app(), options["queue"], options["account"])
        self.stdout.write(lift_report(options["account"], options["queue"], lifted))
        if not lifted:
            raise CommandError("nothing was lifted")

    def cancel(self, options: dict[str, Any]) -> None:
        require(self.user(options["user"]), CANCEL_PERMISSION)
        outcome = cancel_each(celery_app(), options["ids"])
        for task_id in outcome.done:
            self.stdout.write(f"cancelled {task_id}")
        self.report_failures("cancelled", outcome, "jobs")

    def run_now(self, options: dict[str, Any]) -> None:
        require(self.user(options["user"]), RUN_NOW_PERMISSION)
        outcome = run_now_each(celery_app(), options["ids"])
        for task_id in outcome.done:
            self.stdout.write(f"made {task_id} ready")
        self.report_failures("made ready", outcome, "jobs")

    def recorded(self, options: dict[str, Any]) -> None:
        rows = [row for row in account_overview()
                if options["account"] in (None, row["account"])]
        if not rows:
            self.stdout.write("No jobs recorded.")
            return
        shown = rows[:options["limit"]]
        self.stdout.write(render(
            ["ACCOUNT", "READY", "DEFERRED", "RUNNING", "FAILED", "DEAD", "OLDEST READY",
             "NEXT RUN", "LAST ERROR"],
            [[r["account"], r["ready"], r["deferred"], r["running"], r["failed"], r["dead"],
              duration(r["oldest_ready_age"]),
              r["next_run_at"].strftime("%Y-%m-%d %H:%M:%S") if r["next_run_at"] else None,
              r["last_error"] or None] for r in shown]))
        self.stdout.write(f"\n{len(shown)} of {len(rows)} accounts, from the recorded jobs.")

    def prune(self, options: dict[str, Any]) -> None:
        deleted = Pruner(celery_app()).prune()
        self.stdout.write(f"Deleted {deleted} recorded jobs past their retention.")

    def dlq_list(self, options: dict[str, Any]) -> None:
        app = celery_app()
        letters = DeadLetters(app)
        found = letters.list(account=options["account"], task=options["task"],
                             reason=options["reason"], limit=options["limit"])
        self.stdout.write(dead_letters_report(app, found, options["show_args"], letters.count()))

    def dlq_show(self, options: dict[str, Any]) -> None:
        app = celery_app()
        try:
            letters = DeadLetters(app).named(options["id"])
        except DeadLetterNotFound as exc:
            raise CommandError(str(exc.args[0])) from None
        self.stdout.write(named_letters_report(app, options["id"], letters,
                                               options["show_args"]))

    def dlq_replay(self, options: dict[str, Any]) -> None:
        outcome = replay_dead_letters(self.user(options["user"]), options["ids"])
        for job_id, task_id in outcome.done.items():
            self.stdout.write(f"replayed {job_id} as task {task_id}")
        self.report_failures("replayed", outcome)

    def dlq_purge(self, options: dict[str, Any]) -> None:
        try:
            selection = purge_selection(DeadLetters(celery_app()), options["ids"],
                                        options["older_than"])
        except PurgeSelectionError as exc:
            raise CommandError(str(exc)) from None
        outcome = purge_dead_letters(self.user(options["user"]), selection.ids)
        self.stdout.write(f"purged {len(outcome.done)} dead letters")
        self.report_failures("purged", outcome)

    def superuser(self, options: dict[str, Any]) -> None:
        user = self.user(options["user"])
        if not (user.is_active and user.is_superuser):
            raise PermissionDenied(f"{user} is not an active superuser")

    def reshard(self, options: dict[str, Any]) -> None:
        self.superuser(options)
        try:
            report = Resharder(settings_for(celery_app()), options["to"],
                               settle=options["settle"], timeout=options["timeout"],
                               say=self.stdout.write).run()
        except (ReshardError, ConfigurationError) as exc:
            raise CommandError(str(exc)) from None
        for line in describe(report):
            self.stdout.write(line)

    def upgrade(self, options: dict[str, Any]) -> None:
        self.superuser(options)
        try:
            report = FormatUpgrader(settings_for(celery_app()), settle=options["settle"],
                                    timeout=options["timeout"], say=self.stdout.write).run()
        except (UpgradeError, ConfigurationError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(describe_upgrade(report))

    def user(self, username: str) -> Any:
        try:
            return get_user_model()._default_manager.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None

    def report_failures(self, verb: str, outcome: BatchOutcome,
                        what: str = "dead letters") -> None:
        for line in failure_lines(verb, outcome):
            self.stderr.write(line)
        if outcome.unreachable:
            raise CommandError(f"The fair store (Redis) cannot be reached: {outcome.unreachable}")
        if outcome.failed:
            raise CommandError(f"{len(outcome.failed)} {what} were not {verb}")
