"""The jobs search of the console: by a key's parts, by argument, by key, task id or account.

The syntax is celery_fairqueue.search's (docs/guide.md, "Finding a job"): a keyed task's name
and its key's parts finds the job by the key computed from them; any other words must each
match (``name=value`` an argument's value exactly, as the list shows it; a plain word a key or
account prefix, a task id, a task's name or a part of an argument). Arguments are searched as
the recorder stored them: redacted, so a redacted value never matches.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ....errors import FairqueueError
from ....search import (
    IncompleteKeyError,
    SearchQueryError,
    argument,
    argument_line,
    key_parts,
    key_search,
    keyed_tasks,
    query_for,
    shown_value,
    words,
)
from ....tables import truncate
from ..columns import to_column, to_text_column
from ..conf import celery_app
from ..models import Job

ARGUMENTS_SHOWN = 6
ARGUMENT_WIDTH = 40
SEPARATOR = " \u00b7 "  # a middle dot: a value may hold spaces and commas
SEARCH_HELP = ("Words that must all match: a key, account or task name, a task id, an argument "
               "(lead_id=1) or part of one. A task and its key's parts finds the job by its "
               "key: send_step account=acme lead_id=1 (values are JSON where they parse: "
               'lead_id="1" is the string).')


def task_modules_imported(app: Celery) -> Celery:
    """The app with its task modules imported, once per process, as a worker imports them: a
    web process may not have imported a task that it never sends."""
    if not getattr(app, "_fairqueue_tasks_imported", False):
        app.loader.import_default_modules()
        app._fairqueue_tasks_imported = True
    return app


def word_filter(word: str) -> Q:
    """What one word of a search matches."""
    pair = argument(word)
    if pair is not None:
        line = f"\n{argument_line(pair[0], shown_value(pair[1]))}\n"
        return Q(args_text__icontains=to_text_column(line)) | Q(
            account__startswith=to_column(word))
    column = to_column(word)
    return (Q(job_key__startswith=column) | Q(task_id=column) | Q(account__startswith=column)
            | Q(task=column) | Q(task__endswith=f".{column}")
            | Q(args_text__icontains=to_text_column(word)))


def arguments_shown(job: Job) -> str:
    """A job's redacted arguments as they are searched, on one line clipped to a column narrow
    enough for a laptop (``name=value`` each, a few, cut short); all of them on hover."""
    lines = job.args_text.strip("\n").split("\n") if job.args_text else []
    more = len(lines) - ARGUMENTS_SHOWN
    shown = [truncate(line, ARGUMENT_WIDTH) for line in lines[:ARGUMENTS_SHOWN]]
    if more > 0:
        shown.append(f"and {more} more")
    return format_html('<div class="fq-args fq-clip" title="{}">{}</div>',
                       SEPARATOR.join(lines), SEPARATOR.join(shown))


class JobSearch(admin.ModelAdmin):
    """The jobs search, and the "Find by business key" forms above the list."""

    search_fields = ("job_key",)  # shows the search box; get_search_results does the search
    search_help_text = SEARCH_HELP

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Job],
                           search_term: str) -> tuple[QuerySet[Job], bool]:
        if not search_term.strip():
            return queryset, False
        try:
            found = key_search(task_modules_imported(celery_app()), search_term)
        except IncompleteKeyError as exc:
            self.message_user(request, f"Not a key search ({exc}): showing the jobs that "
                                       "match the words.", messages.INFO)
        except SearchQueryError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return queryset.none(), False
        else:
            if found is not None:
                self.message_user(request, f"The key of {found.task} for account "
                                           f"{found.account!r}: {found.job_key}", messages.INFO)
                return queryset.filter(job_key=found.job_key), False
        for word in words(search_term):
            queryset = queryset.filter(word_filter(word))
        return queryset, False

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {**(extra_context or {}), "fq_key_forms": self.key_forms(),
                 "fq_by_key_url": reverse("admin:celery_fairqueue_job_by_key")}
        return super().changelist_view(request, extra)

    def key_forms(self) -> list[tuple[str, str, list[str]]]:
        """(full name, short name, the parts it asks for) of each keyed task."""
        try:
            tasks = keyed_tasks(task_modules_imported(celery_app()))
        except (FairqueueError, ImportError):
            return []
        return [(name, name.rsplit(".", 1)[-1], key_parts(task)) for name, task in tasks.items()]

    def by_key_urls(self) -> list[URLPattern]:
        return [path("by-key/", self.admin_site.admin_view(self.by_key),
                     name="celery_fairqueue_job_by_key")]

    def by_key(self, request: HttpRequest) -> HttpResponse:
        """A "Find by business key" form: its query, in the search box of the jobs list."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        task = request.GET.get("task", "")
        parts = {name: value for name, value in request.GET.items() if name != "task"}
        query = query_for(task, parts)
        return HttpResponseRedirect(
            f"{reverse('admin:celery_fairqueue_job_changelist')}?{urlencode({'q': query})}")
