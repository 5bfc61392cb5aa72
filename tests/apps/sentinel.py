"""A fair app whose fair store is a Redis primary found through Redis Sentinel.

Broker, result backend and ledger are the session Redis (``$FAIRQUEUE_TEST_REDIS_URL``); the
fair store is ``$FQ_SENTINEL_URL`` (``sentinel://127.0.0.1:p1;sentinel://127.0.0.1:p2/0``)
with ``master_name`` ``$FQ_SENTINEL_MASTER`` (default ``mymaster``);
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

app = Celery("sentinel", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    fair_test_conf(),
    task_ignore_result=True,
    fairqueue_redis_url=os.environ["FQ_SENTINEL_URL"],
    fairqueue_redis_transport_options={
        "master_name": os.environ.get("FQ_SENTINEL_MASTER", "mymaster")},
    fairqueue_wait_replicas=int(os.environ.get("FQ_WAIT_REPLICAS", "0")),
)
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


# not shared: each test imports this module afresh for its own store, and a shared task of an
# earlier import would be the one that new apps registered
@app.task(base=FairTask, bind=True, shared=False, account_arg="account_id",
          job_key=("account_id", "n"))
def job(self, account_id: str, n: int) -> int:
    record_side_effect(_ledger, f"{account_id}:{n}")
    return n
