"""``install(app)``: validate the settings, add the fair publish path and the worker step."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.utils.imports import symbol_by_name

from .errors import InvalidLimitError, StoreUnavailableError
from .limits import AccountLimit, check_queue_name
from .protocol import task_id_of
from .publish import install_publish_path
from .redaction import RedactingFilter
from .revocation import PURGED, announce_revoked
from .settings import settings_for
from .store import OperatorPause, store_for
from .worker.request import QuietGiveBack
from .worker.step import FairConsumerStep

# The loggers that quote a running task's arguments or errors: Celery's trace (failures with
# their traceback, return values) and this package's task module.
REDACTED_LOGGERS = ("celery.app.trace", "celery_fairqueue.task")
logger = logging.getLogger(__name__)


def install(app: Celery) -> Celery:
    """Make ``app`` fair-queue its FairTask tasks; idempotent, returns the app.

    The ``fairqueue_*`` settings are validated now when ``app`` is configured already, else on
    first use: ``app.conf`` is not read here, so ``install`` may come before
    ``config_from_object`` (Django's settings) without freezing Celery's defaults."""
    if app.configured:
        settings_for(app)
    install_publish_path(app)
    install_control(app)
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
                      window: str | None = None, tz: str | None = None,
                      weight: int = 1, queue: str | None = None) -> AccountLimit:
    """Limit one account and set its weight (its share of the claim beside accounts of weight
    1); with ``queue``, its limit in that queue only, checked with its limit across its queues
    (the weight is the account's across queues: not set here). Running workers apply it from
    their next claim, to jobs already waiting too."""
    scope = f"account {str(account)[:200]!r}" + _in_queue(queue)
    limit = _limit(scope, queue, rate=rate, burst=burst, concurrency=concurrency, window=window,
                   tz=tz, weight=weight)
    store_for(app).set_limit(str(account), limit, queue)
    return limit


def set_default_limit(app: Celery, *, rate: str | None = None, burst: float | None = None,
                      concurrency: int | None = None, window: str | None = None,
                      tz: str | None = None, weight: int = 1,
                      queue: str | None = None) -> AccountLimit:
    """The store's default limit, for accounts without their own; every worker applies it from
    its next claim (the ``fairqueue_default_*`` settings only seed it, by the first worker).
    With ``queue``: that queue's default, for its accounts without their own limit in it."""
    limit = _limit("default limit" + _in_queue(queue), queue, rate=rate, burst=burst,
                   concurrency=concurrency, window=window, tz=tz, weight=weight)
    if queue is None:
        return store_for(app).set_default_limit(limit)
    store_for(app).set_queue_default_limit(queue, limit)
    return limit


def set_queue_limit(app: Celery, queue: str, *, rate: str | None = None,
                    burst: float | None = None, concurrency: int | None = None) -> AccountLimit:
    """A limit the accounts of ``queue`` share (a provider's quota for the whole product),
    checked by the claim with each account's own: past it, the queue's jobs wait (deferred,
    no retry burned, no slot held) and its waiting accounts share it by their weights. Running
    workers apply it from their next claim."""
    limit = _limit(f"queue {str(queue)[:200]!r}", queue, rate=rate, burst=burst,
                   concurrency=concurrency, weight=1)
    store_for(app).set_queue_limit(queue, limit)
    return limit


def get_queue_limit(app: Celery, queue: str) -> AccountLimit | None:
    """``queue``'s shared limit, or None."""
    return store_for(app).queue_limit(queue)


def clear_queue_limit(app: Celery, queue: str) -> None:
    """Drop ``queue``'s shared limit; its accounts keep their own."""
    store_for(app).set_queue_limit(queue, None)


def _in_queue(queue: str | None) -> str:
    return "" if queue is None else f" in queue {str(queue)[:200]!r}"


def _limit(scope: str, queue: str | None, **fields: Any) -> AccountLimit:
    """The limit ``fields`` make, or InvalidLimitError naming ``scope`` and the field."""
    try:
        if queue is not None:
            check_queue_name(queue)
            if fields["weight"] != 1:
                raise InvalidLimitError(
                    f"weight {fields['weight']!r} is the account's share in every queue: set "
                    f"it without queue=")
        return AccountLimit(**fields)
    except InvalidLimitError as exc:
        raise InvalidLimitError(f"{scope}: {exc}") from None


def get_default_limit(app: Celery, queue: str | None = None) -> AccountLimit | None:
    """The store's default limit (or ``queue``'s default), or None while none is set."""
    if queue is None:
        return store_for(app).default_limit()
    return store_for(app).queue_default_limit(queue)


def clear_default_limit(app: Celery, *, queue: str) -> None:
    """Drop ``queue``'s default limit; its accounts keep only their own and the store's."""
    store_for(app).set_queue_default_limit(queue, None)


def clear_account_limit(app: Celery, account: str, queue: str | None = None) -> None:
    """Remove an account's own limit (in ``queue``); the default limit applies again."""
    store_for(app).clear_limit(str(account), queue)


def get_account_limit(app: Celery, account: str,
                      queue: str | None = None) -> AccountLimit | None:
    """The account's own limit (in ``queue``), or None when the default applies."""
    return store_for(app).get_limit(str(account), queue)


def cancel(app: Celery, task_id: str) -> bool:
    """Take a fair job that still waits (ready, deferred or delayed) out of the store, and
    record it as revoked (the result backend, a ``task-revoked`` event); False when it is not
    waiting (running, finished, or unknown). ``task_id`` is the Celery task id, or a delivery
    id (``<task id>:<retries>``)."""
    cancelled = store_for(app).cancel(task_id)
    announce_revoked(app, [task_id_of(job_id) for job_id in cancelled])
    return bool(cancelled)


def pause(app: Celery, account: str | None = None, queue: str | None = None, *,
          by: str = "", reason: str = "") -> OperatorPause:
    """Pause an account (in ``queue``, or in every queue) or a whole ``queue``: workers stop
    claiming its jobs, which stay ready (not deferred, no attempt charged) until :func:`resume`.
    ``by`` and ``reason`` are kept with the pause's time (Redis server time) for the console."""
    return store_for(app).pause(None if account is None else str(account), queue, by=by,
                                reason=reason)


def resume(app: Celery, account: str | None = None, queue: str | None = None) -> bool:
    """End the pause :func:`pause` made with the same ``account`` and ``queue``; the account
    rotates again (unless another pause still holds it). False when there was no such pause."""
    return store_for(app).resume(None if account is None else str(account), queue)


def lift_slow_down(app: Celery, queue: str, account: str | None = None) -> bool:
    """End a provider's "slow down" of ``account`` in ``queue`` (or, without an account, of
    the whole ``queue``) now: its jobs run again at their limits. False when none was held."""
    return store_for(app).lift_slow_down(None if account is None else str(account), queue)


def run_now(app: Celery, task_id: str) -> bool:
    """Make a delayed fair job (eta, countdown, retry backoff) ready now; it still waits for its
    account's limits and pauses. False when it is not delayed (ready, running or unknown).
    ``task_id`` is the Celery task id, or a delivery id (``<task id>:<retries>``)."""
    return bool(store_for(app).run_now(task_id))


def install_control(app: Celery) -> None:
    """Make ``app.control.revoke`` (and ``AsyncResult.revoke``) also take revoked fair jobs out
    of the store at once, whatever workers run (Celery's broadcast still stops running ones),
    and ``app.control.purge()`` also discard the waiting fair jobs of the app's queues.

    ``app.control`` reads ``app.conf`` when it is made, so an app whose control is not made yet
    gets a subclass of its control class instead (see :func:`install_publish_path`)."""
    made = app.__dict__.get("control")
    if made is not None:
        if not getattr(made.revoke, "fairqueue", False):
            made.revoke = _revoking(app, made.revoke)
            made.purge = _purging(app, made.purge)
        return
    base = symbol_by_name(app.control_cls)
    if getattr(base.revoke, "fairqueue", False):
        return

    class FairControl(base):  # type: ignore[misc, valid-type]
        def revoke(self, task_id: str | list[str], *args: Any, **kwargs: Any) -> Any:
            return _revoking(app, super().revoke)(task_id, *args, **kwargs)

        revoke.fairqueue = True  # type: ignore[attr-defined]

        def purge(self, connection: Any = None) -> int:
            return int(_purging(app, super().purge)(connection))

    app.control_cls = FairControl


def _revoking(app: Celery, broadcast: Any) -> Any:
    def revoke(task_id: str | list[str], *args: Any, **kwargs: Any) -> Any:
        for one in [task_id] if isinstance(task_id, str) else list(task_id):
            try:
                cancel(app, one)
            except StoreUnavailableError as exc:
                logger.warning("fairqueue: revoked %s may still wait in the fair store: %s",
                               one, exc)
        return broadcast(task_id, *args, **kwargs)

    revoke.fairqueue = True  # type: ignore[attr-defined]
    return revoke


def _purging(app: Celery, broker_purge: Any) -> Any:
    def purge(connection: Any = None) -> int:
        """The broker's messages, then the fair store's waiting jobs, of the app's queues
        (recorded as revoked, as a cancelled job is)."""
        return int(broker_purge(connection=connection)) + store_for(app).purge(
            list(app.amqp.queues), on_taken=lambda job_ids: announce_revoked(
                app, [task_id_of(job_id) for job_id in job_ids], PURGED))

    return purge
