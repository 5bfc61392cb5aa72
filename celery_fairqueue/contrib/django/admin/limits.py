"""Account limits and queues' shared limits in the admin: read from and written to the fair
store (Redis), which owns them; the account page links here and edits account limits too. A
queue's shared limit has its own permissions (the QueueLimit model's)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from ....errors import StoreUnavailableError
from ....store import store_for
from ..conf import celery_app
from ..models import AccountLimit, QueueLimit
from .common import account_link


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
        fields = ("account", "rate", "burst", "concurrency", "window", "tz", "weight")

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
    list_display: tuple[str, ...] = ("account_page", "rate", "burst", "concurrency", "window",
                                     "tz", "weight", "updated_at")
    search_fields = ("^account",)

    @admin.display(description="account", ordering="account")
    def account_page(self, limit: AccountLimit) -> str:
        return account_link(limit.account)

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
            self.model.mirror_store()
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


class QueueLimitForm(AccountLimitForm):
    class Meta:
        model = QueueLimit
        fields = ("queue", "rate", "burst", "concurrency")


@admin.register(QueueLimit)
class QueueLimitAdmin(AccountLimitAdmin):
    """A queue's shared limit (a provider's quota: all its accounts together), read from and
    written to the fair store as ``set_queue_limit`` does; past it the queue's jobs wait."""

    form = QueueLimitForm
    list_display: tuple[str, ...] = ("queue", "rate", "burst", "concurrency", "updated_at")
    search_fields = ("^queue",)
