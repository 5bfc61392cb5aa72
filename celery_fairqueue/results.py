"""A fair job's result subscription, made once the fair store took the job.

Celery's ``send_task`` calls ``app.backend.on_task_call`` before it publishes; the Redis result
backend subscribes there (pub/sub ``SUBSCRIBE``) under Celery's own reconnect policy, which
gives up after some 19 s with a ``RuntimeError``. With the store on the same Redis (the
README's app) that made a Redis outage a 19 s wait and Celery's error instead of one
``StoreUnavailableError`` within ``fairqueue_enqueue_timeout``. So for a fair task the call is
put off until the store has taken the job (publish.py calls :func:`stored`), and never made for
a job the store refused: a failed enqueue stays one ``EnqueueError``, and an enqueue that
returned never raises afterwards.

Subscribing late loses no result ``AsyncResult.get()`` waits for: it subscribes again and then
reads the stored result (the Redis backend's ``on_wait_for_pending``) before it waits. The RPC
backend is left in Celery's order: its results exist only as messages in the reply queue its
``on_task_call`` declares, which must exist before any worker can answer.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from celery import Celery
from celery.backends.rpc import RPCBackend

from .protocol import is_fair

logger = logging.getLogger(__name__)

#: The result calls put off during one fair ``send_task`` (None: call through at once).
_put_off: ContextVar[list[Any] | None] = ContextVar("fairqueue_put_off_result_call",
                                                    default=None)


def install_result_subscription(app: Celery) -> None:
    """Make ``app.send_task`` put off the result backend's ``on_task_call`` for fair tasks."""
    if getattr(app.__dict__.get("send_task"), "fairqueue", False):
        return
    send_task = app.send_task

    def fair_send_task(name: str, *args: Any, **kwargs: Any) -> Any:
        put_off = is_fair(app.tasks.get(name)) and _puts_off(app.backend)
        token = _put_off.set([] if put_off else None)  # a send inside a send has its own
        try:
            return send_task(name, *args, **kwargs)
        finally:
            _put_off.reset(token)

    fair_send_task.fairqueue = True  # type: ignore[attr-defined]
    app.send_task = fair_send_task


def _puts_off(backend: Any) -> bool:
    """Whether this backend's ``on_task_call`` waits for the store (wrapping it on first use)."""
    if isinstance(backend, RPCBackend):
        return False
    on_task_call = backend.on_task_call
    if not getattr(on_task_call, "fairqueue", False):
        def deferred_on_task_call(producer: Any, task_id: str) -> Any:
            pending = _put_off.get()
            if pending is None:
                return on_task_call(producer, task_id)
            pending.append((on_task_call, producer))
            return {}

        deferred_on_task_call.fairqueue = True  # type: ignore[attr-defined]
        backend.on_task_call = deferred_on_task_call
    return True


def stored(task_name: str, task_id: str) -> None:
    """The store took the job ``task_id`` (the one whose result the caller gets): make the
    result calls put off for it. The job is stored, so a failure here is a warning, not an
    error: the caller's ``.get()`` subscribes again."""
    subscribe(_put_off.get(), task_name, task_id)


def put_off_calls() -> list[Any] | None:
    """The result calls put off for the fair ``send_task`` under way, to be made by
    :func:`subscribe` once a bulk enqueue stored its job (bulk.py), after that send returned."""
    return _put_off.get()


def subscribe(pending: list[Any] | None, task_name: str, task_id: str) -> None:
    """Make the result calls ``pending`` for the stored job ``task_id`` (see :func:`stored`)."""
    while pending:
        on_task_call, producer = pending.pop(0)
        try:
            on_task_call(producer, task_id)
        except Exception as exc:  # whatever the backend raises, the job is stored
            logger.warning("fairqueue: task %s[%s] is stored, but subscribing to its result "
                           "failed: %s", task_name, task_id, exc)
