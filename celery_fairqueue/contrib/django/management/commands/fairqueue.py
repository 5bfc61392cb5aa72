"""``manage.py fairqueue``: the fair store and its dead letters, for people with a Django login.

Replay and purge act on behalf of a user (``--user``) who must hold the permissions the admin
asks for, so being able to run the project's management commands is not enough to change dead
letters. ``celery -A proj fairqueue`` is the operator's tool instead: whoever can run it reaches
Redis directly, so it checks no users (and asks before it purges).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError

from celery_fairqueue.contrib.django.conf import celery_app
from celery_fairqueue.contrib.django.queries import account_overview
from celery_fairqueue.contrib.django.views import purge_dead_letters, replay_dead_letters
from celery_fairqueue.errors import StoreUnavailableError
from celery_fairqueue.reports import (
    BatchOutcome,
    PurgeSelectionError,
    dead_letters_report,
    failure_lines,
    purge_selection,
    status_report,
)
from celery_fairqueue.store import DeadLetters, StoreInspector
from celery_fairqueue.tables import duration, render

USER_HELP = ("Act as this user, who must hold the permission {perm} (as in the admin); the "
             "command refuses otherwise.")


class Command(BaseCommand):
    help = ("Fair queues, accounts and dead letters. `status` and `dlq list` read Redis, "
            "`accounts` reads the recorded jobs. `dlq replay` and `dlq purge` need --user "
            "USERNAME with the permission celery_fairqueue.replay_job or purge_job: they act "
            "for a Django user, as the admin does. (`celery -A proj fairqueue` is the "
            "operator's tool with Redis access and checks no users.)")

    def add_arguments(self, parser: ArgumentParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        status = commands.add_parser("status", help="Ready, delayed and running jobs per queue, "
                                                    "paused accounts, DLQ size, counters.")
        status.add_argument("-Q", "--queues", help="Comma-separated fair queues to show.")

        accounts = commands.add_parser("accounts", help="Per-account job counts, oldest ready "
                                                        "age and last error, from the database.")
        accounts.add_argument("--account", help="Only this account.")
        accounts.add_argument("--limit", type=int, default=50, help="Most accounts to show.")

        dlq = commands.add_parser("dlq", help="Dead letters: list, replay, purge.")
        dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
        listing = dlq_commands.add_parser("list", help="Dead letters, newest first.")
        listing.add_argument("--account", help="Only this account's.")
        listing.add_argument("--task", help="Only this task's (full name).")
        listing.add_argument("--reason", help="Only those whose reason contains this text.")
        listing.add_argument("--limit", type=int, default=50, help="Most to show.")
        listing.add_argument("--show-args", action="store_true",
                             help="Show job arguments, masked by the task's redact names.")

        replay = dlq_commands.add_parser(
            "replay", help="Run dead jobs again (needs --user with replay_job).")
        replay.add_argument("ids", nargs="+", metavar="ID", help="Dead letter ids.")
        replay.add_argument("--user", required=True,
                            help=USER_HELP.format(perm="celery_fairqueue.replay_job"))

        purge = dlq_commands.add_parser(
            "purge", help="Delete dead letters for good (needs --user with purge_job).")
        purge.add_argument("ids", nargs="*", metavar="ID", help="Dead letter ids.")
        purge.add_argument("--older-than", type=float, metavar="SECONDS",
                           help="Purge every dead letter that died more than SECONDS ago.")
        purge.add_argument("--user", required=True,
                           help=USER_HELP.format(perm="celery_fairqueue.purge_job"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["command"] == "status":
                self.status(options)
            elif options["command"] == "accounts":
                self.accounts(options)
            else:
                getattr(self, f"dlq_{options['dlq_command']}")(options)
        except StoreUnavailableError as exc:
            raise CommandError(f"The fair store (Redis) cannot be reached: {exc}") from exc
        except PermissionDenied as exc:
            raise CommandError(f"Refused: {exc}. Replay and purge act for a Django user who "
                               "holds the permission, as in the admin.") from exc

    def status(self, options: dict[str, Any]) -> None:
        app = celery_app()
        queues = options["queues"].split(",") if options["queues"] else None
        self.stdout.write(status_report(app, StoreInspector(app).status(queues)))

    def accounts(self, options: dict[str, Any]) -> None:
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

    def dlq_list(self, options: dict[str, Any]) -> None:
        app = celery_app()
        letters = DeadLetters(app)
        found = letters.list(account=options["account"], task=options["task"],
                             reason=options["reason"], limit=options["limit"])
        self.stdout.write(dead_letters_report(app, found, options["show_args"], letters.count()))

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

    def user(self, username: str) -> Any:
        try:
            return get_user_model()._default_manager.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None

    def report_failures(self, verb: str, outcome: BatchOutcome) -> None:
        for line in failure_lines(verb, outcome):
            self.stderr.write(line)
        if outcome.unreachable:
            raise CommandError(f"The fair store (Redis) cannot be reached: {outcome.unreachable}")
        if outcome.failed:
            raise CommandError(f"{len(outcome.failed)} dead letters were not {verb}")
