"""The accounts in the admin: the overview is the list, each account has its page, and the
operator actions post to one URL that checks each action's own permission."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from ..console.account_views import account_view, overview_view
from ..console.actions import ActionError, perform
from ..models import Account
from .common import account_from_ref

VIEW_PERMISSIONS = ("celery_fairqueue.view_account", "celery_fairqueue.view_job")


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    """No rows of its own: the list is the overview, and each account's page reads Redis and
    the recorded jobs."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return any(request.user.has_perm(p) for p in VIEW_PERMISSIONS)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.overview), name="celery_fairqueue_account_changelist"),
            # "-" is no account's ref alone, so no account's page can shadow the actions
            path("-/action/", view(require_POST(self.action)),
                 name="celery_fairqueue_account_action"),
            path("<str:ref>/", view(self.account), name="celery_fairqueue_account_page"),
        ]

    def _context(self, request: HttpRequest) -> dict[str, Any]:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return {**self.admin_site.each_context(request), "opts": self.opts}

    def overview(self, request: HttpRequest) -> HttpResponse:
        return overview_view(request, self._context(request))

    def account(self, request: HttpRequest, ref: str) -> HttpResponse:
        return account_view(request, account_from_ref(ref), self._context(request))

    def action(self, request: HttpRequest) -> HttpResponse:
        """Pause, resume, cancel, run now or set a limit (POST, CSRF-checked by the admin)."""
        name = request.POST.get("action", "")
        try:
            done = perform(request.user, name, request.POST)  # PermissionDenied: 403
        except ActionError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, done.message, messages.SUCCESS)
        back = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(back, {request.get_host()},
                                               require_https=request.is_secure()):
            back = reverse("admin:celery_fairqueue_account_changelist")
        return HttpResponseRedirect(back)
