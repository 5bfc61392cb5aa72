"""A Celery app whose broker is RabbitMQ (``$FQ_BROKER_URL``) and whose fair store is the session
Redis: plain tasks go through RabbitMQ, fair tasks through the store, in one worker."""

import os

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("amqp", broker=os.environ["FQ_BROKER_URL"], backend=REDIS_URL)
app.conf.update(fair_test_conf(), fairqueue_redis_url=REDIS_URL)
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


@app.task(shared=False)
def plain(key: str) -> str:
    record_side_effect(_ledger, f"plain:{key}")
    return key


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int) -> int:
    record_side_effect(_ledger, f"{account_id}:{n}")
    return n
