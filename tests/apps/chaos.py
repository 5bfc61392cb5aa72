"""The test app of the chaos storm: a fair store on its own Redis, which the test breaks.

Broker, result backend and ledger are the session Redis (``$FAIRQUEUE_TEST_REDIS_URL``); the
fair store is ``$FQ_STORE_REDIS_URL``, a second redis-server that the test fills past
``maxmemory``, keeps busy with a long script, turns into a read-only replica and back, while it
SIGKILLs workers. Only the store gets the faults, so Celery's own traffic is unaffected.

Side effects go through ``fake_api``, an API that honours an idempotency key as a real one
would: ``calls`` counts what was sent, the ledger what the API applied (once per job key).
"""

import os
import time

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, RetryPolicy
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV, IdempotentAPI

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("chaos", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf(), fairqueue_redis_url=os.environ["FQ_STORE_REDIS_URL"])
celery_fairqueue.install(app)

r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
FAST = RetryPolicy(base=0.05, cap=0.2, max_attempts=4)

fake_api = IdempotentAPI(r)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST)
def storm_job(self, account_id: str, lead_id: int, seconds: float = 0.015) -> str:
    """A short job with one side effect; it never fails on purpose."""
    time.sleep(seconds)
    return fake_api(self.request.job_key, f"{account_id}:{lead_id}")
