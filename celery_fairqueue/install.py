"""``install(app)``: validate the settings, add the fair publish path and the worker step."""

from __future__ import annotations

from celery import Celery

from .limits import AccountLimit
from .publish import get_store, install_publish_path
from .settings import settings_for
from .worker.step import FairConsumerStep


def install(app: Celery) -> Celery:
    """Make ``app`` fair-queue its FairTask tasks; idempotent, returns the app."""
    settings_for(app)
    install_publish_path(app)
    if FairConsumerStep not in app.steps["consumer"]:
        app.steps["consumer"].add(FairConsumerStep)
    return app


def set_account_limit(app: Celery, account: str, *, rate: str | None = None,
                      burst: float | None = None, concurrency: int | None = None,
                      window: str | None = None, tz: str | None = None) -> AccountLimit:
    """Limit one account; running workers apply it from their next claim."""
    limit = AccountLimit(rate=rate, burst=burst, concurrency=concurrency, window=window, tz=tz)
    get_store(app).set_limit(str(account), limit)
    return limit


def clear_account_limit(app: Celery, account: str) -> None:
    """Remove an account's own limit; the default limit from settings applies again."""
    get_store(app).clear_limit(str(account))


def get_account_limit(app: Celery, account: str) -> AccountLimit | None:
    """The account's own limit, or None when the default applies."""
    return get_store(app).get_limit(str(account))
