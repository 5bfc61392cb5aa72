"""An enqueue that raised is never stored: ``EnqueueError`` means "not stored".

The enqueue carries its producer's deadline on Redis's clock and its script stores nothing past
it; the producer raises only once the deadline has passed there (store/connection/deadline.py).
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, StoreUnavailableError
from celery_fairqueue.store import store_for
from celery_fairqueue.store.connection.deadline import RedisClock

ENQUEUE_TIMEOUT = 1.0
ROUNDS = 50


@pytest.mark.slow
def test_an_enqueue_that_raised_while_redis_was_paused_is_never_stored(redis_server_factory):
    """Redis paused (SIGSTOP) as ``.delay()`` starts and resumed at a random moment around the
    producer's deadline, 50 times: every call that raised left nothing stored, once the late
    commands ran; every call that returned is stored once."""
    server = redis_server_factory()
    app = Celery("definite", broker=server.url)
    app.conf.fairqueue_enqueue_timeout = ENQUEUE_TIMEOUT
    celery_fairqueue.install(app)

    @app.task(base=FairTask, account_arg="account", name="definite.t")
    def t(account: str) -> None:
        pass

    t.delay("acme")  # connected, and Redis's clock read
    rng = random.Random(26)
    returned: list[str] = []
    raised: list[str] = []
    slowest = 0.0
    for _ in range(ROUNDS):
        task_id = uuid.uuid4().hex
        resume = threading.Timer(rng.uniform(0.1, 1.1), server.resume)
        server.pause()
        resume.start()
        started = time.monotonic()
        try:
            t.apply_async(args=("acme",), task_id=task_id)
        except StoreUnavailableError:
            raised.append(task_id)
            slowest = max(slowest, time.monotonic() - started)
        else:
            returned.append(task_id)
        resume.join()
    with server.client(socket_timeout=5) as client:
        time.sleep(0.5)  # the late commands run as Redis resumes
        client.ping()
        store = store_for(app)
        stored = set(client.hkeys(store.keys.records))
    stored = {job_id.decode() for job_id in stored}
    assert returned and raised, (len(returned), len(raised))  # both outcomes were met
    assert not [task_id for task_id in raised if f"{task_id}:0" in stored]
    assert {f"{task_id}:0" for task_id in returned} | {_first_job(stored, returned)} == stored
    assert slowest < ENQUEUE_TIMEOUT + 1.0, slowest


def _first_job(stored: set[str], returned: list[str]) -> str:
    """The job of the warm-up call."""
    [first] = stored - {f"{task_id}:0" for task_id in returned}
    return first


def test_redis_time_is_followed_within_the_round_trip_of_its_reading():
    local = [100.0]
    reads: list[float] = []

    def read() -> float:
        local[0] += 0.010  # the reply is 20 ms after the request; Redis read at some point
        reads.append(5000.0)
        local[0] += 0.010
        return 5000.0

    clock = RedisClock(read, monotonic=lambda: local[0], sleep=lambda s: local.__setitem__(
        0, local[0] + s))
    earliest, latest = clock.bounds()
    assert earliest < 5000.0 < latest and latest - earliest < 0.05
    deadline = clock.deadline(0.5)
    assert deadline >= latest + 0.5
    clock.wait_past(deadline)
    assert clock.bounds(resync=False)[0] > deadline
    assert len(reads) == 1  # waiting never asks Redis
    clock.forget()
    clock.bounds()
    assert len(reads) == 2
