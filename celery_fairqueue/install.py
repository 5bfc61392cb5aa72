"""``install(app)``: validate the settings, add the fair publish path and the worker step."""

from __future__ import annotations

import logging

from celery import Celery

from .limits import AccountLimit
from .publish import install_publish_path
from .redaction import RedactingFilter
from .settings import settings_for
from .store import store_for
from .worker.request import QuietGiveBack
from .worker.step import FairConsumerStep

# The loggers that quote a running task's arguments or errors: Celery's trace (failures with
# their traceback, return values) and this package's task module.
REDACTED_LOGGERS = ("celery.app.trace", "celery_fairqueue.task")


def install(app: Celery) -> Celery:
    """Make ``app`` fair-queue its FairTask tasks; idempotent, returns the app."""
    settings_for(app)
    install_publish_path(app)
    if FairConsumerStep not in app.steps["consumer"]:
        app.steps["consumer"].add(FairConsumerStep)
    for name in REDACTED_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in log.filters):
            log.addFilter(RedactingFilter())
    trace_log = logging.getLogger("celery.app.trace")
    if not any(isinstance(f, QuietGiveBack) for f in trace_log.filters):
        trace_log.addFilter(QuietGiveBack())
    return app


def set_account_limit(app: Celery, account: str, *, rate: str | None = None,
                      burst: float | None = None, concurrency: int | None = None,
                      window: str | None = None, tz: str | None = None) -> AccountLimit:
    """Limit one account; running workers apply it from their next claim."""
    limit = AccountLimit(rate=rate, burst=burst, concurrency=concurrency, window=window, tz=tz)
    store_for(app).set_limit(str(account), limit)
    return limit


def clear_account_limit(app: Celery, account: str) -> None:
    """Remove an account's own limit; the default limit from settings applies again."""
    store_for(app).clear_limit(str(account))


def get_account_limit(app: Celery, account: str) -> AccountLimit | None:
    """The account's own limit, or None when the default applies."""
    return store_for(app).get_limit(str(account))
