"""Error replies from Redis (OOM, BUSY, READONLY) and a bad broker message, met by real workers:
each is a warning and a retry; no job is acked away, lost or run twice, no worker exits."""

import importlib
import sys
import threading
import time

import pytest
from celery import Celery

from celery_fairqueue import DeadLetters
from tests.harness import free_port, wait_until

APP = "tests.apps.fair"
SPLIT = "tests.apps.chaos"
SHORT_LEASES = {"FQ_LEASE_SECONDS": "4", "FQ_HEARTBEAT_SECONDS": "1"}

pytestmark = pytest.mark.reliability


@pytest.fixture
def split(redis_server_factory, monkeypatch, redis_server):
    """The chaos app, whose fair store is a Redis of its own (``split.store_server``), so faults
    hit the fair store alone, not Celery's broker and result backend; its side effects go
    through an API that honours the job key, as the design asks of them."""
    server = redis_server_factory()
    monkeypatch.setenv("FQ_STORE_REDIS_URL", server.url)
    sys.modules.pop(SPLIT, None)  # the URL is read at import
    module = importlib.import_module(SPLIT)
    module.store_server = server
    yield module
    sys.modules.pop(SPLIT, None)


def assert_ran_once_each(ledger, keys) -> None:
    assert wait_until(lambda: len(ledger) >= len(keys), timeout=60), ledger.counts()
    assert ledger.counts() == {key: 1 for key in keys}


def test_a_full_redis_loses_no_job(split, celery_worker_factory, ledger):
    # the store alone fills up while jobs run: the jobs' own side effects still land, their
    # acks (with the done markers) and every claim are refused until Redis has room again
    worker = celery_worker_factory(SPLIT, concurrency=4, env={
        **SHORT_LEASES, "FQ_STORE_REDIS_URL": split.store_server.url})
    for n in range(20):
        split.storm_job.delay("acme", n, 0.1)
    assert wait_until(lambda: len(ledger) >= 4, timeout=20)
    store_redis = split.store_server.client()
    store_redis.config_set("maxmemory", 1)
    try:
        worker.wait_for_log("is full (maxmemory)", timeout=20)
        time.sleep(2)  # full for a while: claims, acks and give-backs are refused
    finally:
        store_redis.config_set("maxmemory", 0)
    assert_ran_once_each(ledger, [f"acme:{n}" for n in range(20)])
    assert DeadLetters(split.app).count() == 0
    assert worker.is_alive() and "Unrecoverable error" not in worker.log_path.read_text()


def test_a_worker_started_against_a_full_redis_waits_then_runs(split, celery_worker_factory,
                                                                ledger):
    for n in range(5):
        split.storm_job.delay("acme", n)
    store_redis = split.store_server.client()
    store_redis.config_set("maxmemory", 1)
    try:
        worker = celery_worker_factory(SPLIT, env={
            **SHORT_LEASES, "FQ_STORE_REDIS_URL": split.store_server.url})
        worker.wait_for_log("is full (maxmemory)", timeout=20)
        time.sleep(1)
    finally:
        store_redis.config_set("maxmemory", 0)
    assert_ran_once_each(ledger, [f"acme:{n}" for n in range(5)])
    assert worker.is_alive() and DeadLetters(split.app).count() == 0


def test_busy_and_readonly_replies_do_not_stop_the_worker(split, celery_worker_factory,
                                                          ledger):
    worker = celery_worker_factory(SPLIT, concurrency=4, env={
        **SHORT_LEASES, "FQ_STORE_REDIS_URL": split.store_server.url})
    for n in range(40):
        split.storm_job.delay("acme", n, 0.1)
    assert wait_until(lambda: len(ledger) >= 4, timeout=20)
    store_redis = split.store_server.client()
    store_redis.replicaof("127.0.0.1", free_port())  # READONLY, as in a failover
    time.sleep(2)
    store_redis.replicaof("no", "one")
    store_redis.config_set("busy-reply-threshold", 100)
    busy = threading.Thread(target=split.store_server.client().eval, args=(
        "local t = tonumber(redis.call('TIME')[1]) "
        "while tonumber(redis.call('TIME')[1]) < t + 2 do end return 1", 0))
    busy.start()  # every other client gets BUSY for about two seconds
    busy.join()
    assert_ran_once_each(ledger, [f"acme:{n}" for n in range(40)])
    log = worker.log_path.read_text()
    assert "read-only replica" in log and "busy running a script" in log  # it met both
    assert worker.is_alive() and "Unrecoverable error" not in log
    assert DeadLetters(split.app).count() == 0


def test_a_pickle_message_through_the_broker_is_dead_lettered_not_a_crash_loop(
        fair, celery_worker_factory, redis_url, ledger):
    foreign = Celery("foreign", broker=redis_url)  # a producer that never called install()
    pickled = foreign.send_task("tests.apps.fair.job", args=["acme", 1], serializer="pickle")
    fair.job.delay("acme", 2)
    worker = celery_worker_factory(APP)
    dlq = DeadLetters(fair.app)
    assert wait_until(lambda: dlq.count() == 1 and len(ledger) == 1, timeout=20)
    letter = dlq.get(f"{pickled.id}:0")
    assert "arrived through the broker" in letter.reason and not letter.replayable
    assert ledger.counts() == {"acme:2": 1}
    worker.stop()
    worker = celery_worker_factory(APP)  # the broker does not hand it out again
    fair.job.delay("acme", 3)
    assert wait_until(lambda: len(ledger) == 2, timeout=20)
    assert worker.is_alive() and dlq.count() == 1
