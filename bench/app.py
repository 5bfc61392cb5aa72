"""The benchmark app: the same work as a plain Celery task and as a FairTask, side by side.

Every job records ``[account, enqueued_at, started_at, ended_at]`` in the Redis list ``runs``,
so waits and rates are measured on what the workers did, the same way for both kinds.
"""

import json
import os
import time

import redis
from celery import Celery

import celery_fairqueue
from bench.environment import QUIET_TASKS_ENV, SHARDS_ENV, STORE_URL_ENV
from celery_fairqueue import FairTask, PermanentError, RetryPolicy
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    fairqueue_poll_interval=float(os.environ.get("FQ_POLL_INTERVAL", "0.05")),
    # the soak bench shortens these to see crashed workers' jobs return and keys expire
    fairqueue_lease_seconds=float(os.environ.get("FQ_LEASE_SECONDS", "60")),
    fairqueue_heartbeat_interval=float(os.environ.get("FQ_HEARTBEAT_SECONDS", "10")),
    fairqueue_job_retention=float(os.environ.get("FQ_JOB_RETENTION", "86400")),
    # the scale-out, fairness and kill-storm benches put the store on a Redis Cluster, in
    # shards; by default it is the broker's, unsharded
    fairqueue_redis_url=os.environ.get(STORE_URL_ENV) or None,
    fairqueue_shards=int(os.environ.get(SHARDS_ENV, "1")),
    fairqueue_wait_replicas=int(os.environ.get("FQ_WAIT_REPLICAS", "0")),
)
celery_fairqueue.install(app)

if os.environ.get(QUIET_TASKS_ENV):
    # a line per task received and per task done, as ``-l INFO`` writes them, costs the workers
    # more than a no-op task does; a user's worker logs at WARNING by default
    import logging

    for name in ("celery.worker.strategy", "celery.app.trace"):
        logging.getLogger(name).setLevel(logging.WARNING)

ledger = redis.Redis.from_url(REDIS_URL)


def _record(account: str, enqueued: float, seconds: float) -> None:
    started = time.time()
    if seconds:
        time.sleep(seconds)
    ledger.rpush("runs", json.dumps([account, enqueued, started, time.time()]))


def _tick() -> None:
    now = time.time()
    pipe = ledger.pipeline(transaction=False)
    pipe.set("first", now, nx=True)
    pipe.incr("done")
    pipe.set("last", now)
    pipe.execute()


@app.task(base=FairTask, account_arg="account")
def fair_job(account: str, enqueued: float, seconds: float) -> None:
    _record(account, enqueued, seconds)


@app.task(base=FairTask, account_arg="account")
def fair_job_in(account: str, label: str, enqueued: float, seconds: float) -> None:
    """fair_job, recorded as ``account@label`` (bench.queue_limits: the queue it ran from)."""
    _record(f"{account}@{label}", enqueued, seconds)


@app.task
def plain_job(account: str, enqueued: float, seconds: float) -> None:
    _record(account, enqueued, seconds)


@app.task(rate_limit="20/s")
def plain_limited_job(account: str, enqueued: float, seconds: float) -> None:
    _record(account, enqueued, seconds)


@app.task(base=FairTask, account_arg="account")
def fair_noop(account: str) -> None:
    _tick()


@app.task
def plain_noop(account: str) -> None:
    _tick()


@app.task(base=FairTask, account_arg="account", job_key=("account", "n"))
def fair_keyed_noop(account: str, n: int) -> None:
    _tick()


@app.task
def plain_keyed_noop(account: str, n: int) -> None:
    _tick()


@app.task(base=FairTask, account_arg="account", job_key=("account", "n"))
def fair_keyed_message(account: str, n: int, message: dict[str, str]) -> None:
    """``fair_keyed_noop`` with a realistic payload (bench._common.message), for the bytes of
    a pending job."""
    _tick()


class SoakTask(FairTask):
    """Reconciles as the docs recommend: a crash after the side effect finds it recorded."""

    retry_policy = RetryPolicy(base=0.05, cap=0.5, max_attempts=3)
    done_key = "soak:done"  # the ledger's hash of side effects, a count per business key

    def already_applied(self, job_key: str, account: str, n: int, *args: object) -> str | None:
        return "done" if ledger.hexists(self.done_key, f"{account}:{n}") else None


class StormTask(SoakTask):
    """The kill storm's: counts the runs its reconciliation skipped (a side effect written by
    a run that a SIGKILL cut before its ack)."""

    done_key = "storm:done"

    def already_applied(self, job_key: str, account: str, n: int, *args: object) -> str | None:
        found = super().already_applied(job_key, account, n, *args)
        if found:
            ledger.incr("storm:reconciled")
        return found


@app.task(base=SoakTask, bind=True, account_arg="account", job_key=("account", "n"))
def soak_job(self, account: str, n: int, enqueued: float, seconds: float, fail: str) -> None:
    """The soak's job: ``fail`` is "" (runs), "once" (a timeout, then runs) or "permanent"."""
    if fail == "permanent":
        raise PermanentError(f"job {n} is invalid")
    if fail == "once" and not self.request.retries:
        raise TimeoutError("upstream timed out")
    ledger.rpush("soak:waits", time.time() - enqueued)
    time.sleep(seconds)
    ledger.hincrby("soak:done", f"{account}:{n}", 1)


@app.task(base=StormTask, bind=True, account_arg="account", job_key=("account", "n"))
def storm_job(self, account: str, n: int) -> None:
    """The kill storm's job: its side effect is counted per business key, so a job run twice
    shows (the reconciliation finds a crashed run's side effect and skips the job). It runs
    50 ms before the side effect and 50 ms after, so a SIGKILL lands in either half."""
    time.sleep(0.05)
    ledger.hincrby(StormTask.done_key, f"{account}:{n}", 1)
    time.sleep(0.05)
