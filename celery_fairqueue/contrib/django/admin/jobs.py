"""Jobs (read-only: what the recorder saw happen) and the dead-letter queue, with replay and
purge behind their own permissions.

Browsing reads only the database, so the lists work while Redis is down; a dead letter's page
also reads its traceback from the store, and says so when it cannot.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join

from ....errors import FairqueueError
from ....reports import BatchOutcome
from ....store import DeadLetters
from ....tables import duration, truncate
from ..conf import celery_app
from ..console.actions import CANCEL_PERMISSION, RUN_NOW_PERMISSION
from ..console.views import (
    PURGE_PERMISSION,
    REPLAY_PERMISSION,
    purge_dead_letters,
    replay_dead_letters,
)
from ..models import Attempt, DeadJob, Job
from .common import (
    AccountFilter,
    account_link,
    exact,
    long_id,
    milliseconds,
    nowrap,
    status_badge,
)
from .search import JobSearch, arguments_shown

ERROR_TITLE_WIDTH = 500  # the last error's hover text
ATTEMPT_ID_WIDTH = 20  # the attempts table's ids: its seven columns fit at 1366 px
REASON_COLUMN_WIDTH = 48
GAVE_UP = "gave up after"
WAITING = (Job.Status.READY, Job.Status.DEFERRED)


def runs_of(job: Job) -> list[tuple[str, list[Attempt]]]:
    """The job's attempts, one group per run (a new task id: a dead letter's replay, or the same
    business key enqueued again), oldest first, so their attempts never mix. A run after one
    that succeeded is the key's next enqueue (dedupe refuses it while the key is pending,
    running or done); any other comes from a dead letter's replay."""
    runs: dict[str, list[Attempt]] = {}
    for attempt in job.attempt_list():
        runs.setdefault(attempt.delivery_id.rsplit(":", 1)[0], []).append(attempt)
    for attempts in runs.values():  # the latest, unsaved, after the rows of its number
        attempts.sort(key=lambda a: (a.number, a.id is None, a.id or 0))
    titled: list[tuple[str, list[Attempt]]] = []
    replays = 0
    for n, (task_id, attempts) in enumerate(runs.items()):
        if n == 0:
            title = "First run"
        elif titled[-1][1][-1].outcome == Attempt.Outcome.SUCCEEDED:
            title = f"Run {n + 1}, enqueued again"  # its key was free again: done long ago
        else:
            replays += 1
            title = f"Replay {replays}"
        titled.append((format_html("{} (task id {})", title, long_id(task_id)), attempts))
    return titled


def attempts_html(job: Job) -> str:
    runs = runs_of(job)
    if not runs:
        return "No attempt recorded yet."
    parts = []
    for title, attempts in runs:
        rows = format_html_join(
            "", '<tr class="fq-attempt"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
                "<td>{}</td><td>{}</td></tr>{}",
            ((a.number, long_id(a.delivery_id, ATTEMPT_ID_WIDTH), status_badge(a.outcome),
              long_id(a.worker or "-", ATTEMPT_ID_WIDTH),
              exact(a.started_at), exact(a.finished_at),
              nowrap(milliseconds(a.started_at, a.finished_at)),
              format_html('<tr><td></td><td colspan="6"><pre class="fq-pre">{}</pre></td></tr>',
                          a.error) if a.error else "") for a in attempts))
        parts.append(format_html(
            '<h3 class="fq-run">{}</h3><div class="fq-scroll"><table class="fq-attempts"><thead>'
            "<tr><th>#</th><th>delivery</th><th>outcome</th><th>worker</th><th>started</th>"
            "<th>finished</th><th>took</th></tr></thead><tbody>{}</tbody>"
            "</table></div>", title, rows))
    return format_html_join("", "{}", ((p,) for p in parts))


class DeadReasonFilter(admin.SimpleListFilter):
    """Permanent failures apart from jobs whose attempts ran out."""

    title = "reason"
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[Any]:
        return [("permanent", "permanent failure"), ("gave_up", "gave up after retries")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "gave_up":
            return queryset.filter(dead_reason__startswith=GAVE_UP)
        if self.value() == "permanent":
            return queryset.exclude(dead_reason__startswith=GAVE_UP)
        return queryset


@admin.register(Job)
class JobAdmin(JobSearch):
    """Every recorded job, read-only: what the recorder saw happen."""

    list_display: tuple[str, ...] = (
        "task_short", "account_page", "arguments_short", "status_badge", "attempts", "queue",
        "next_run_short", "age", "error_short")
    list_filter: tuple[Any, ...] = (
        AccountFilter, "status", ("task", admin.AllValuesFieldListFilter),
        ("queue", admin.AllValuesFieldListFilter), ("enqueued_at", admin.DateFieldListFilter))
    show_full_result_count = False  # a COUNT(*) over every job on each page is not free
    list_per_page = 50
    change_list_template = "admin/celery_fairqueue/job_change_list.html"
    change_form_template = "admin/celery_fairqueue/job_change_form.html"
    fieldsets: tuple[Any, ...] = (
        (None, {"fields": ("task", "account_page", "queue", "status_badge", "attempts",
                           "worker")}),
        ("Identity", {"fields": ("job_key", "task_id", "delivery_id", "external_id")}),
        ("Times", {"fields": ("enqueued", "waiting", "next_run", "started", "finished",
                              "run_time", "updated")}),
        ("Arguments (redacted)", {"fields": ("arguments",)}),
        ("Last error", {"fields": ("last_error_text",)}),
        ("Attempts, by run", {"fields": ("attempt_runs",)}),
    )

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        # the admin shows a read-only field's help text as HTML: "task:<id>" would vanish
        help_text = str(Job._meta.get_field("job_key").help_text)
        kwargs["help_texts"] = {"job_key": escape(help_text), **kwargs.get("help_texts", {})}
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [name for _, options in self.fieldsets for name in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # rows mirror Redis; deleting one would only hide a job that still exists

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # the list of jobs is a wide table: at a laptop's width (1,280 px) the admin's side
        # menu would leave it 630 px beside the filters; the breadcrumbs lead back instead
        return super().changelist_view(
            request, {**(extra_context or {}), "is_nav_sidebar_enabled": False})

    def get_urls(self) -> list[URLPattern]:
        overview = path("accounts/", self.admin_site.admin_view(self.account_overview),
                        name="celery_fairqueue_job_accounts")
        by_key = self.by_key_urls() if self.model is Job else []  # one, under the jobs
        return [overview, *by_key, *super().get_urls()]

    def account_overview(self, request: HttpRequest) -> HttpResponse:
        """Where the overview used to live: it is the accounts' list now."""
        return HttpResponseRedirect(reverse("admin:celery_fairqueue_account_changelist"))

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        job = self.get_object(request, object_id)
        user = request.user
        extra = {**(extra_context or {}), "fq_job": job,
                 "fq_action_url": reverse("admin:celery_fairqueue_account_action")}
        if job is not None and job.status in WAITING:
            extra["fq_can_cancel"] = user.has_perm(CANCEL_PERMISSION)
            extra["fq_can_run_now"] = (job.status == Job.Status.DEFERRED
                                       and user.has_perm(RUN_NOW_PERMISSION))
        if job is not None and job.status == Job.Status.DEAD:
            extra["fq_can_replay"] = user.has_perm(REPLAY_PERMISSION)
            extra["fq_replay_url"] = reverse("admin:celery_fairqueue_deadjob_replay",
                                             args=[job.pk])
        return super().change_view(request, object_id, form_url, extra)

    @admin.display(description="task", ordering="task")
    def task_name(self, job: Job) -> str:
        return job.task.rsplit(".", 1)[-1]

    @admin.display(description="task", ordering="task")
    def task_short(self, job: Job) -> str:
        """In the list: the task's own name, clipped to the column, its full name on hover."""
        return format_html('<div class="fq-clip" title="{}">{}</div>', job.task,
                           self.task_name(job))

    @admin.display(description="account", ordering="account")
    def account_page(self, job: Job) -> str:
        return account_link(job.account)

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status)

    @admin.display(description="age", ordering="-enqueued_at")
    def age(self, job: Job) -> str:
        if job.enqueued_at is None:
            return "-"
        return nowrap(duration((timezone.now() - job.enqueued_at).total_seconds()))

    @admin.display(description="args")  # Flower's word: a narrow column at 1366 px
    def arguments_short(self, job: Job) -> str:
        return arguments_shown(job)

    @admin.display(description="last error")
    def error_short(self, job: Job) -> str:
        """The error's first line, clipped to the column; its first lines whole on hover."""
        if not job.last_error:
            return ""
        first = job.last_error.strip().split("\n", 1)[0]
        return format_html('<div class="fq-clip fq-error" title="{}">{}</div>',
                           truncate(job.last_error, ERROR_TITLE_WIDTH), first)

    @admin.display(description="arguments")
    def arguments(self, job: Job) -> str:
        return format_html('<pre class="fq-pre">{}</pre>',
                           json.dumps(job.args, indent=2, default=str))

    @admin.display(description="last error")
    def last_error_text(self, job: Job) -> str:
        return format_html('<pre class="fq-pre">{}</pre>', job.last_error or "-")

    @admin.display(description="attempts")
    def attempt_runs(self, job: Job) -> str:
        return attempts_html(job)

    @admin.display(description="enqueued", ordering="enqueued_at")
    def enqueued(self, job: Job) -> str:
        return nowrap(exact(job.enqueued_at))

    @admin.display(description="waiting since")
    def waiting(self, job: Job) -> str:
        return nowrap(exact(job.waiting_since))

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, job: Job) -> str:
        return nowrap(exact(job.next_run_at))

    @admin.display(description="next run", ordering="next_run_at")
    def next_run_short(self, job: Job) -> str:
        """In the list: how soon, the exact time on hover (a whole time takes a column)."""
        if job.next_run_at is None:
            return "-"
        seconds = (job.next_run_at - timezone.now()).total_seconds()
        return format_html('<span title="{}" style="white-space:nowrap">{}</span>',
                           exact(job.next_run_at),
                           f"in {duration(seconds)}" if seconds > 0 else "due")

    @admin.display(description="started")
    def started(self, job: Job) -> str:
        return exact(job.started_at)

    @admin.display(description="finished")
    def finished(self, job: Job) -> str:
        return exact(job.finished_at)

    @admin.display(description="last run took")
    def run_time(self, job: Job) -> str:
        return milliseconds(job.started_at, job.finished_at)

    @admin.display(description="updated")
    def updated(self, job: Job) -> str:
        return exact(job.updated_at)


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    """The dead-letter queue: replay or purge, each behind its own permission."""

    list_display = ("task_name", "account_page", "reason_short", "attempts", "queue", "died",
                    "error_short")
    list_filter = (AccountFilter, DeadReasonFilter, ("task", admin.AllValuesFieldListFilter),
                   ("queue", admin.AllValuesFieldListFilter),
                   ("finished_at", admin.DateFieldListFilter))
    actions = ("replay", "purge")
    fieldsets = (
        (None, {"fields": ("task", "account_page", "queue", "status_badge", "attempts",
                           "worker")}),
        ("Why it is dead", {"fields": ("reason_text", "last_error_text", "traceback")}),
        ("Identity", {"fields": ("job_key", "task_id", "delivery_id", "external_id")}),
        ("Times", {"fields": ("enqueued", "started", "finished", "run_time", "updated")}),
        ("Arguments (redacted)", {"fields": ("arguments",)}),
        ("Attempts, by run", {"fields": ("attempt_runs",)}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=Job.Status.DEAD)

    def get_urls(self) -> list[URLPattern]:
        replay = path("<path:object_id>/replay/", self.admin_site.admin_view(self.replay_one),
                      name="celery_fairqueue_deadjob_replay")
        by_name = path("letter/<path:name>/", self.admin_site.admin_view(self.letter_page),
                       name="celery_fairqueue_deadjob_letter")
        return [by_name, replay, *super().get_urls()]

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REPLAY_PERMISSION)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PURGE_PERMISSION)

    @admin.display(description="reason", ordering="dead_reason")
    def reason_short(self, job: Job) -> str:
        return truncate(job.dead_reason, REASON_COLUMN_WIDTH) if job.dead_reason else "-"

    @admin.display(description="reason")
    def reason_text(self, job: Job) -> str:
        reason = job.dead_reason or "-"
        kind = ("gave up: its attempts ran out" if reason.startswith(GAVE_UP) else
                "permanent: not retried")
        return format_html('<strong>{}</strong><br><span class="help">{}</span>', reason, kind)

    @admin.display(description="traceback")
    def traceback(self, job: Job) -> str:
        try:
            letter = DeadLetters(celery_app()).named(job.delivery_id)[-1]
        except FairqueueError as exc:
            return format_html('<span class="fq-warning">Not in the fair store ({}): {}</span>',
                               "replayed, purged or unreachable", exc)
        return format_html('<pre class="fq-pre fq-traceback">{}</pre>',
                           letter.traceback or letter.error or "(no traceback kept)")

    @admin.display(description="died", ordering="-finished_at")
    def died(self, job: Job) -> str:
        if job.finished_at is None:
            return "-"
        return nowrap(f"{duration((timezone.now() - job.finished_at).total_seconds())} ago")

    def replay_one(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The Replay button of a dead letter's page (POST)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_replay_permission(request):
            raise PermissionDenied
        job = get_object_or_404(self.get_queryset(request), pk=object_id)
        outcome = replay_dead_letters(request.user, [job.delivery_id])
        self._report(request, "Replayed", outcome, [job])
        for letter_id, task_id in outcome.done.items():
            self.log_change(request, job, f"Replayed dead letter {letter_id} as {task_id}")
        if outcome.done:
            return HttpResponseRedirect(reverse("admin:celery_fairqueue_job_change",
                                                args=[job.pk]))
        return HttpResponseRedirect(reverse("admin:celery_fairqueue_deadjob_change",
                                            args=[job.pk]))

    def letter_page(self, request: HttpRequest, name: str) -> HttpResponse:
        """``letter/<name>/``: the page of the dead letter a person names as the command lines
        take it (its id, the Celery task id, or ``task.name[task id]`` from a worker log), so
        the console and a support note can link to a letter by whatever id they hold."""
        try:
            ids = DeadLetters(celery_app()).resolve(name)
        except FairqueueError as exc:
            self.message_user(request, f"The fair store cannot be read: {exc}", messages.ERROR)
            ids = []
        rows = list(self.get_queryset(request).filter(
            delivery_id__in=ids or [name]).order_by("-finished_at", "-pk"))
        if not rows:
            self.message_user(request, f"No dead letter {name!r} (replayed or purged "
                                       "already, or not recorded yet).", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:celery_fairqueue_deadjob_changelist"))
        if len(rows) > 1:
            self.message_user(request, f"{name!r} names {len(rows)} dead letters ("
                                       f"{', '.join(r.delivery_id for r in rows)}); this is "
                                       "the newest.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:celery_fairqueue_deadjob_change",
                                            args=[rows[0].pk]))

    @admin.action(description="Replay the selected dead letters", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        jobs = list(queryset)
        outcome = replay_dead_letters(request.user, [job.delivery_id for job in jobs])
        self._report(request, "Replayed", outcome, jobs)

    @admin.action(description="Purge the selected dead letters", permissions=["purge"])
    def purge(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        jobs = list(queryset)
        outcome = purge_dead_letters(request.user, [job.delivery_id for job in jobs])
        self._report(request, "Purged", outcome, jobs)

    def _report(self, request: HttpRequest, verb: str, outcome: BatchOutcome,
                jobs: list[Job]) -> None:
        names = {job.delivery_id: f"{self.task_name(job)} [{job.account}]" for job in jobs}
        if outcome.done:
            self.message_user(request, f"{verb} {len(outcome.done)} of {len(jobs)} dead "
                                       "letters.", messages.SUCCESS)
        for job_id, why in outcome.failed.items():
            self.message_user(request, f"Not {verb.lower()}: {names[job_id]} ({job_id}): {why}.",
                              messages.WARNING)
        if outcome.unreachable:
            left = len(jobs) - len(outcome.done) - len(outcome.failed)
            self.message_user(request, f"The fair store (Redis) cannot be reached, so {left} "
                                       f"dead letters were not {verb.lower()}: "
                                       f"{outcome.unreachable}", messages.ERROR)
