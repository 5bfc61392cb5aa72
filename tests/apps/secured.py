"""A fair app whose fair store is its own Redis, behind a password and TLS.

Broker, result backend and ledger are the session Redis (``$FAIRQUEUE_TEST_REDIS_URL``); the
fair store is ``$FQ_STORE_REDIS_URL``, a ``rediss://:password@...`` URL.
"""

import os

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("secured", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf(), fairqueue_redis_url=os.environ["FQ_STORE_REDIS_URL"])
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int) -> int:
    record_side_effect(_ledger, f"{account_id}:{n}")
    return n
