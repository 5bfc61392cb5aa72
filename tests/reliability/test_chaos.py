"""The chaos storm: every kind of Redis refusal, and SIGKILLs, while 5,000 jobs are enqueued and
run; nothing is lost, nothing is done twice, and no Redis reply makes a worker exit.

The fair store is a Redis of its own, which the test, in turn, puts below ``maxmemory`` (OOM),
keeps busy with a long script (BUSY), turns into a replica of a closed port (READONLY) and then
back, and then SIGKILLs a worker. Broker, result backend and ledger stay on the session Redis,
which no fault touches: what is measured is how the package lives through its store's faults.
"""

from __future__ import annotations

import collections
import importlib
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from celery_fairqueue import DeadLetters, StoreUnavailableError, store_for
from tests.harness import free_port, wait_until

pytestmark = pytest.mark.reliability

APP = "tests.apps.chaos"
JOBS, ACCOUNTS, WORKERS, CONCURRENCY, CYCLES = 5000, 20, 3, 4, 2
FAULTS = ("OOM", "BUSY", "READONLY", "SIGKILL")
FAULT_SECONDS = 2.0
#: How far the producer may run ahead of the finished jobs, so it is still enqueueing when the
#: late faults hit and meets each kind of refusal too.
BACKLOG = 400

#: A read-only script that keeps Redis busy for ARGV[1] microseconds of its own clock.
SPIN = """
local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
local turns = 0
repeat
  t = redis.call('TIME')
  turns = turns + 1
until tonumber(t[1]) * 1000000 + tonumber(t[2]) - start >= tonumber(ARGV[1])
return turns
"""

#: What each fault makes the workers log: Redis's own words, which the store's errors quote.
FELT = {
    "OOM": "command not allowed when used memory > 'maxmemory'",
    "BUSY": "Redis is busy running a script",
    "READONLY": "You can't write against a read only replica",
}


@pytest.fixture
def store_redis(redis_server_factory):
    """The fair store's own Redis: it refuses writes when full instead of evicting jobs."""
    return redis_server_factory(maxmemory_policy="noeviction")


@pytest.fixture
def chaos(store_redis, monkeypatch, redis_server):
    monkeypatch.setenv("FQ_STORE_REDIS_URL", store_redis.url)
    sys.modules.pop(APP, None)  # the store URL is read at import
    module = importlib.import_module(APP)
    yield module
    sys.modules.pop(APP, None)


#: The error reply of each fault as redis-py raises it (it strips the codes it has a class for).
REPLIES = {
    "OOM": lambda exc: isinstance(exc, redis.exceptions.OutOfMemoryError),
    "BUSY": lambda exc: str(exc).startswith("BUSY"),
    "READONLY": lambda exc: isinstance(exc, redis.exceptions.ReadOnlyError),
}


def refused(client: redis.Redis, code: str) -> Callable[[], bool]:
    """A probe: does a write now fail with the error reply ``code`` (OOM, BUSY, READONLY)?"""

    def probe() -> bool:
        try:
            client.set("chaos:probe", "x")
        except redis.ResponseError as exc:
            if REPLIES[code](exc):
                return True
            raise
        return False

    return probe


def inject_oom(admin: redis.Redis) -> None:
    """``maxmemory`` below what Redis uses: every write that may grow memory is refused."""
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory", used // 2)
    try:
        assert wait_until(refused(admin, "OOM"), timeout=5), "maxmemory did not refuse writes"
        time.sleep(FAULT_SECONDS)
    finally:
        admin.config_set("maxmemory", 0)


def inject_busy(admin: redis.Redis, store_redis) -> None:
    """A script that runs ~2 s past ``busy-reply-threshold``: every other client gets BUSY."""
    admin.config_set("busy-reply-threshold", 100)
    spinner = store_redis.client(socket_timeout=FAULT_SECONDS + 30)
    try:
        with ThreadPoolExecutor(1) as pool:
            spinning = pool.submit(spinner.eval, SPIN, 0, int(FAULT_SECONDS * 1e6))
            busy = wait_until(refused(admin, "BUSY"), timeout=FAULT_SECONDS)
            assert spinning.result(timeout=FAULT_SECONDS + 30) > 0
        assert busy, "the long script did not make Redis answer BUSY"
    finally:
        spinner.close()
        assert wait_until(lambda: _config_set(admin, "busy-reply-threshold", 5000), timeout=10)


def _config_set(admin: redis.Redis, name: str, value: int) -> bool:
    try:
        return bool(admin.config_set(name, value))
    except redis.ResponseError as exc:
        if str(exc).startswith("BUSY"):
            return False
        raise


def inject_readonly(admin: redis.Redis) -> None:
    """A replica of a port where nothing listens: it keeps its data and refuses writes."""
    admin.replicaof("127.0.0.1", free_port())
    try:
        assert wait_until(refused(admin, "READONLY"), timeout=5), "the replica accepted writes"
        time.sleep(FAULT_SECONDS)
    finally:
        admin.replicaof("NO", "ONE")


def failed(future) -> bool:
    return future.done() and future.exception() is not None


@pytest.mark.xdist_group("cpu-b")  # keeps a core busy: see tests/harness/parallel.py
def test_chaos_storm_loses_nothing_and_no_redis_reply_stops_a_worker(
        figure, chaos, store_redis, celery_worker_factory, redis_client, ledger):
    env = {"FQ_STORE_REDIS_URL": store_redis.url, "FQ_LEASE_SECONDS": "4",
           "FQ_HEARTBEAT_SECONDS": "1"}

    def start_worker():
        return celery_worker_factory(APP, concurrency=CONCURRENCY, pool="threads", env=env,
                                     timeout=60)

    workers = [start_worker() for _ in range(WORKERS)]
    every_worker = list(workers)
    killed = []
    admin = store_redis.client(decode_responses=True, socket_timeout=10)
    injected = collections.Counter()
    refusals = collections.Counter()  # enqueue calls that raised, by exception class
    stop = threading.Event()

    def produce() -> None:
        deadline = time.monotonic() + 150
        for lead in range(JOBS):
            if lead % 50 == 0:
                while lead - len(ledger) > BACKLOG and not stop.is_set():
                    assert time.monotonic() < deadline, "the jobs stopped finishing"
                    time.sleep(0.02)
            while True:  # the same call again: the business key makes a repeat safe
                assert not stop.is_set(), "the test gave up"
                try:
                    chaos.storm_job.delay(f"acct{lead % ACCOUNTS}", lead)
                    break
                except StoreUnavailableError as exc:
                    refusals[type(exc).__name__] += 1
                    assert time.monotonic() < deadline, f"enqueue refused for too long: {exc}"
                    time.sleep(0.02)

    rng = random.Random(11)
    faults = [fault for _ in range(CYCLES) for fault in FAULTS]
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        producing = pool.submit(produce)
        try:
            for n, fault in enumerate(faults, 1):
                due = n * JOBS // (len(faults) + 1)
                assert wait_until(lambda due=due: len(ledger) >= due or failed(producing),
                                  timeout=90, interval=0.05), f"stuck before {fault} #{n}"
                if failed(producing):
                    producing.result()  # say why
                if fault == "OOM":
                    inject_oom(admin)
                elif fault == "BUSY":
                    inject_busy(admin, store_redis)
                elif fault == "READONLY":
                    inject_readonly(admin)
                else:
                    victim = rng.randrange(len(workers))
                    workers[victim].kill()
                    killed.append(workers[victim])
                    workers[victim] = start_worker()
                    every_worker.append(workers[victim])
                injected[fault] += 1
            producing.result(timeout=150)
        finally:
            stop.set()
            admin.close()
    store = store_for(chaos.app)
    idle_since = [None]

    def left_in_store() -> int:
        left = store.counts("celery")
        return left["ready"] + left["delayed"] + left["running"]

    def settled() -> bool:
        """Every job done, or the store has nothing left to run (then what is missing is lost:
        no need to wait the whole timeout to say so)."""
        if len(ledger) >= JOBS:
            return True
        if left_in_store():
            idle_since[0] = None
        elif idle_since[0] is None:
            idle_since[0] = time.monotonic()
        return idle_since[0] is not None and time.monotonic() - idle_since[0] > 10

    wait_until(settled, timeout=180, interval=0.5)
    seconds = time.monotonic() - started
    # a job whose ack could not be written is reaped, found done and acked: the store drains
    drained = wait_until(lambda: left_in_store() == 0, timeout=60, interval=0.5)

    counts = ledger.counts()
    expected = {f"acct{lead % ACCOUNTS}:{lead}" for lead in range(JOBS)}
    lost = expected - set(counts)
    duplicates = {key: n for key, n in counts.items() if n != 1}
    letters = DeadLetters(chaos.app).list(limit=JOBS)
    logs = {w.hostname: w.log_path.read_text(errors="replace") for w in every_worker}
    warnings = sum(len(re.findall(r"^\[[^]]*: WARNING/", log, re.M)) for log in logs.values())
    unrecoverable = [name for name, log in logs.items() if "Unrecoverable error" in log]
    exited = [w.hostname for w in workers if not w.is_alive()]
    felt = {fault: sum(text in log for log in logs.values()) for fault, text in FELT.items()}
    reruns = sum(int(v) - 1 for v in redis_client.hgetall("calls").values())
    figure(f"chaos storm: {JOBS} jobs over {WORKERS} workers, faults: {injected['OOM']} OOM, "
           f"{injected['BUSY']} BUSY, {injected['READONLY']} READONLY, {injected['SIGKILL']} "
           f"SIGKILL; {len(lost)} lost, {len(duplicates)} duplicate side effects, "
           f"{sum(refusals.values())} enqueue calls refused and retried, {warnings} warnings "
           f"logged by workers, {len(exited) + len(unrecoverable)} worker exits caused by Redis "
           f"replies")
    print(f"chaos storm details: {seconds:.0f} s, refusals {dict(refusals)}, workers that "
          f"logged each fault {felt}, {reruns} API calls repeated and absorbed by the "
          f"idempotency key, {len(letters)} dead letters, store stats {store.stats()}")

    assert all(injected[fault] >= 2 for fault in FAULTS), injected
    # a dead letter says which jobs went missing and why; "applied" is whether its side effect
    # had happened before it was buried
    dead = [{"job": d.job_id, "key": ":".join(map(str, d.args[:2])), "reason": d.reason,
             "deliveries": d.deliveries, "applied": ":".join(map(str, d.args[:2])) in counts}
            for d in letters]
    assert not lost and not letters, (f"{len(lost)} of {JOBS} jobs never ran, e.g. "
                                      f"{sorted(lost)[:5]}; {len(letters)} dead letters: {dead}")
    assert not duplicates, duplicates
    assert drained, f"every job ran, yet the store still holds {store.counts('celery')}"
    assert not exited, exited
    assert not unrecoverable, unrecoverable
    assert len(killed) == injected["SIGKILL"]
    # the faults reached the workers (else the storm proved nothing), as warnings, not exits
    assert all(felt.values()), felt
