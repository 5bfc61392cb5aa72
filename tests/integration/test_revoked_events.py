"""Every end of a fair job that Celery has an event for sends it, as a monitor (Flower) needs:
a job taken out of the store while it waits (revoked, cancelled, purged) sends ``task-revoked``
from the process that took it, a job the claim drops past its ``expires`` sends it with
``expired=True`` from the worker, and a delayed job's ``task-received`` carries its ETA.

Real redis-server; a real worker where one is needed; events received as Flower receives them
(a Receiver on the broker)."""

from __future__ import annotations

from datetime import datetime

import pytest
from celery import signals, states

import celery_fairqueue
from celery_fairqueue.store import store_for
from tests.harness import wait_until
from tests.integration.task_events import TaskEvents

APP = "tests.apps.reliable"
EMAIL = "jane.doe@example.com"

WAYS = {
    "app.control.revoke": lambda app, job: app.control.revoke(job.id),
    "AsyncResult.revoke": lambda app, job: job.revoke(),
    "celery_fairqueue.cancel": lambda app, job: celery_fairqueue.cancel(app, job.id),
    "app.control.purge": lambda app, job: app.control.purge(),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_waiting_fair_job_taken_out_of_the_store_sends_task_revoked(rel, redis_client, way):
    job = rel.notify.apply_async(("acme", 2, EMAIL), countdown=600)
    other = rel.notify.apply_async(("acme", 4, EMAIL), countdown=600)
    with TaskEvents(rel.app) as events:
        WAYS[way](rel.app, job)
        revoked = events.wait_for(job.id, "task-revoked", timeout=10)
    assert revoked["expired"] is False and revoked["terminated"] is False
    assert job.state == states.REVOKED
    assert list(store_for(rel.app).deliveries_of(job.id)) == []  # out of the store: never runs
    if way == "app.control.purge":  # every waiting job of the app's queues
        assert "task-revoked" in events.types(other.id) and other.state == states.REVOKED
    else:
        assert events.of(other.id) == [] and other.state == states.PENDING


def test_cancelling_a_job_that_is_not_waiting_sends_nothing(rel, redis_client):
    with TaskEvents(rel.app) as events:
        assert not celery_fairqueue.cancel(rel.app, "no-such-task")
        rel.app.control.purge()
    assert [e for e in events.events if e["type"] == "task-revoked"] == []


@pytest.mark.slow
def test_a_fair_job_past_its_expires_is_revoked_as_expired_by_the_worker(
        rel, redis_client, celery_worker_factory):
    worker = celery_worker_factory(APP, args=("-E",))
    with TaskEvents(rel.app) as events:
        job = rel.notify.apply_async(("acme", 2, EMAIL), countdown=1, expires=0.5)
        revoked = events.wait_for(job.id, "task-revoked")
    assert revoked["expired"] is True and revoked["hostname"] == worker.hostname
    assert wait_until(lambda: job.state == states.REVOKED, 10)
    assert "task-started" not in events.types(job.id)


@pytest.mark.slow
def test_a_delayed_fair_jobs_task_received_carries_its_eta(rel, redis_client,
                                                          celery_worker_factory):
    sent: dict = {}

    def capture(headers, **_):
        sent.update(headers)

    celery_worker_factory(APP, args=("-E",))
    signals.before_task_publish.connect(capture, weak=False)
    rel.app.conf.task_send_sent_event = True  # the producer's own event too
    try:
        with TaskEvents(rel.app) as events:
            job = rel.notify.apply_async(("acme", 2, EMAIL), countdown=1)
            events.wait_for(job.id, "task-received")
            assert job.get(timeout=20) == f"sent to {EMAIL}"
            events.wait_for(job.id, "task-succeeded")
    finally:
        rel.app.conf.task_send_sent_event = False
        signals.before_task_publish.disconnect(capture)
    eta = datetime.fromisoformat(sent["eta"])
    for kind in ("task-sent", "task-received"):
        shown = events.wait_for(job.id, kind)
        assert shown["eta"] is not None and datetime.fromisoformat(shown["eta"]) == eta, kind
        assert EMAIL not in shown["args"] and "***" in shown["args"], kind
