"""Plain Celery, nothing of this package installed: the baseline of ``bench.redis_cost``.

The tasks are ``bench.app``'s plain ones, registered on an app without ``install``, so its
workers ask Redis only what Celery asks.
"""

import os

from celery import Celery

from bench import app as fair
from tests.harness import REDIS_URL_ENV

app = Celery("bench_plain", broker=os.environ[REDIS_URL_ENV], backend=os.environ[REDIS_URL_ENV])
app.conf.update({key: fair.app.conf[key] for key in (
    "task_serializer", "result_serializer", "accept_content", "task_ignore_result",
    "broker_connection_retry_on_startup", "worker_hijack_root_logger")})

plain_job = app.task(name="bench.app.plain_job")(fair.plain_job.run)
plain_keyed_noop = app.task(name="bench.app.plain_keyed_noop")(fair.plain_keyed_noop.run)
