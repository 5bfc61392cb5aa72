"""What the admin pages share: the account filter, and the console's ways of showing a value
(console/formatting.py: status badges, exact times, long ids, account links), named here too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest

from ..console.formatting import (
    ID_WIDTH,
    STATUS_COLOURS,
    account_from_ref,
    account_link,
    account_ref,
    account_url,
    exact,
    exact_epoch,
    long_id,
    milliseconds,
    nowrap,
    status_badge,
)
from ..models import Job

__all__ = ["ID_WIDTH", "STATUS_COLOURS", "AccountFilter", "account_from_ref", "account_link",
           "account_ref", "account_url", "exact", "exact_epoch", "long_id", "milliseconds",
           "nowrap", "status_badge"]

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
