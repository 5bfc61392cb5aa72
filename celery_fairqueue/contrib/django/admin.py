"""The admin: jobs and their attempts (read-only), dead letters with replay and purge, account
limits, and an account overview page.

Browsing reads only the database, so the pages work while Redis is down; replay, purge and
saving a limit need the fair store, and say so in a message when it cannot be reached.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html

from ...errors import StoreUnavailableError
from ...reports import BatchOutcome
from ...store import store_for
from ...tables import duration, truncate
from .conf import celery_app
from .models import AccountLimit, Attempt, DeadJob, Job
from .views import (
    PURGE_PERMISSION,
    REPLAY_PERMISSION,
    account_overview_view,
    purge_dead_letters,
    replay_dead_letters,
)

STATUS_COLOURS = {
    Job.Status.READY: "#205493",
    Job.Status.DEFERRED: "#8a6d00",
    Job.Status.RUNNING: "#6f42c1",
    Job.Status.SUCCEEDED: "#2e7d32",
    Job.Status.FAILED: "#c05600",
    Job.Status.DEAD: "#b00020",
    Job.Status.REVOKED: "#555555",
}
ERROR_COLUMN_WIDTH = 40


def nowrap(text: str) -> str:
    return format_html('<span style="white-space:nowrap">{}</span>', text)


def status_badge(status: str) -> str:
    return format_html(
        '<span style="background:{};color:#fff;border-radius:3px;padding:1px 6px;'
        'font-size:11px;font-weight:bold;white-space:nowrap">{}</span>',
        STATUS_COLOURS.get(status, "#666"), status)


class AccountFilter(admin.SimpleListFilter):
    """A text box for the account: with thousands of accounts a list of links would not do."""

    title = "account"
    parameter_name = "account"
    template = "admin/celery_fairqueue/input_filter.html"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[Any]:
        return []

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(account=self.value()) if self.value() else queryset

    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:
        # One "choice" for the template: the box, the other parameters to keep, a clear link.
        yield {
            "value": self.value() or "",
            "keep": [(k, v) for k, v in changelist.params.items() if k != self.parameter_name],
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = ("number", "outcome_badge", "worker", "started_at", "finished_at", "took", "error")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("number", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Shown only inside a job's page, which its admin already guards: a job's history is
        # part of the job, not a separate permission to hand out.
        return True

    @admin.display(description="outcome")
    def outcome_badge(self, attempt: Attempt) -> str:
        return status_badge(attempt.outcome)

    @admin.display(description="took")
    def took(self, attempt: Attempt) -> str:
        if attempt.started_at and attempt.finished_at:
            return duration((attempt.finished_at - attempt.started_at).total_seconds())
        return "-"


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Every recorded job, read-only: what the recorder saw happen."""

    list_display: tuple[str, ...] = (
        "task_name", "account", "status_badge", "attempts", "queue", "next_run_at", "age",
        "error_short")
    list_filter: tuple[Any, ...] = (
        AccountFilter, "status", ("task", admin.AllValuesFieldListFilter),
        ("queue", admin.AllValuesFieldListFilter), ("enqueued_at", admin.DateFieldListFilter))
    search_fields = ("^job_key", "=task_id", "^account")
    search_help_text = "Job key or account (prefix), or task id (exact)."
    show_full_result_count = False  # a COUNT(*) over every job on each page is not free
    list_per_page = 50
    inlines = (AttemptInline,)
    change_list_template = "admin/celery_fairqueue/job_change_list.html"
    fieldsets = (
        (None, {"fields": ("task", "account", "queue", "status_badge", "attempts", "worker")}),
        ("Identity", {"fields": ("job_key", "task_id", "delivery_id", "external_id")}),
        ("Times", {"fields": ("enqueued_at", "next_run_at", "started_at", "finished_at",
                              "updated_at")}),
        ("Arguments (redacted)", {"fields": ("arguments",)}),
        ("Last error", {"fields": ("last_error_text",)}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [name for _, options in self.fieldsets for name in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # rows mirror Redis; deleting one would only hide a job that still exists

    def get_urls(self) -> list[URLPattern]:
        overview = path("accounts/", self.admin_site.admin_view(self.account_overview),
                        name="celery_fairqueue_job_accounts")
        return [overview, *super().get_urls()]

    def account_overview(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return account_overview_view(request, {**self.admin_site.each_context(request),
                                               "opts": self.opts})

    @admin.display(description="task", ordering="task")
    def task_name(self, job: Job) -> str:
        return job.task.rsplit(".", 1)[-1]

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status)

    @admin.display(description="age", ordering="-enqueued_at")
    def age(self, job: Job) -> str:
        if job.enqueued_at is None:
            return "-"
        return nowrap(duration((timezone.now() - job.enqueued_at).total_seconds()))

    @admin.display(description="last error")
    def error_short(self, job: Job) -> str:
        return truncate(job.last_error, ERROR_COLUMN_WIDTH) if job.last_error else ""

    @admin.display(description="arguments")
    def arguments(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", json.dumps(job.args, indent=2, default=str))

    @admin.display(description="last error")
    def last_error_text(self, job: Job) -> str:
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', job.last_error or "-")


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    """The dead-letter queue: replay or purge, each behind its own permission."""

    list_display = ("task_name", "account", "attempts", "queue", "died", "error_short")
    list_filter = (AccountFilter, ("task", admin.AllValuesFieldListFilter),
                   ("queue", admin.AllValuesFieldListFilter),
                   ("finished_at", admin.DateFieldListFilter))
    actions = ("replay", "purge")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=Job.Status.DEAD)

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REPLAY_PERMISSION)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PURGE_PERMISSION)

    @admin.display(description="died", ordering="-finished_at")
    def died(self, job: Job) -> str:
        if job.finished_at is None:
            return "-"
        return nowrap(f"{duration((timezone.now() - job.finished_at).total_seconds())} ago")

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


def store_unreachable() -> str | None:
    """Why the fair store cannot be reached, or None when it answers."""
    try:
        store_for(celery_app()).ping()
    except StoreUnavailableError as exc:
        return str(exc)
    return None


class AccountLimitForm(forms.ModelForm):
    class Meta:
        model = AccountLimit
        fields = ("account", "rate", "burst", "concurrency", "window", "tz")

    def clean(self) -> dict[str, Any]:
        """Refuse to save while the fair store is down: the limit would not reach workers."""
        cleaned = super().clean()
        down = store_unreachable()
        if down:
            raise ValidationError(
                f"The fair store (Redis) cannot be reached, so the limit was not saved: {down}")
        return cleaned


@admin.register(AccountLimit)
class AccountLimitAdmin(admin.ModelAdmin):
    """Limits per account, read from and written to the fair store (Redis), which owns them:
    limits set from code show here, and saving one here is what ``set_account_limit`` does."""

    form = AccountLimitForm
    list_display = ("account", "rate", "burst", "concurrency", "window", "tz", "updated_at")
    search_fields = ("^account",)

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        self._mirror(request)
        return super().changelist_view(request, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "GET":
            self._mirror(request)
        return super().change_view(request, object_id, form_url, extra_context)

    def _mirror(self, request: HttpRequest) -> None:
        try:
            AccountLimit.mirror_store()
        except StoreUnavailableError as exc:
            self.message_user(request, "The fair store (Redis) cannot be reached, so these are "
                                       f"the limits last seen there: {exc}", messages.WARNING)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # The bulk delete skips Model.delete, which is what clears a limit in Redis.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        down = store_unreachable() if request.method == "POST" else None
        if down:
            self.message_user(request, "The fair store (Redis) cannot be reached, so the limit "
                                       f"was not deleted: {down}", messages.ERROR)
            return HttpResponseRedirect(request.path)
        return super().delete_view(request, object_id, extra_context)
