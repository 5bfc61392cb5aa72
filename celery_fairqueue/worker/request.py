"""The request class of fair tasks: Celery's own, minus the eta wait (the store waited), plus
one outcome Celery does not have.

A fair task whose run could not write to the fair store (its started marker, its retry, its dead
letter) raises :class:`~celery_fairqueue.task.GiveBack`, a ``Reject(requeue=True)``. Celery would
requeue it like a job whose worker died, which counts toward the poison limit, and at once,
into a store that is still failing. This request, which runs in the worker's main process for
every pool, gives it back to wait a moment instead, uncounted.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from celery.worker.request import Request
from celery.worker.state import task_ready

from ..protocol import EXPIRED_HEADER
from ..task import GiveBack
from .channel import FairChannel


class FairRequest(Request):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The store held the job until its eta; Celery's strategy must not hold it again (in
        # the worker's memory, outside the slot count). The task still sees its eta.
        self._eta = None

    def revoked(self) -> bool:
        """A job the store dropped past its ``expires`` is revoked as Celery revokes an expired
        message (state, event, signal), by the store's clock, not this worker's."""
        if self.message.headers.get(EXPIRED_HEADER) and not self._already_revoked:
            self._announce_revoked("expired", terminated=False, signum=None, expired=True)
            return True
        return bool(super().revoked())

    def on_success(self, failed__retval__runtime: Any, **kwargs: Any) -> Any:
        """Before Celery acks a fair job that succeeded, say so: its ack marks the job's
        business key done and records the success, in the same step."""
        channel = self.message.channel
        if not failed__retval__runtime[0] and isinstance(channel, FairChannel):
            channel.succeeded(self.message.delivery_tag)
        return super().on_success(failed__retval__runtime, **kwargs)

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        channel = self.message.channel
        if isinstance(exc, GiveBack) and isinstance(channel, FairChannel):
            task_ready(self)
            channel.give_back(self.message.delivery_tag)
            return None
        return super().on_failure(exc_info, send_failed_event, return_ok)


class QuietGiveBack(logging.Filter):
    """Drops Celery's traceback-laden record of a give-back from ``celery.app.trace``: the task
    logged it already, in one line with its cause, and a Redis outage would otherwise write a
    traceback for every job it touches."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], GiveBack))
