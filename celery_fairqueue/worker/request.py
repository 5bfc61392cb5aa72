"""The request class of fair tasks: Celery's own, minus the eta wait (the store waited), settling
the job's lease (its message's channel, see store/writers/leases.py) as Celery settles a
message, plus one outcome Celery does not have.

A fair task whose run could not write to the fair store (its started marker, its retry, its dead
letter) raises :class:`~celery_fairqueue.task.GiveBack`, a ``Reject(requeue=True)``. Celery would
requeue it like a job whose worker died, which counts toward the poison limit, and at once,
into a store that is still failing. This request, which runs in the worker's main process for
every pool, gives the lease back to wait a moment instead, uncounted.

Its task events go through :class:`FairEvents`, which puts back the ETA the request hides from
Celery's strategy, and through RedactingRequest (worker/redacted.py), which masks them.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from celery.worker.state import successful_requests, task_ready

from ..protocol import EXPIRED_HEADER
from ..store import Lease
from ..task import GiveBack
from .redacted import RedactingRequest


class FairEvents:
    """The worker's event dispatcher as Celery's strategy and requests of fair tasks hold it
    (see strategy.fair_strategy): a job's task-received event carries the ETA it waited for in
    the store, as a plain task's does, so a monitor (Flower) shows and keeps it."""

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher
        self._received: tuple[str, str] | None = None  # (task id, eta) of the next received

    def __getattr__(self, name: str) -> Any:
        if name == "dispatcher":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def receiving(self, task_id: str, eta: str) -> None:
        """The request about to be announced (task-received) waited until ``eta``."""
        self._received = (task_id, eta)

    def send(self, type: str, *args: Any, **fields: Any) -> Any:
        if type == "task-received" and self._received is not None and \
                self._received[0] == fields.get("uuid") and not fields.get("eta"):
            fields["eta"] = self._received[1]
            self._received = None
        return self.dispatcher.send(type, *args, **fields)


class FairRequest(RedactingRequest):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The store held the job until its eta; Celery's strategy must not hold it again (in
        # the worker's memory, outside the slot count). The task still sees its eta, and
        # `inspect scheduled` lists a delayed job with it (worker/control.py).
        self.message_eta: Any = self._eta  # type: ignore[has-type]
        self._eta = None
        self._failed = False
        if isinstance(self._eventer, FairEvents) and self.message_eta is not None:
            self._eventer.receiving(self.id, self.message_eta.isoformat())

    @property
    def lease(self) -> Lease | None:
        """The lease of a job claimed from the fair store (None: a broker message)."""
        channel = self.message.channel
        return channel if isinstance(channel, Lease) else None

    def revoked(self) -> bool:
        """A job the store dropped past its ``expires`` is revoked as Celery revokes an expired
        message (state, event, signal), by the store's clock, not this worker's."""
        if self.message.headers.get(EXPIRED_HEADER) and not self._already_revoked:
            self._announce_revoked("expired", terminated=False, signum=None, expired=True)
            return True
        return bool(super().revoked())

    def acknowledge(self) -> None:
        """Celery's ack, which settles the lease; after a success, the ack marks the job's key
        done. Success is Celery's own record of this request (``task_ready(successful=True)``,
        called just before this ack), unless this delivery failed or retried."""
        lease = self.lease
        if lease is not None and not self.acknowledged and not self._failed and \
                self.id in successful_requests:
            lease.succeeded()
        super().acknowledge()

    def on_timeout(self, soft: bool, timeout: float) -> None:
        self._failed = self._failed or not soft
        super().on_timeout(soft, timeout)

    def on_retry(self, exc_info: Any) -> Any:
        self._failed = True
        return super().on_retry(exc_info)

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        self._failed = True
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        lease = self.lease
        if isinstance(exc, GiveBack) and lease is not None:
            task_ready(self)
            self.acknowledged = True
            lease.give_back()
            return None
        return super().on_failure(exc_info, send_failed_event, return_ok)


class QuietGiveBack(logging.Filter):
    """Drops Celery's traceback-laden record of a give-back from ``celery.app.trace``: the task
    logged it already, in one line with its cause, and a Redis outage would otherwise write a
    traceback for every job it touches."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], GiveBack))
