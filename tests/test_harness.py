"""The test harness itself: real servers and workers, started, crashed and stopped for real."""

import os
import signal
import threading
import time
import uuid
from types import ModuleType

import pytest
import redis
from celery import Celery

from tests.harness import (
    Ledger,
    RedisServer,
    WorkerProcess,
    pid_alive,
    process_group,
    record_side_effect,
    wait_until,
)
from tests.harness.redis_cluster import HASH_SLOTS, ClusterGroup


@pytest.fixture
def plain(redis_server: RedisServer) -> ModuleType:
    """The plain Celery test app; imported late because it reads the Redis URL at import."""
    from tests.apps import plain

    return plain


def test_redis_server_answers_on_a_private_port(redis_server, redis_client):
    assert redis_client.ping()
    assert redis_client.set("k", "v") and redis_client.get("k") == "v"
    if not os.environ.get("FAIRQUEUE_TEST_REDIS_PORT"):
        assert redis_server.port != 6379
    assert redis_client.config_get("save") == {"save": ""}
    assert redis_client.execute_command("DEBUG", "SLEEP", 0) == "OK"


def test_redis_client_starts_each_test_empty(redis_client):
    assert redis_client.dbsize() == 0


def test_a_result_published_while_celery_resubscribes_after_a_restart_is_seen(
        request, redis_server, fair, monkeypatch):
    """After a test restarted the session Redis, the next one's results still arrive.

    Finding its pub/sub connection dead, Celery's result consumer reads the pending results and
    only then subscribes anew, so a result published in between is lost. Here that gap is
    widened to 0.2 s and the result lands in it: only a consumer that ``redis_client`` made
    start afresh sees it."""
    backend = fair.app.backend

    def finish(task_id: str) -> None:  # what the worker does: store, then publish
        Celery("worker", backend=redis_server.url).backend.store_result(task_id, 42, "SUCCESS")

    first = str(uuid.uuid4())
    backend.on_task_call(None, first)  # the consumer subscribes: it holds a connection now
    finish(first)
    assert fair.app.AsyncResult(first).get(timeout=5) == 42
    redis_server.restart()
    request.getfixturevalue("redis_client")  # as the next test's fixture does
    subscribe_anew = backend.client.pubsub
    monkeypatch.setattr(backend.client, "pubsub",
                        lambda **options: time.sleep(0.2) or subscribe_anew(**options))
    second = str(uuid.uuid4())
    backend.on_task_call(None, second)
    threading.Timer(0.1, finish, args=(second,)).start()
    assert fair.app.AsyncResult(second).get(timeout=5) == 42


def test_aof_redis_keeps_acknowledged_writes_across_sigkill(redis_server_factory):
    server = redis_server_factory(appendonly="yes", appendfsync="everysec")
    client = server.client(decode_responses=True)
    client.set("survivor", "yes")
    pid = server.process.pid
    server.kill()
    assert not pid_alive(pid)
    server.start()
    assert server.client(decode_responses=True).get("survivor") == "yes"


def test_paused_redis_answers_nothing_until_resumed(redis_server_factory):
    server = redis_server_factory()
    server.pause()
    with pytest.raises(redis.TimeoutError):
        server.client(socket_timeout=0.3).ping()
    server.resume()
    assert server.client(socket_timeout=1).ping()


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_worker_runs_tasks_through_the_broker(pool, plain, celery_worker_factory, ledger):
    worker = celery_worker_factory(pool=pool, concurrency=2)
    assert plain.add.delay(2, 3).get(timeout=10) == 5
    assert plain.record.delay("job-1").get(timeout=10) == "job-1"
    assert ledger.counts() == {"job-1": 1}
    ran_in = plain.worker_pid.delay().get(timeout=10)
    if pool == "prefork":
        assert ran_in in worker.children()
    else:
        assert ran_in == worker.pid


def test_stop_is_a_warm_shutdown_that_finishes_the_running_task(
    plain, celery_worker_factory, ledger
):
    worker = celery_worker_factory(pool="threads")
    result = plain.sleep_then_record.delay("warm", 1.0)
    worker.wait_for_log(f"sleep_then_record[{result.id}] received", timeout=10)
    worker.stop()
    assert not worker.is_alive()
    assert ledger.counts() == {"warm": 1}


def test_kill_sigkills_the_whole_process_group(plain, celery_worker_factory):
    worker = celery_worker_factory(pool="prefork", concurrency=2)
    children = worker.children()
    assert len(children) == 2
    sleeper = plain.spawn_sleeper.delay().get(timeout=10)
    assert sorted(process_group(worker.pid)) == sorted([worker.pid, *children, sleeper])

    worker.kill()

    assert worker.process.returncode == -signal.SIGKILL
    assert not worker.is_alive()
    assert not any(pid_alive(pid) for pid in [worker.pid, *children, sleeper])
    assert process_group(worker.pid) == []


def test_a_killed_worker_starts_again_and_waits_for_its_new_ready_line(
    plain, celery_worker_factory
):
    worker = celery_worker_factory()
    first = worker.pid
    worker.kill()

    worker.start()

    assert worker.pid != first and worker.is_alive()
    assert worker.log_path.read_text().count(f"{worker.hostname} ready.") == 2
    assert plain.add.delay(1, 1).get(timeout=10) == 2


def test_worker_process_uses_the_redis_it_is_given(redis_server_factory, tmp_path, request):
    other = redis_server_factory()
    worker = WorkerProcess(
        "tests.apps.plain",
        redis_url=other.url,
        log_path=tmp_path / "worker.log",
        cwd=request.config.rootpath,
    )
    try:
        worker.start()
        client_app = Celery(broker=other.url, backend=other.url)
        assert client_app.send_task("tests.apps.plain.add", (1, 2)).get(timeout=10) == 3
    finally:
        worker.kill()


def test_kill_child_kills_one_child_and_the_worker_replaces_it(plain, celery_worker_factory):
    worker = celery_worker_factory(pool="prefork", concurrency=2)
    before = worker.children()

    killed = worker.kill_child()

    assert killed in before
    assert not pid_alive(killed)
    assert worker.is_alive()
    assert wait_until(
        lambda: len(worker.children()) == 2 and killed not in worker.children(), timeout=10
    )
    assert plain.worker_pid.delay().get(timeout=10) in worker.children()


def test_kill_child_needs_a_prefork_pool(celery_worker_factory):
    worker = celery_worker_factory(pool="threads")
    with pytest.raises(RuntimeError, match="no pool children"):
        worker.kill_child()


def test_worker_that_cannot_start_fails_with_its_log(celery_worker_factory):
    with pytest.raises(RuntimeError, match="no_such_module"):
        celery_worker_factory(app="tests.apps.no_such_module", timeout=15)


@pytest.mark.slow
@pytest.mark.parametrize("primaries", [1, 2])
def test_a_cluster_of_one_or_two_primaries_holds_every_slot_in_equal_ranges(tmp_path, primaries):
    """redis-cli makes no cluster of fewer than three primaries; the harness joins them itself."""
    group = ClusterGroup(tmp_path, masters=primaries, replicas=0)
    try:
        with group.node(group.servers[0]) as client:
            ranges = sorted((int(start), int(end))
                            for start, end, *_ in client.execute_command("CLUSTER", "SLOTS"))
        assert ranges == [(n * HASH_SLOTS // primaries, (n + 1) * HASH_SLOTS // primaries - 1)
                          for n in range(primaries)]
        assert len(group.primaries()) == primaries
        with group.client() as cluster:
            for n in range(50):
                cluster.set(f"k{n}", n)
            assert [cluster.get(f"k{n}") for n in range(50)] == [str(n) for n in range(50)]
        assert {group.owner(f"k{n}").port for n in range(50)} == {s.port for s in group.servers}
    finally:
        group.stop()


def test_ledger_measures_duplicates_and_losses(redis_client):
    ledger = Ledger(redis_client)
    for key in ["a", "a", "b"]:
        record_side_effect(redis_client, key)

    assert ledger.counts() == {"a": 2, "b": 1}
    assert ledger.duplicates() == {"a": 2}
    assert ledger.missing(["a", "b", "c"]) == {"c"}
    assert ledger.wait_for(2, timeout=1) == {"a": 2, "b": 1}
    with pytest.raises(TimeoutError, match="2 of 3 keys"):
        ledger.wait_for(3, timeout=0.2)


@pytest.mark.postgres
def test_pg_server_accepts_connections_and_creates_databases(pg_server):
    import psycopg

    with psycopg.connect(pg_server.dsn) as conn:
        assert conn.execute("select current_user, 1").fetchone() == ("postgres", 1)
    url = pg_server.create_database("harness_check")
    with psycopg.connect(url) as conn:
        assert conn.execute("select current_database()").fetchone() == ("harness_check",)
