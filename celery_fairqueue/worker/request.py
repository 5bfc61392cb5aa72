"""The request class of fair tasks: Celery's own, minus the eta wait (the store waited), plus
one outcome Celery does not have.

A fair task whose run could not write to the fair store (its started marker, its retry, its dead
letter) raises :class:`~celery_fairqueue.task.GiveBack`, a ``Reject(requeue=True)``. Celery would
requeue it like a job whose worker died, which counts toward the poison limit, and at once,
into a store that is still failing. This request, which runs in the worker's main process for
every pool, gives it back to wait a moment instead, uncounted.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Celery's worker makes a subclass of this class per task (``create_request_cls``),
        whose own ``on_success`` would skip ours: it is wrapped as Celery's is (below)."""
        super().__init_subclass__(**kwargs)
        if "on_success" in cls.__dict__:
            cls.on_success = _noting_success(cls.__dict__["on_success"])

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


def _noting_success(on_success: Callable[..., Any]) -> Callable[..., Any]:
    """``on_success`` that first tells the fair channel the job succeeded: its ack (which
    follows in Celery's ``on_success``) marks the business key done and records the success."""

    @functools.wraps(on_success)
    def noting_success(self: Request, failed__retval__runtime: Any, **kwargs: Any) -> Any:
        channel = self.message.channel
        if not failed__retval__runtime[0] and isinstance(channel, FairChannel):
            channel.succeeded(self.message.delivery_tag)
        return on_success(self, failed__retval__runtime, **kwargs)

    return noting_success


FairRequest.on_success = _noting_success(Request.on_success)


class QuietGiveBack(logging.Filter):
    """Drops Celery's traceback-laden record of a give-back from ``celery.app.trace``: the task
    logged it already, in one line with its cause, and a Redis outage would otherwise write a
    traceback for every job it touches."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], GiveBack))
