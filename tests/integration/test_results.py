"""A fair job's result subscription waits for the store to take the job (see results.py), and
loses no result for it."""

from __future__ import annotations

import pytest
from celery import Celery, signals

import celery_fairqueue
from celery_fairqueue import FairTask
from celery_fairqueue.store import store_for


def fair_app(name: str, broker: str, backend: str) -> tuple[Celery, FairTask]:
    app = Celery(name, broker=broker, backend=backend)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
    celery_fairqueue.install(app)

    @app.task(base=FairTask, account_arg="account", name=f"{name}.t")
    def t(account: str) -> None:
        pass

    return app, t


def stored_jobs(app: Celery) -> int:
    return store_for(app).counts("celery")["ready"]


def test_the_redis_backend_subscribes_to_a_fair_result_once_the_store_took_the_job(
        redis_url, redis_client):
    app, t = fair_app("late", redis_url, redis_url)
    seen: list[tuple[str, int]] = []
    subscribe = app.backend.on_task_call

    def on_task_call(producer, task_id):
        seen.append((task_id, stored_jobs(app)))
        return subscribe(producer, task_id)

    app.backend.on_task_call = on_task_call
    result = t.delay("acme")
    assert seen == [(result.id, 1)]


def test_no_result_subscription_is_made_for_a_job_the_store_refused(redis_server_factory):
    server = redis_server_factory()
    app, t = fair_app("refused", server.url, server.url)
    called: list[str] = []
    app.backend.on_task_call = lambda producer, task_id: called.append(task_id)
    server.stop()
    with pytest.raises(celery_fairqueue.StoreUnavailableError):
        t.delay("acme")
    assert called == []


def test_a_result_published_before_the_late_subscription_reaches_get(redis_url, redis_client):
    """The race of subscribing late: a worker that ran the job and published its result
    between the store's reply and the SUBSCRIBE. ``get()`` reads the stored result before it
    waits on the subscription (the Redis backend's ``on_wait_for_pending``)."""
    app, t = fair_app("raced", redis_url, redis_url)

    def finish_at_once(sender, headers, **kwargs):  # after the store, before the subscription
        app.backend.store_result(headers["id"], 42, "SUCCESS")

    signals.after_task_publish.connect(finish_at_once, sender=t.name, weak=False)
    try:
        result = t.delay("acme")
    finally:
        signals.after_task_publish.disconnect(finish_at_once, sender=t.name)
    assert result.get(timeout=5) == 42


def test_the_rpc_backend_declares_its_reply_queue_before_the_store_takes_the_job(
        redis_url, redis_client):
    """RPC results exist only as messages in the caller's reply queue: it must exist before
    any worker can answer, so Celery's order is kept."""
    app, t = fair_app("rpc", redis_url, "rpc://")
    seen: list[int] = []
    declare = app.backend.on_task_call

    def on_task_call(producer, task_id):
        seen.append(stored_jobs(app))
        return declare(producer, task_id)

    app.backend.on_task_call = on_task_call
    t.delay("acme")
    assert seen == [0]
    assert stored_jobs(app) == 1
