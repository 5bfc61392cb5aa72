"""The test app whose workers record job state themselves (the recorder worker step), with the
fair task that the beat tests schedule.

Configured the way a Django project configures Celery: Django set up first
(``tests.django.settings``, whose database the test names through the environment), then the
app reads ``CELERY_*`` settings, here ``CELERY_FAIRQUEUE_RECORDER`` from ``$FQ_RECORDER``.
"""

import os

import django
import redis
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.settings")
django.setup()

import celery_fairqueue  # noqa: E402  (after django.setup: the worker step imports models)
from celery_fairqueue import FairTask  # noqa: E402
from celery_fairqueue.contrib.django import worker  # noqa: E402
from tests.apps._config import fair_test_conf  # noqa: E402
from tests.harness import REDIS_URL_ENV, record_side_effect  # noqa: E402

REDIS_URL = os.environ[REDIS_URL_ENV]


class DjangoStyleSettings:
    CELERY_FAIRQUEUE_RECORDER = os.environ.get("FQ_RECORDER") == "1"


app = Celery("recorded", broker=REDIS_URL, backend=REDIS_URL)
app.config_from_object(DjangoStyleSettings, namespace="CELERY")
app.conf.update(fair_test_conf())
celery_fairqueue.install(app)
worker.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int) -> int:
    record_side_effect(_ledger, f"{account_id}:{n}")
    return n


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id")
def tick(self, account_id: str) -> str:
    """Scheduled by beat: the ledger counts runs per business key (one per occurrence)."""
    record_side_effect(_ledger, self.request.job_key)
    _ledger.rpush("ticks", self.request.job_key)
    return self.request.job_key
