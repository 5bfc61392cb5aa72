"""A ``redact`` argument's value never leaves the worker: not in Celery's task events (what
Flower reads), the result backend's stored error and traceback, ``celery inspect`` listings,
the dead letter, or the fair store's own events, however the task quotes it (its error text,
its return value). A successful task's stored result stays as it is: ``.get()`` returns it.

Real redis-server, a real prefork worker with task events on (``-E``), events received as
Flower receives them (a Receiver on the broker)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import celery_fairqueue
from celery_fairqueue import DeadLetters, run_now
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.reports import shown_arguments
from celery_fairqueue.store import store_for
from celery_fairqueue.store.readers.events import EventReader
from tests.harness import wait_until
from tests.integration.task_events import TaskEvents

pytestmark = pytest.mark.slow

APP = "tests.apps.reliable"
PHONE = "+1-555-0100"
#: The parts of what is checked that name or time the job, never carry its arguments: a value
#: that happens to be part of them (a task id's hex, the worker's name) is no leak.
IDENTITY = frozenset({
    "uuid", "id", "task_id", "hostname", "name", "type", "timestamp", "local_received", "clock",
    "pid", "utcoffset", "root_id", "parent_id", "routing_key", "exchange", "queue", "eta",
    "expires", "runtime", "retries", "delivery_info", "time_start", "worker_pid",
    "acknowledged", "priority", "date_done", "status", "children", "job_id", "task", "account",
    "job_key", "job", "at", "due", "sw_ident", "sw_ver", "sw_sys", "state",
})

EXAMPLES = settings(
    max_examples=int(os.environ.get("FQ_REDACTION_EXAMPLES", "100")), deadline=None,
    database=None, derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: Values that quote, escape or look like the mask, beside any text at all and long ones
#: (a return value's repr is cut at 1024 characters in task-succeeded events).
TRICKY = ["jane.doe@example.com", "a'b\"c", "back\\slash", "line\nbreak", "x**", "**x*",
          "tab\there", "é-ß-€", "{\"json\": 1}", "'quoted'", "  spaces  "]
values = st.one_of(st.sampled_from(TRICKY), st.text(min_size=3, max_size=40),
                   st.text(alphabet="ab @.", min_size=1000, max_size=1300))
leads = itertools.count(1)


@pytest.fixture
def watched(rel, celery_worker_factory, redis_client) -> Iterator[tuple[Any, TaskEvents]]:
    """A prefork worker of the reliable app sending task events, the events it sends, and
    the fair store's event stream switched on (as a recorder does)."""
    EventReader(store_for(rel.app), "test").ensure_group()
    worker = celery_worker_factory(APP, pool="prefork", concurrency=1, args=("-E",))
    with TaskEvents(rel.app) as events:
        yield worker, events


def texts(value: Any, identity: bool = False) -> Iterator[tuple[bool, str]]:
    """Every string value inside ``value``, and whether it is part of the job's identity (it
    sits under an IDENTITY key) rather than of its data."""
    if isinstance(value, str):
        yield identity, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(item, identity or key in IDENTITY)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from texts(item, identity)


@given(email=values, fails=st.booleans())
@example(email="jane.doe@example.com", fails=True)
@example(email="jane.doe@example.com", fails=False)
@EXAMPLES
def test_no_redacted_value_leaves_the_worker(rel, watched, redis_client, email, fails):
    assume(email.strip("*"))  # asterisks alone are what the mask shows anyway
    worker, events = watched
    lead = next(leads) * 2 + (1 if fails else 0)  # notify fails on odd leads
    job = rel.notify.apply_async(("acme", lead, email), {"profile": {"phone": PHONE}},
                                 countdown=600)
    inspect = rel.app.control.inspect(destination=[worker.hostname], timeout=10, limit=1)
    scheduled = inspect.scheduled()
    queried = inspect.query_task(job.id)
    assert job.id in json.dumps(scheduled), scheduled  # listed, so its masking is checked
    assert run_now(rel.app, job.id)
    outcome = "task-failed" if fails else "task-succeeded"
    events.wait_for(job.id, outcome)
    if fails:
        letters = DeadLetters(rel.app)
        assert wait_until(lambda: delivery_id(job.id, 0) in letters.ids(), 20)
        letter = letters.get(delivery_id(job.id, 0))
        dead = {"reason": letter.reason, "error": letter.error, "traceback": letter.traceback,
                "args": json.loads(shown_arguments(rel.app, letter)),
                "task": letter.task, "account": letter.account}
    else:
        assert job.get(timeout=20) == f"sent to {email}"  # the caller's own value, as it is
        dead = {}
    stored = json.loads(redis_client.get(f"celery-task-meta-{job.id}"))
    if not fails:
        stored.pop("result")
    recorded = [event.fields for event in EventReader(store_for(rel.app), "test").read(
        count=10_000, block_ms=100) if event.task_id == job.id]
    listed = [*scheduled.values(), *(info for reply in queried.values()
                                     for _state, info in reply.values())]
    shown = {"events": events.of(job.id), "inspect": listed, "backend": stored,
             "dead letter": dead, "store events": recorded}
    found = list(texts(shown))
    assume(not any(email in text for identity, text in found if identity))
    assert [text for identity, text in found if email in text and not identity] == []
    assert '"***"' in json.dumps(listed)


def scheduled(app: Celery, hostname: str) -> Any:
    """The worker's answer to ``inspect().scheduled()``, asked again while the test
    process's pooled broker connection was closed by the server (a test before this one in
    the same process restarted it): a reconnect is not what the test is about."""
    for _ in range(9):  # redis-py drops each dead pooled connection it meets
        try:
            return app.control.inspect(destination=[hostname], timeout=10, limit=1).scheduled()
        except redis.ConnectionError:
            continue
    return app.control.inspect(destination=[hostname], timeout=10, limit=1).scheduled()


def test_a_retried_fair_job_sends_and_stores_its_retryable_error_masked(rel, watched,
                                                                        redis_client):
    worker, events = watched
    email = "jane.doe@example.com"
    job = rel.notify.apply_async(("acme", 2, email), {"profile": {"phone": PHONE, "busy": 600}})
    retried = events.wait_for(job.id, "task-retried")
    assert retried["exception"] == "RetryableError('mailbox *** is busy')"
    assert "mailbox *** is busy" in retried["traceback"]
    assert wait_until(lambda: job.state == "RETRY", 10)
    assert str(job.result) == "mailbox *** is busy" and email not in job.traceback
    assert job.id in json.dumps(scheduled(rel.app, worker.hostname))  # its retry waits
    assert celery_fairqueue.cancel(rel.app, job.id)
    assert events.wait_for(job.id, "task-revoked")["expired"] is False
    assert job.state == "REVOKED"


def test_a_running_fair_job_is_listed_masked_by_inspect_active_and_reserved(rel, watched,
                                                                            redis_client):
    worker, _events = watched
    email = "jane.doe@example.com"
    job = rel.notify.apply_async(("acme", 2, email), {"profile": {"phone": PHONE, "linger": 3}})
    inspect = rel.app.control.inspect(destination=[worker.hostname], timeout=10, limit=1)
    assert wait_until(lambda: job.id in json.dumps(inspect.active()), 10)
    listed = [inspect.active(), inspect.active(safe=True), inspect.reserved(),
              inspect.query_task(job.id)]
    assert "***" in json.dumps(listed[0])
    assert [text for _identity, text in texts(listed) if email in text or PHONE in text] == []
    assert job.get(timeout=20) == f"sent to {email}"


def test_a_fair_job_sent_by_name_from_a_process_without_install_shows_masked_arguments(
        rel, watched, redis_client, redis_url):
    _worker, events = watched
    email = "jane.doe@example.com"
    foreign = Celery("foreign", broker=redis_url, backend=redis_url)  # never called install
    job = foreign.send_task("tests.apps.reliable.notify", args=("acme", 2, email),
                            kwargs={"profile": {"phone": PHONE}})
    assert job.get(timeout=20) == f"sent to {email}"
    received = events.wait_for(job.id, "task-received")
    assert "***" in received["args"] and "***" in received["kwargs"]
    assert [text for _identity, text in texts(events.of(job.id))
            if email in text or PHONE in text] == []
