"""The test app of the fair dispatch tests: fair tasks that write to the ledger, and a plain one.

Broker, result backend, fair store and ledger are the test Redis named by
``$FAIRQUEUE_TEST_REDIS_URL``. Each task records ``(key, account, start, end)`` so tests can
measure order, overlap and rate from the ledger rather than assume them.
"""

import json
import os
import time

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from tests.apps._config import apply_clock_skew, fair_test_conf
from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]
apply_clock_skew()

app = Celery("fair", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
app.conf.task_routes = {"tests.apps.fair.urgent": {"queue": "critical"}}
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


def _record(key: str, account: str, started: float) -> None:
    record_side_effect(_ledger, key)
    seconds, micros = _ledger.time()  # Redis's clock: the same for workers with skewed clocks
    _ledger.rpush("runs", json.dumps({"key": key, "account": account, "start": started,
                                      "end": time.time(), "pid": os.getpid(),
                                      "redis_end": seconds + micros / 1e6}))


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int, seconds: float = 0.0) -> int:
    started = time.time()
    _ledger.hincrby("starts", f"{account_id}:{n}", 1)
    if seconds:
        time.sleep(seconds)
    _record(f"{account_id}:{n}", account_id, started)
    return n


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"), acks_late=False)
def acked_early(self, account_id: str, n: int) -> int:
    """Acked before it runs (a user's ``acks_late=False``): its run writes its done marker."""
    _record(f"early:{account_id}:{n}", account_id, time.time())
    return n


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id")
def urgent(self, account_id: str, n: int) -> int:
    _record(f"urgent:{account_id}:{n}", account_id, time.time())
    return n


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def flaky(self, account_id: str, n: int, failures: int, countdown: float = 0.2) -> int:
    """Fails ``failures`` times through ``self.retry`` (``countdown`` seconds apart), then
    succeeds."""
    if self.request.retries < failures:
        raise self.retry(countdown=countdown, max_retries=failures + 1)
    _record(f"flaky:{account_id}:{n}", account_id, time.time())
    return self.request.retries


@app.task(shared=False, base=FairTask, bind=True)
def context(self, account_id: str) -> dict:
    return {"job_key": self.request.job_key, "account": self.request.fairqueue_account,
            "eta": self.request.eta, "delivery_info": self.request.delivery_info}


@app.task(shared=False)
def plain(key: str) -> str:
    record_side_effect(_ledger, key)
    return key
