"""A plain Celery app (no fairqueue) that exercises the test harness itself.

Broker, result backend and ledger are the test Redis named by ``$FAIRQUEUE_TEST_REDIS_URL``,
which the ``redis_server`` fixture exports and the worker factory passes on.
"""

import os
import subprocess
import time

import redis
from celery import Celery

from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("plain", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
)

_ledger = redis.Redis.from_url(REDIS_URL)


@app.task(shared=False)
def add(x: int, y: int) -> int:
    return x + y


@app.task(shared=False)
def record(key: str) -> str:
    record_side_effect(_ledger, key)
    return key


@app.task(shared=False)
def sleep_then_record(key: str, seconds: float) -> str:
    time.sleep(seconds)
    return record(key)


@app.task(shared=False)
def worker_pid() -> int:
    """PID of the process that ran the task: a pool child under prefork."""
    return os.getpid()


@app.task(shared=False)
def spawn_sleeper(seconds: float = 60) -> int:
    """Start a grandchild process in the worker's process group and return its PID.

    Unlike pool children, it does not die with its parent: only a signal to the whole group
    reaches it.
    """
    return subprocess.Popen(["sleep", str(seconds)]).pid
