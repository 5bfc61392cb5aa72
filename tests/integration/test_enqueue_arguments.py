"""What a fair ``.delay()`` does with its arguments on the way to the store (publish.py): it binds
them to the task's parameters once, for the account, the business key and the event; the event
shows them by name with the task's ``redact`` fields masked; and a call that does not bind, sent
with ``typing=False``, is stored without a business key, to fail in the worker as Celery's own
would."""

from __future__ import annotations

import json

import pytest

from celery_fairqueue import FairTask, idempotency
from celery_fairqueue import task as task_module
from celery_fairqueue.redaction import REDACTED
from celery_fairqueue.store import EventReader, store_for
from celery_fairqueue.store.formats.records import NO_JOB_KEY, JobRecord


def stored_records(store) -> list[JobRecord]:
    return [JobRecord.parse(raw) for raw in store.client.hvals(store.keys.records)]


def test_a_keyed_delay_binds_its_arguments_once(rel, redis_client, monkeypatch):
    binds: list[str] = []

    def counting(run, args, kwargs):  # type: ignore[no-untyped-def]
        binds.append(run.__name__)
        return original(run, args, kwargs)

    original = task_module.bound_arguments
    monkeypatch.setattr(task_module, "bound_arguments", counting)
    monkeypatch.setattr(idempotency, "bound_arguments", counting)
    rel.send_step.delay("acme", 7, "intro", 3, email="lead7@example.com")
    assert binds == ["send_step"]
    [record] = stored_records(store_for(rel.app))
    assert record.account == "acme" and record.stored_key != NO_JOB_KEY


def test_the_enqueued_event_shows_arguments_by_name_with_secrets_masked(rel, redis_client):
    store = store_for(rel.app)
    EventReader(store, "test").ensure_group()
    store.forget_recording()
    rel.notify.delay("acme", 1, "bob@example.com", {"phone": "555-0100", "city": "Lyon"})
    [(_, event)] = redis_client.xrange(store.keys.events)
    assert event["e"] == "enqueued"
    assert "bob@example.com" not in event["args"] and "555-0100" not in event["args"]
    assert json.loads(event["args"]) == {
        "account_id": "acme", "lead_id": 1, "email": REDACTED,
        "profile": {"phone": REDACTED, "city": "Lyon"}}


@pytest.fixture
def untyped(rel):
    """A keyed fair task that Celery does not check calls of (``typing=False``)."""
    def untyped_step(account_id: str, lead_id: int) -> None:
        """Never run here."""

    return rel.app.task(base=FairTask, typing=False, account_arg="account_id",
                        job_key=("account_id", "lead_id"),
                        name="tests.integration.untyped_step")(untyped_step)


def test_a_call_that_does_not_bind_under_typing_false_is_stored_without_a_business_key(
        rel, redis_client, untyped):
    untyped.delay(account_id="acme")  # no lead_id: the call does not fit the task
    [record] = stored_records(store_for(rel.app))
    assert record.account == "acme" and record.stored_key == NO_JOB_KEY
    assert json.loads(record.envelope)["headers"]["fairqueue_job_key"] is None


def test_a_call_that_does_not_bind_is_refused_at_the_call_under_typing(rel, redis_client):
    with pytest.raises(TypeError):
        rel.send_step.delay("acme", 7)  # no step, no campaign_rev
    assert stored_records(store_for(rel.app)) == []
