"""The test app of issue 47 ("slow down"): fair tasks that call a fake provider the test owns.

The provider is a Redis counter per account and queue (one provider per queue): configured by
``configure(client, account, queue, trip_at=..., retry_after=..., refuses_for=...)``, it answers
its ``trip_at``-th call of that account with a 429 whose ``Retry-After`` header is the text
``retry_after``, and every call of that account in that queue for ``refuses_for`` seconds after
that too. Every call is recorded in the list ``calls`` with Redis's clock: account, queue, job,
the job's start, the call's time and its status; a job that succeeds adds its retries to
``done``; a retry, once stored, adds the time (Redis's clock) to ``retried``. A job works
``seconds`` (default 0.1) before it calls: a job running when the 429 comes still calls after
it (the case a slow-down must bound).
"""

import json
import os
import time

import redis
from celery import Celery, signals

import celery_fairqueue
from celery_fairqueue import FairTask, RetryPolicy
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("provider", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
app.conf.fairqueue_max_slow_down = float(os.environ.get("FQ_MAX_SLOW_DOWN", "3600"))
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)
POLICY = RetryPolicy(base=0.2, cap=1.0, max_attempts=20)


class TooManyRequests(Exception):
    """The requests shape of a 429: the status and the headers on ``.response``."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("HTTP 429")
        self.response = type("Response", (), {"status_code": 429,
                                              "headers": {"Retry-After": retry_after}})()


def configure(client: redis.Redis, account: str, queue: str, *, trip_at: int,
              retry_after: str = "3", refuses_for: float = 3.0) -> None:
    client.hset(f"provider:{account}:{queue}", mapping={
        "trip_at": trip_at, "retry_after": retry_after, "refuses_for": refuses_for})


def redis_now() -> float:
    seconds, micros = _ledger.time()
    return seconds + micros / 1e6


def call_provider(account: str, queue: str, job: int, started: float) -> None:
    """One call of the provider: served, or a 429 (raised as TooManyRequests)."""
    name = f"{account}:{queue}"
    n = _ledger.hincrby("provider:calls", name, 1)
    now = redis_now()
    config = _ledger.hgetall(f"provider:{name}")
    status = 200
    if config:
        if n == int(config["trip_at"]):
            _ledger.set(f"provider:refusing:{name}", now + float(config["refuses_for"]))
        if now < float(_ledger.get(f"provider:refusing:{name}") or 0):
            status = 429
    _ledger.rpush("calls", json.dumps({"account": account, "queue": queue, "job": job,
                                       "start": started, "at": now, "status": status}))
    if status == 429:
        raise TooManyRequests(config["retry_after"])


@signals.task_retry.connect
def _retried(request=None, **_: object) -> None:
    """The retry is stored (with its scope's hold, when the failure said "slow down")."""
    _ledger.rpush("retried", redis_now())


def _run(task: FairTask, account_id: str, n: int, seconds: float) -> int:
    started = redis_now()
    time.sleep(seconds)
    queue = (task.request.delivery_info or {}).get("routing_key") or "default"
    call_provider(account_id, queue, n, started)
    _ledger.rpush("done", json.dumps({"account": account_id, "queue": queue, "job": n,
                                      "retries": task.request.retries}))
    return n


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"), retry_policy=POLICY)
def call(self, account_id: str, n: int, seconds: float = 0.1) -> int:
    """The default scope: a 429 holds the account's jobs in this queue."""
    return _run(self, account_id, n, seconds)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"), retry_policy=POLICY, slow_down_scope="queue")
def call_queue_wide(self, account_id: str, n: int, seconds: float = 0.1) -> int:
    """A provider-wide answer: a 429 holds every job of this queue."""
    return _run(self, account_id, n, seconds)
