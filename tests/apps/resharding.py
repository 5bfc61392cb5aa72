"""The test app of the reshard tests: a fair task that records each run in the ledger, and
whether its job's record was held by more than one shard while it ran (a job run while its
account was half-moved). ``$FQ_SHARDS`` is the process's ``fairqueue_shards`` (4 by default);
it re-reads the store's number of shards every ``$FQ_SHARDS_CHECK`` seconds (0.5)."""

import os
import time

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.store.formats.keys import Keys
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]
#: Shards the tests move stores to, at most: where a job's record is looked for.
MOST_SHARDS = 16

app = Celery("resharding", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
app.conf.fairqueue_shards = int(os.environ.get("FQ_SHARDS", "4"))
app.conf.fairqueue_shards_check_interval = float(os.environ.get("FQ_SHARDS_CHECK", "0.5"))
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)
_records = [Keys("fairqueue", n).records for n in range(MOST_SHARDS)]


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "n"))
def work(self, account_id: str, n: int) -> int:
    job_id = delivery_id(self.request.id, self.request.retries)
    pipe = _ledger.pipeline(transaction=False)
    for key in _records:
        pipe.hexists(key, job_id)
    holders = sum(pipe.execute())
    if holders != 1:
        _ledger.rpush("half_moved", f"{account_id}:{n} held by {holders} shards")
    record_side_effect(_ledger, f"{account_id}:{n}")
    time.sleep(0.02)  # a backlog builds up: the reshard moves waiting jobs
    return n
