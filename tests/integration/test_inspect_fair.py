"""Celery's remote control over fair jobs, with real workers: ``inspect scheduled`` lists the
delayed jobs that wait in the fair store (one worker per queue answers for them), and
``query_task`` finds a fair job running ("active") or waiting for its time ("scheduled"), with
the reply shapes Celery's own tests assert (t/integration/test_inspect.py)."""

import importlib
from datetime import UTC, datetime, timedelta

import pytest
import redis

from tests.harness.processes import wait_until

#: how long a broadcast waits for the workers' replies (Celery's default, 1 s, is tight here)
REPLY_SECONDS = 5.0


@pytest.fixture
def compat(redis_server, redis_client):
    return importlib.import_module("tests.apps.compat")


def inspect(compat, *workers):
    return compat.app.control.inspect(timeout=REPLY_SECONDS,
                                      destination=[w.hostname for w in workers] or None)


def once_more(call, tries: int = 10):
    """``call()``, made again while the test process's pooled broker connections turn out to
    have been closed by the server (a test before this one in the same process restarted
    Redis): redis-py drops each dead connection it meets, and a later call connects afresh."""
    for _ in range(tries - 1):
        try:
            return call()
        except redis.ConnectionError:
            continue
    return call()


def answer(call, hostname: str, timeout: float = 30.0):
    """``hostname``'s answer to a remote control call, asked again until it gives one (a
    broadcast that no reply reached in time answers None: a loaded machine)."""
    found = None

    def answered() -> bool:
        nonlocal found
        found = (once_more(call) or {}).get(hostname)
        return bool(found)

    assert wait_until(answered, timeout=timeout)
    return found


def test_inspect_scheduled_lists_a_countdown_job_with_its_eta_and_request(
        compat, celery_worker_factory):
    worker = celery_worker_factory("tests.apps.compat")
    before = datetime.now(UTC)
    result = compat.add.apply_async((1, 2), {}, countdown=300)
    eta = datetime.now(UTC) + timedelta(seconds=600)
    exact = compat.add.apply_async((3, 4), eta=eta)

    reply = once_more(inspect(compat, worker).scheduled)

    assert list(reply) == [worker.hostname]
    first, second = reply[worker.hostname]
    assert before + timedelta(seconds=300) <= datetime.fromisoformat(first["eta"]) \
        <= datetime.now(UTC) + timedelta(seconds=300)
    assert second["eta"] == eta.isoformat()  # the message's own eta, to the microsecond
    assert first == {
        "eta": first["eta"],
        "priority": 6,  # as Celery's strategy schedules an eta request
        "request": {
            "id": result.id, "name": "tests.apps.compat.add", "args": [1, 2], "kwargs": {},
            "type": "tests.apps.compat.add", "hostname": worker.hostname, "time_start": None,
            "acknowledged": False, "worker_pid": None,
            "delivery_info": {"exchange": "", "routing_key": "celery", "priority": 0,
                              "redelivered": False},
        },
    }
    assert second["request"]["id"] == exact.id


@pytest.mark.slow
def test_a_delayed_job_is_listed_by_one_worker_of_two(compat, celery_worker_factory):
    workers = [celery_worker_factory("tests.apps.compat", hostname=f"{name}@fairhost")
               for name in ("b", "a")]
    jobs = {compat.add.apply_async((n, n), countdown=300).id for n in range(3)}

    reply = once_more(inspect(compat, *workers).scheduled)

    listed = [entry["request"]["id"] for entries in reply.values() for entry in entries]
    assert sorted(listed) == sorted(jobs)  # each once, across both workers
    # the first live worker (by name) that consumes the queue answers for its delayed jobs
    assert {name: len(entries) for name, entries in reply.items()} == {
        "a@fairhost": 3, "b@fairhost": 0}
    found = once_more(lambda: inspect(compat, *workers).query_task(sorted(jobs)[0]))
    assert found["b@fairhost"] == {}
    [(state, request)] = found["a@fairhost"].values()
    assert (state, request["id"]) == ("scheduled", sorted(jobs)[0])


def test_query_task_of_a_running_fair_job_answers_active_with_its_request(
        compat, celery_worker_factory):
    worker = celery_worker_factory("tests.apps.compat")
    running = compat.nap.delay(5)
    control = inspect(compat, worker)
    [(state, request)] = answer(lambda: control.query_task(running.id),
                                worker.hostname).values()
    assert state == "active"
    assert request == {
        "id": running.id, "name": "tests.apps.compat.nap", "args": [5], "kwargs": {},
        "type": "tests.apps.compat.nap", "hostname": worker.hostname,
        "time_start": request["time_start"], "worker_pid": request["worker_pid"],
        # a FairTask acks late (its lease keeps it until it ends), as any acks_late task
        "acknowledged": False,
        "delivery_info": {"exchange": "", "routing_key": "celery", "priority": 0,
                          "redelivered": False},
    }
    assert request["time_start"] and request["worker_pid"]
    assert answer(control.active, worker.hostname) == [request]


def test_a_fair_task_acked_early_is_reported_acknowledged_as_celery_reports_it(
        compat, celery_worker_factory):
    worker = celery_worker_factory("tests.apps.compat")
    running = compat.nap_acked_early.delay(5)
    control = inspect(compat, worker)
    [request] = answer(control.active, worker.hostname)

    assert (request["id"], request["acknowledged"]) == (running.id, True)
