"""The test app of recorders sharing a store's event streams: a store of 16 shards (a stream
each) under its own key prefix, and a fair task; the Django tests' settings pick it for the
recorder processes they start (``FAIRQUEUE_TEST_APP``)."""

import os

from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from celery_fairqueue.store import FairStore, Keys, store_for
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]
SHARDS = 16

app = Celery("streams", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
app.conf.update(fairqueue_shards=SHARDS, fairqueue_key_prefix="fqstreams")
celery_fairqueue.install(app)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id")
def job(self, account_id: str, n: int) -> int:
    return n


def fresh() -> FairStore:
    """The app's store after the test's flush, laid out in SHARDS again (see tests.apps.sharded)."""
    store = store_for(app)
    store.client.set(Keys(store.keys.prefix).shard_count, SHARDS)
    store.client.set(Keys(store.keys.prefix).layout_format, "2")
    store.forget_recording()
    return store
