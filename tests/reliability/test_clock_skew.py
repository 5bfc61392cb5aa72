"""Two workers whose clocks are 30 s ahead and 30 s behind: leases and buckets still hold,
because every lease deadline and token is timed by Redis's clock, not the worker's.

The skew is applied to each worker's Python clock (``tests.apps._config.apply_clock_skew``):
under Debian's libfaketime, Python's timed waits hang or ``time.sleep`` fails with EINVAL.
"""

import json

from celery_fairqueue import set_account_limit
from celery_fairqueue.testing import wait_until

APP = "tests.apps.fair"


def skewed(seconds: int) -> dict:
    return {"FQ_CLOCK_SKEW": str(seconds), "FQ_LEASE_SECONDS": "4", "FQ_HEARTBEAT_SECONDS": "1"}


def test_skewed_workers_keep_leases_and_the_rate_limit(figure, fair, celery_worker_factory,
                                                       redis_client, ledger):
    set_account_limit(fair.app, "limited", rate="5/s", burst=1)
    for n in range(6):
        fair.job.delay("slow", n, 6.0)  # runs past its 4 s lease: only heartbeats keep it
    behind = celery_worker_factory(APP, concurrency=4, env=skewed(-30))
    ahead = celery_worker_factory(APP, concurrency=4, env=skewed(30))
    for n in range(6):  # the bucket is last touched by whichever worker...
        fair.job.delay("limited", n)
    assert wait_until(lambda: sum(k.startswith("limited") for k in ledger.counts()) == 6,
                      timeout=20)
    behind.stop()  # ...and then only the worker 60 s ahead of it takes tokens
    for n in range(6, 26):
        fair.job.delay("limited", n)
    assert wait_until(lambda: len(ledger.counts()) == 32, timeout=60)
    runs = [json.loads(r) for r in redis_client.lrange("runs", 0, -1)]
    duplicates = {k: v for k, v in ledger.counts().items() if v > 1}
    starts = {k: int(v) for k, v in redis_client.hgetall("starts").items()}
    reran = [k for k in starts if k.startswith("slow") and starts[k] > 1]
    # the workers' own clocks differ by 60 s, so the rate is measured on Redis's clock
    late = sorted(run["redis_end"] for run in runs
                  if run["account"] == "limited" and int(run["key"].split(":")[1]) >= 6)
    rate = (len(late) - 1) / (late[-1] - late[0])
    skews = [run["end"] - run["redis_end"] for run in runs]  # worker clock minus Redis clock
    figure(f"clock skew +-30 s: 32 jobs, {len(duplicates)} duplicates, {len(reran)} long jobs "
           f"re-run (their 4 s leases outlived by heartbeats), 5/s limit achieved "
           f"{rate:.2f}/s by the worker 60 s ahead of the one before it")
    assert max(skews) > 25  # the skew was really in force
    assert not duplicates and not reran and ahead.is_alive()
    assert 4.0 <= rate <= 5.5
