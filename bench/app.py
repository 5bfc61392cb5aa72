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
from celery_fairqueue import FairTask
from celery_fairqueue.testing import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    fairqueue_poll_interval=0.05,
)
celery_fairqueue.install(app)

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
