"""Redis restarted, restarted without persistence, and paused: what is kept and what is said."""

import os
import re
import time

import pytest

from celery_fairqueue.store import store_for
from tests.harness import WorkerProcess, wait_until

APP = "tests.apps.fair"


@pytest.fixture
def start_worker(tmp_path):
    """``start_worker(server, name, **options)``: a worker on ``server``, which the test may
    kill and restart under it (the factory's workers follow the session server's URL once);
    SIGKILLed when the test ends, passed or failed."""
    started = []

    def start(server, name, **options):
        worker = WorkerProcess(APP, redis_url=server.url, log_path=tmp_path / f"{name}.log",
                               cwd=os.getcwd(), hostname=f"{name}-{os.getpid()}@localhost",
                               **options)
        started.append(worker)
        return worker.start(60)

    yield start
    for worker in started:
        if worker.is_alive():
            worker.kill()


def _outage_failure_lines(worker) -> list[str]:
    return [line for line in worker.log_path.read_text().splitlines()
            if "(timeout or connection error))" in line or "given back to run again" in line
            or ("raised unexpected" in line and "Error" in line)]


def outage_failures(worker) -> int:
    """Task runs the worker logged as failed on a Redis call, whatever the error class
    (connection, timeout, loading): a job running during an outage may fail on its own Redis
    calls (the ledger's among them) or on Celery's (its result) and start again. Each job
    started twice must follow one of these; its side effect may then be twice too, when the
    call that failed was the side effect itself (Redis ran it, the reply did not come)."""
    return len(_outage_failure_lines(worker))


def outage_failed_tasks(worker) -> set[str]:
    """The task ids of the runs :func:`outage_failures` counts (a retry keeps its task id)."""
    return {match.group(1) for line in _outage_failure_lines(worker)
            if (match := re.search(r"\[([0-9a-f-]{36})\]", line))}


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


def test_aof_restart_keeps_every_acknowledged_enqueue(figure, session_redis, fair, start_worker):
    """redis-server SIGKILLed mid-work with ``appendonly yes``: every acknowledged enqueue is
    kept and runs, those a worker was running included. A job runs twice only when its run
    failed on a Redis call and was logged: the kill can land between its side effect (in this
    same Redis) and its done marker, and this task has no reconciliation hook.

    A killed process leaves what it wrote in the kernel's page cache, so this shows Redis
    replaying its AOF; the one-second fsync window of ``appendfsync everysec`` is what a
    machine crash may lose, and no process kill can show it."""
    server = session_redis
    server.client().config_set("appendfsync", "everysec")
    server.client().config_set("appendonly", "yes")
    server.config.update(appendonly="yes", appendfsync="everysec")
    time.sleep(0.5)  # the AOF rewrite that CONFIG SET starts
    worker = start_worker(server, "aof", concurrency=2)
    ids = [fair.job.delay(f"acct{n % 5}", n, 0.05).id for n in range(300)]
    client = server.client(decode_responses=True)
    assert wait_until(lambda: client.hlen("ledger") >= 20, timeout=20)
    running = store_for(fair.app).counts("celery")["running"]
    server.kill()
    server.start()
    client = server.client(decode_responses=True)
    assert wait_until(lambda: client.hlen("ledger") == 300, timeout=60)
    twice = sorted(k for k, v in client.hgetall("ledger").items() if v != "1")
    started_again = {k for k, v in client.hgetall("starts").items() if v != "1"}
    retried = len(started_again)
    figure(f"redis restart (AOF everysec, SIGKILL with {running} jobs running): {len(ids)} "
           f"acknowledged enqueues, {client.hlen('ledger')} run, {300 - client.hlen('ledger')} "
           f"lost, {len(twice)} side effects twice, {retried} started again after a "
           f"logged failure of their own or Celery's Redis call")
    assert running > 0 and set(twice) <= started_again
    assert retried <= outage_failures(worker), worker.log_tail(200)
    assert worker.is_alive()


def test_restart_without_persistence_is_detected_and_reported(session_redis, fair, start_worker,
                                                              figure):
    server = session_redis
    worker = start_worker(server, "nopersist")
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


def test_redis_paused_five_seconds_leases_hold_and_only_failed_runs_repeat(
        figure, session_redis, fair, start_worker):
    """Redis SIGSTOPped 5 s while two workers run one-second jobs: every job runs, the workers
    recover, and a job starts again only after a run of its own failed on a Redis call and was
    logged; its side effect may then be twice (at least once, as designed).

    The leases (8 s, a beat a second, every deadline on Redis's ``TIME``) outlive the pause:
    the beat a worker sends during it waits in Redis's socket buffer and runs as Redis
    resumes, before the reaps sent after it. Measured in 20 runs (10 with 4 busy loops on 2
    cores): deadlines at least 6.99 s after the pause's start, renewed within 0.27 s of the
    resume, 1.97 s to spare at the least. A lease reaped under a running job and claimed
    again before that run's ack would start the job twice with no failure of its own logged:
    the last asserts catch that (a claim after the ack finds the done marker and skips it).

    Why not "no side effect twice": a run writing to the ledger as Redis stops waits with
    redis-py's default 5 s socket timeout, as long as the pause, and on a loaded machine
    (SIGCONT a few ms late) its HINCRBY or RPUSH times out in the task while Redis runs it at
    the resume. The task fails with TimeoutError, the retry policy runs it again, its started
    marker asks ``already_applied`` (none here) and the ledger counts two: at-least-once with
    reconciliation (docs/guide.md, "When Redis fails"). The old ``duplicates == 0`` failed so
    3 times in 10 runs with 4 busy loops; each time the job's first run had logged "attempt 1
    failed (TimeoutError (timeout or connection error))" and no lease was reaped under it."""
    server = session_redis
    env = {"FQ_LEASE_SECONDS": "8", "FQ_HEARTBEAT_SECONDS": "1"}
    workers = [start_worker(server, f"paused{n}", concurrency=4, env=env)
               for n in range(2)]
    keys = {fair.job.delay(f"acct{n % 4}", n, 1.0).id: f"acct{n % 4}:{n}" for n in range(40)}
    client = server.client(decode_responses=True)
    assert wait_until(lambda: client.hlen("ledger") >= 10, timeout=20)
    running = store_for(fair.app).counts("celery")["running"]
    server.pause()
    time.sleep(5)
    server.resume()
    assert wait_until(lambda: client.hlen("ledger") == 40, timeout=90)
    started_again = {k for k, v in client.hgetall("starts").items() if int(v) > 1}
    twice = {k for k, v in client.hgetall("ledger").items() if int(v) > 1}
    failed = {keys[task_id] for w in workers for task_id in outage_failed_tasks(w)
              if task_id in keys}
    reconnects = [w.log_path.read_text().count("Trying to re-establish the connection")
                  for w in workers]
    figure(f"redis paused 5 s with {running} one-second jobs running: 40 jobs, "
           f"{40 - client.hlen('ledger')} lost, {len(started_again)} started again, all after "
           f"a logged failure of their own or Celery's Redis call: {started_again <= failed}, "
           f"{len(twice)} side effects twice, workers alive: "
           f"{all(w.is_alive() for w in workers)}, broker reconnects: {reconnects}")
    assert running > 0
    assert all(w.is_alive() for w in workers)
    assert twice <= started_again, (twice, started_again)
    assert started_again <= failed, (started_again, failed, workers[0].log_tail(200),
                                     workers[1].log_tail(200))
    assert max(reconnects) <= 2  # one reconnect after the pause, not a crash loop
