"""A fair app whose fair store is a Redis Cluster (``redis+cluster://``).

Broker, result backend and ledger are the session Redis (``$FAIRQUEUE_TEST_REDIS_URL``); the
fair store is ``$FQ_CLUSTER_URL`` (``redis+cluster://127.0.0.1:p1;redis+cluster://127.0.0.1:p2``);
``$FQ_WAIT_REPLICAS`` sets ``fairqueue_wait_replicas`` (default 0).
"""

import os

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV, record_side_effect

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("cluster", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    fair_test_conf(),
    task_ignore_result=True,
    fairqueue_redis_url=os.environ["FQ_CLUSTER_URL"],
    fairqueue_wait_replicas=int(os.environ.get("FQ_WAIT_REPLICAS", "0")),
)
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


# not shared: each test imports this module afresh for its own store
@app.task(base=FairTask, bind=True, shared=False, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int) -> int:
    record_side_effect(_ledger, f"{account_id}:{n}")
    return n
