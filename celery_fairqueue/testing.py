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

The runner claims jobs as a worker does (fairness, limits and leases apply), runs each through
Celery's own tracer (so retries, results, signals and the task's markers behave as in a worker)
and settles it. Jobs delayed by a countdown, an eta or a retry's backoff run once they are due.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery, current_app, states
from celery.app.trace import trace_task
from celery.exceptions import Reject
from celery.worker.request import Request

from .settings import settings_for
from .store import ClaimedJob, FairStore, store_for
from .task import GiveBack
from .worker.channel import job_message, read_envelope
from .worker.dispatcher import GIVE_BACK_SECONDS

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
        finished += [_expired(app, job) for job in claim.expired]
        if claim.jobs:
            finished.append(_run(app, store, token, claim.jobs[0]))
        elif not claim.expired:
            break
    return finished


def _expired(app: Celery, job: ClaimedJob) -> FinishedJob:
    envelope = read_envelope(job)
    task_id = str(envelope.headers.get("id"))
    app.backend.mark_as_revoked(task_id, "expired")
    return FinishedJob(task_id, envelope.task_name or "", job.account, job.queue,
                       states.REVOKED, None)


def _run(app: Celery, store: FairStore, token: str, job: ClaimedJob) -> FinishedJob:
    try:
        envelope = read_envelope(job)
        task = app.tasks[envelope.task_name or ""]
    except Exception as exc:
        store.reject(job.queue, job.account, job.job_id, token, f"cannot be run: {exc}")
        return FinishedJob(job.job_id, "", job.account, job.queue, states.REJECTED, exc)
    request = Request(job_message(job, envelope, channel=None), app=app, task=task)
    retval, info, _, _ = trace_task(task, request.id, request.args, request.kwargs,
                                    request.request_dict, hostname=request.hostname,
                                    loader=app.loader, app=app)
    state = info.state if info is not None else states.SUCCESS
    result = info.retval if info is not None else retval
    if isinstance(result, GiveBack):
        store.give_back(job.queue, job.account, job.job_id, token, GIVE_BACK_SECONDS)
    elif isinstance(result, Reject):
        if result.requeue:
            store.requeue(job.queue, job.account, job.job_id, token)
        else:
            store.reject(job.queue, job.account, job.job_id, token,
                         f"rejected by the task: {result.reason}")
    else:
        store.ack(job.queue, job.account, job.job_id, token, job.stored_key,
                  succeeded=state == states.SUCCESS)
    return FinishedJob(request.id, task.name, job.account, job.queue, state, result)


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
