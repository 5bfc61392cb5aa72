"""How the console and the admin show a value: status badges, exact times, long ids, account
links (account ids may hold spaces, slashes, dots or any character: they travel quoted)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote, unquote

from django.urls import reverse
from django.utils import timezone
from django.utils.html import conditional_escape, format_html

from ..models import Job

STATUS_COLOURS = {
    Job.Status.READY: "#205493",
    Job.Status.DEFERRED: "#8a6d00",
    Job.Status.RUNNING: "#6f42c1",
    Job.Status.SUCCEEDED: "#2e7d32",
    Job.Status.FAILED: "#c05600",
    Job.Status.DEAD: "#b00020",
    Job.Status.REVOKED: "#555555",
}


#: Characters of an id a table cell shows; the rest is in its title (a tooltip, and copyable).
ID_WIDTH = 40


def long_id(value: str, width: int = ID_WIDTH) -> str:
    """An id for a cell: cut to ``width`` characters with an ellipsis, whole in its title, so
    a 1,000-character id takes one line, not forty."""
    if len(value) <= width:
        return conditional_escape(value)
    return format_html('<span class="fq-id" title="{}">{}…</span>', value, value[:width - 1])


def nowrap(text: str) -> str:
    return format_html('<span style="white-space:nowrap">{}</span>', text)


def status_badge(status: str) -> str:
    return format_html(
        '<span style="background:{};color:#fff;border-radius:3px;padding:1px 6px;'
        'font-size:11px;font-weight:bold;white-space:nowrap">{}</span>',
        STATUS_COLOURS.get(status, "#666"), status)


def account_ref(account: str) -> str:
    """An account id as one URL path segment: percent-encoded, and never "." or "..", which
    browsers would resolve away. :func:`account_from_ref` reverses it."""
    return quote(account, safe="", errors="surrogatepass").replace(".", "%2E")


def account_from_ref(ref: str) -> str:
    return unquote(ref, errors="surrogatepass")


def account_url(account: str) -> str | None:
    """The account's page in the admin; None for an empty id."""
    if not account:
        return None
    return reverse("admin:celery_fairqueue_account_page", args=[account_ref(account)])


def account_link(account: str) -> str:
    url = account_url(account)
    if url is None:
        return "-"
    return format_html('<a href="{}" class="fq-account">{}</a>', url, long_id(account))


def exact(value: datetime | None) -> str:
    """A time to the second, in the current time zone, with its zone."""
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


def exact_epoch(value: float | None) -> str:
    """A Redis server time (epoch seconds) as :func:`exact` writes it."""
    if not value:
        return "-"
    return exact(datetime.fromtimestamp(value, tz=timezone.get_current_timezone()))


def milliseconds(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    return f"{(end - start).total_seconds() * 1000:,.0f} ms"
