"""The test app of the chaos storm: a fair store on its own Redis, which the test breaks.

Broker, result backend and ledger are the session Redis (``$FAIRQUEUE_TEST_REDIS_URL``); the
fair store is ``$FQ_STORE_REDIS_URL``, a second redis-server that the test fills past
``maxmemory``, keeps busy with a long script, turns into a read-only replica and back, while it
SIGKILLs workers. Only the store gets the faults, so Celery's own traffic is unaffected.

Side effects go through ``fake_api``, an API that honours an idempotency key as a real one
would: ``calls`` counts what was sent, the ledger what the API applied (once per job key).
"""

import os
import time

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, RetryPolicy
from tests.apps._config import fair_test_conf
from tests.harness import LEDGER_KEY, REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("chaos", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf(), fairqueue_redis_url=os.environ["FQ_STORE_REDIS_URL"])
celery_fairqueue.install(app)

r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
FAST = RetryPolicy(base=0.05, cap=0.2, max_attempts=4)

# The API's side effect and its ledger entry are one atomic step, as they are for the API's
# own records: a worker killed between two separate calls would lose the ledger entry.
_apply_once = r.register_script("""
if redis.call('SET', KEYS[1], '1', 'NX') then redis.call('HINCRBY', KEYS[2], ARGV[1], 1) end
""")


def fake_api(idempotency_key: str, ledger_key: str) -> str:
    """An external API that honours an Idempotency-Key header: one side effect per key."""
    r.hincrby("calls", ledger_key, 1)
    _apply_once(keys=[f"api:{idempotency_key}", LEDGER_KEY], args=[ledger_key])
    return f"msg-{idempotency_key[:8]}"


@app.task(base=FairTask, bind=True, account_arg="account_id", job_key=("account_id", "lead_id"),
          retry_policy=FAST)
def storm_job(self, account_id: str, lead_id: int, seconds: float = 0.015) -> str:
    """A short job with one side effect; it never fails on purpose."""
    time.sleep(seconds)
    return fake_api(self.request.job_key, f"{account_id}:{lead_id}")
