"""Many accounts: the store's memory per pending job, and no key left behind once jobs finish."""

import time

import pytest

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from tests.harness import wait_until
from tests.harness.store_tools import ack_many, claim_jobs, enqueue_many

ACCOUNTS = 100_000
#: What a pending job may cost in Redis: its envelope, indexes and its account's rotation entry
#: (a minimal message; docs/performance.md gives the figures of a real job, from bench.memory).
MAX_BYTES_PER_JOB = 1024
#: What stays in Redis when every job is done and its key's retention has passed (the registry
#: of live workers while a worker runs, the live processes' readings of the store's layout,
#: and its format).
BOOKKEEPING = {"{fairqueue}:queues", "{fairqueue}:stats",
               "{fairqueue}:instance", "{fairqueue}:workers", "{fairqueue}:workerinfo",
               "{fairqueue}:layoutreaders", "{fairqueue}:layoutseen", "{fairqueue}:format",
               "{fairqueue}:formatseen"}
#: A queue's wake-up keys: its doorbell and its keeper's clock (each at most one ring nobody
#: took yet) and its time keeper's lease (while a worker lives).
WAKE_UPS = {"{fairqueue}:queue:celery:bell", "{fairqueue}:queue:celery:clock",
            "{fairqueue}:queue:celery:keeper"}
#: The store's configuration, which a worker writes once and every job leaves as it is: the
#: default limit, as JSON and packed in the limits hash under "*" (never an encoded account),
#: and the store's number of shards.
CONFIGURATION = {"{fairqueue}:defaultlimit", "{fairqueue}:limits", "{fairqueue}:shards"}


@pytest.mark.xdist_group("cpu-a")  # keeps a core busy: see tests/harness/parallel.py
def test_many_accounts_cost_little_memory_and_leave_no_keys_behind(make_store, redis_client,
                                                                   figure):
    store = make_store(job_retention=0.5)
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "t", "id": "x"}).to_json()
    before = int(redis_client.info("memory")["used_memory"])
    created = enqueue_many(store, (
        dict(queue="celery", account=f"account-{n}", job_id=f"job-{n}:0", envelope=envelope,
             job_key=f"key-{n}") for n in range(ACCOUNTS)))
    assert all(result.created for result in created)
    per_job = (int(redis_client.info("memory")["used_memory"]) - before) / ACCOUNTS
    no_limit = AccountLimit().pack(0)
    done = 0
    while jobs := claim_jobs(store, ["celery"], 64, "scale", no_limit):
        assert all(ack_many(store, jobs))
        done += len(jobs)
    time.sleep(0.6)  # past the retention: Redis expires the done markers itself
    left = set(redis_client.keys("*"))
    figure(f"scale: {ACCOUNTS} accounts with a ready job, {per_job:.0f} B of Redis per pending "
           f"job, {done} done, keys left after retention: {sorted(left)}")
    assert done == ACCOUNTS
    assert per_job < MAX_BYTES_PER_JOB
    assert left <= BOOKKEEPING | WAKE_UPS


def test_jobs_run_by_a_worker_leave_no_keys_behind(fair, celery_worker_factory, redis_client,
                                                   ledger):
    """Leases, markers, business keys and buckets go too, once the keys' retention passes."""
    celery_worker_factory("tests.apps.fair", concurrency=4, env={"FQ_JOB_RETENTION": "1"})
    for n in range(300):
        fair.job.delay(f"acct{n}", n)
    assert wait_until(lambda: len(ledger) == 300, timeout=60)

    def left() -> set[str]:
        return {key for key in redis_client.keys("{fairqueue}*")
                if key not in BOOKKEEPING | CONFIGURATION | WAKE_UPS}

    assert wait_until(lambda: not left(), timeout=15), left()
    assert redis_client.hkeys("{fairqueue}:limits") == ["*"]  # no account's limit stays
