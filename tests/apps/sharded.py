"""The test app of the sharded store's readers: a store of four shards (``fairqueue_shards``)
under its own key prefix, and a fair task; ``on_shard`` names accounts that land on a given
shard."""

import itertools
import os

from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from celery_fairqueue.store import FairStore, Keys, store_for
from celery_fairqueue.store.shards.placement import account_shard
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]
SHARDS = 4

app = Celery("sharded", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
app.conf.update(fairqueue_shards=SHARDS, fairqueue_key_prefix="fqsharded")
celery_fairqueue.install(app)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id")
def job(self, account_id: str, n: int) -> int:
    return n


def fresh() -> FairStore:
    """The app's store after the test's flush: laid out in SHARDS again, as its first producer
    records it (each shard's process-wide check of that is cached for a minute, so a store
    flushed meanwhile would otherwise be taken for one of one shard), and asking again
    whether a recorder listens."""
    store = store_for(app)
    store.client.set(Keys(store.keys.prefix).shard_count, SHARDS)
    store.client.set(Keys(store.keys.prefix).layout_format, "2")
    store.forget_recording()
    return store


def on_shard(shard: int, count: int = 1) -> list[str]:
    """``count`` account ids (``acct-<n>``) whose shard is ``shard``."""
    names = (f"acct-{n}" for n in itertools.count())
    return list(itertools.islice(
        (name for name in names if account_shard(name, SHARDS) == shard), count))
