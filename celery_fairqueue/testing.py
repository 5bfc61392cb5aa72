"""Test helpers for projects that use celery-fairqueue: an opt-in pytest plugin and an inline
runner.

Nothing here loads by itself. Enable the fixtures in your ``conftest.py`` and tell them your app::

    pytest_plugins = ["celery_fairqueue.testing"]

    @pytest.fixture
    def fairqueue_app():
        from proj.celery import app
        return app

Fixtures (all prefixed, so they cannot clash with other plugins):

``fairqueue_app``
    Your Celery app; override it as above (the default is Celery's current app).
``fairqueue_store``
    The app's fair store on the Redis of its settings, emptied before and after each test. Only
    the store's own keys (its ``fairqueue_key_prefix``) are deleted: point the tests at a Redis
    database of their own all the same.
``fairqueue_run``
    :func:`run_fair_jobs` for the app: runs the jobs that are ready now, in this process.

A test then reads like production, without a worker::

    def test_welcome_mail_is_sent_once(fairqueue_store, fairqueue_run):
        send_welcome.delay("acme", 42)
        send_welcome.delay("acme", 42)          # the same business key: deduplicated
        [job] = fairqueue_run()
        assert job.state == "SUCCESS"

The runner claims jobs as a worker does (fairness, limits and leases apply) and runs each as a
worker does, through Celery's request of the task in a solo pool, so retries, results, signals,
the task's markers and the settling of its lease behave as in a worker. Jobs delayed by a
countdown, an eta or a retry's backoff run once they are due.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery, current_app, states
from celery.app.trace import trace_task
from celery.concurrency.solo import TaskPool
from celery.exceptions import TaskRevokedError
from celery.utils.imports import symbol_by_name
from celery.worker.request import create_request_cls
from kombu.serialization import loads

from .settings import settings_for
from .store import FairStore, Lease, store_for
from .worker.channel import ACCEPT, lease_message, read_envelope

__all__ = ["FinishedJob", "fairqueue_app", "fairqueue_run", "fairqueue_store", "run_fair_jobs"]


@dataclass(frozen=True)
class FinishedJob:
    """One job the runner ran: its Celery state (``SUCCESS``, ``FAILURE``, ``RETRY``, ...)
    and what the task returned or raised."""

    task_id: str
    task: str
    account: str
    queue: str
    state: str
    result: Any


def run_fair_jobs(app: Celery, queues: Sequence[str] | None = None,
                  limit: int = 1000) -> list[FinishedJob]:
    """Run the fair jobs of ``app`` that are ready now, one at a time, in this process, until
    none is ready or ``limit`` ran; returns them in the order they ran. A job past its
    ``expires`` is recorded ``REVOKED`` instead, as a worker records it."""
    store = store_for(app)
    names = list(queues or store.known_queues())
    token = f"inline/{os.getpid()}/{uuid.uuid4().hex[:12]}"
    default_limit = settings_for(app).default_limit.pack(store.server_time())
    finished: list[FinishedJob] = []
    while len(finished) < limit and names:
        claim = store.claim(names, 1, token, default_limit)
        finished += [_run(app, lease) for lease in [*claim.expired, *claim.leases]]
        if not (claim.leases or claim.expired):
            break
    return finished


def _run(app: Celery, lease: Lease) -> FinishedJob:
    """Run one leased job as a worker does: Celery's request of the task's own class, in a
    solo pool, so the request settles the lease exactly as in a worker."""
    try:
        envelope = read_envelope(lease)
        task = app.tasks[envelope.task_name or ""]
    except Exception as exc:
        lease.dead_letter(f"cannot be run: {exc}")
        return FinishedJob(lease.job_id, "", lease.account, lease.queue, states.REJECTED, exc)
    outcome: dict[str, Any] = {"state": states.REVOKED, "result": None}

    def trace(name: str, task_id: str, request: dict[str, Any], body: Any, content_type: str,
              content_encoding: str, **_: Any) -> tuple[int, Any, float]:
        args, kwargs, embed = loads(body, content_type, content_encoding, accept=ACCEPT)
        request.update({"args": args, "kwargs": kwargs, "is_eager": False}, **embed or {})
        retval, info, runtime, shown = trace_task(task, task_id, args, kwargs, request,
                                                  app=app)
        outcome.update(state=info.state if info is not None else states.SUCCESS,
                       result=info.retval if info is not None else retval)
        return (1, retval, runtime) if info is not None else (0, shown, runtime)

    pool = TaskPool()
    request_cls = create_request_cls(symbol_by_name(task.Request), task, pool, "inline", None,
                                     trace=trace, app=app)
    message = lease_message(lease, envelope, bool(task.acks_late))
    request = request_cls(message, app=app, task=task, on_ack=message.ack_log_error,
                          on_reject=message.reject_log_error)
    with contextlib.suppress(TaskRevokedError):  # an expired job: recorded revoked
        request.execute_using_pool(pool)
    return FinishedJob(request.id, task.name, lease.account, lease.queue, outcome["state"],
                       outcome["result"])


@pytest.fixture
def fairqueue_app() -> Celery:
    """Your Celery app: override this fixture in your conftest.py."""
    return current_app._get_current_object()


@pytest.fixture
def fairqueue_store(fairqueue_app: Celery) -> Iterator[FairStore]:
    """The app's fair store, emptied (its own keys only) before and after the test."""
    store = store_for(fairqueue_app)
    store.clear()
    yield store
    store.clear()


@pytest.fixture
def fairqueue_run(fairqueue_app: Celery,
                  fairqueue_store: FairStore) -> Callable[..., list[FinishedJob]]:
    """``fairqueue_run(queues=None, limit=1000)``: run the ready fair jobs in this process."""

    def run(queues: Sequence[str] | None = None, limit: int = 1000) -> list[FinishedJob]:
        return run_fair_jobs(fairqueue_app, queues, limit)

    return run
