"""Redis restarted, restarted without persistence, and paused: what is kept and what is said."""

import os
import time

import pytest

from celery_fairqueue.publish import get_store
from celery_fairqueue.testing import WorkerProcess, wait_until

APP = "tests.apps.fair"




def start_worker(server, tmp_path, name, **options):
    worker = WorkerProcess(APP, redis_url=server.url, log_path=tmp_path / f"{name}.log",
                           cwd=os.getcwd(), hostname=f"{name}-{os.getpid()}@localhost",
                           **options)
    return worker.start(60)


@pytest.fixture
def session_redis(redis_server, redis_client, fair):
    """The session's server, empty; tests may kill, restart or pause it (the next test's
    ``redis_client`` brings it back)."""
    yield redis_server
    redis_server.config.update(appendonly="no")
    if redis_server.paused:
        redis_server.resume()
    redis_server.start()
    redis_server.client().config_set("appendonly", "no")


def test_aof_restart_keeps_every_acknowledged_enqueue(figure, session_redis, fair, tmp_path):
    server = session_redis
    server.client().config_set("appendfsync", "everysec")
    server.client().config_set("appendonly", "yes")
    server.config.update(appendonly="yes", appendfsync="everysec")
    time.sleep(0.5)  # the AOF rewrite that CONFIG SET starts
    ids = [fair.job.delay(f"acct{n % 5}", n).id for n in range(300)]
    time.sleep(1.5)  # past the documented fsync window of appendfsync everysec
    server.kill()
    server.start()
    store = get_store(fair.app)
    assert wait_until(lambda: store.client.ping(), timeout=10)
    kept = store.counts("celery")["ready"]
    worker = start_worker(server, tmp_path, "aof")
    client = server.client(decode_responses=True)
    assert wait_until(lambda: client.hlen("ledger") == 300, timeout=60)
    figure(f"redis restart (AOF everysec): {len(ids)} acknowledged enqueues, {kept} kept, "
           f"{300 - client.hlen('ledger')} lost, all ran once: "
           f"{set(client.hvals('ledger')) == {'1'}}")
    assert kept == 300
    worker.kill()


def test_restart_without_persistence_is_detected_and_reported(session_redis, fair, tmp_path,
                                                              figure):
    server = session_redis
    worker = start_worker(server, tmp_path, "nopersist")
    fair.job.delay("acme", 1).get(timeout=20)
    server.kill()
    server.start()
    assert wait_until(lambda: "lost its data" in worker.log_path.read_text(), timeout=20), \
        worker.log_tail()
    line = next(text for text in worker.log_path.read_text().splitlines()
                if "lost its data" in text)
    figure(f"redis restart without persistence: reported: {line.split('fairqueue: ')[1][:90]}...")
    assert "appendonly" in line
    worker.kill()


def test_redis_paused_five_seconds_workers_recover_without_duplicates(figure, session_redis, fair,
                                                                      tmp_path):
    server = session_redis
    worker = start_worker(server, tmp_path, "paused", concurrency=4)
    for n in range(200):
        fair.job.delay(f"acct{n % 4}", n, 0.02)
    client = server.client(decode_responses=True)
    assert wait_until(lambda: client.hlen("ledger") >= 20, timeout=20)
    server.pause()
    time.sleep(5)
    server.resume()
    assert wait_until(lambda: client.hlen("ledger") == 200, timeout=90)
    counts = {k: int(v) for k, v in client.hgetall("ledger").items()}
    duplicates = sum(1 for v in counts.values() if v > 1)
    restarts = worker.log_path.read_text().count("ready.")
    figure(f"redis paused 5 s: 200 jobs, {200 - len(counts)} lost, {duplicates} duplicates, "
           f"worker alive: {worker.is_alive()}, ready lines: {restarts}")
    assert worker.is_alive() and duplicates == 0
    worker.kill()
