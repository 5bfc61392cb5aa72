"""Two workers whose clocks are 30 s ahead and 30 s behind: leases and buckets still hold,
because every lease deadline and token is timed by Redis's clock, not the worker's.

The skew is applied to each worker's Python clock (``tests.apps._config.apply_clock_skew``):
under Debian's libfaketime, Python's timed waits hang or ``time.sleep`` fails with EINVAL.
"""

import json

from celery_fairqueue import set_account_limit
from celery_fairqueue.store import store_for
from tests.harness import wait_until

APP = "tests.apps.fair"


def skewed(seconds: int) -> dict:
    return {"FQ_CLOCK_SKEW": str(seconds), "FQ_LEASE_SECONDS": "4", "FQ_HEARTBEAT_SECONDS": "1"}


def test_skewed_workers_keep_leases_and_the_rate_limit(figure, fair, celery_worker_factory,
                                                       redis_client, ledger):
    """Both workers take tokens from one bucket turn by turn: timed by the workers' clocks, the
    one 60 s ahead would find it refilled on every turn and far exceed the rate."""
    burst = 5
    set_account_limit(fair.app, "limited", rate="5/s", burst=burst)
    store = store_for(fair.app)
    workers = []
    for skew in (-30, 30):  # each worker runs three long jobs and has one slot left
        workers.append(celery_worker_factory(APP, concurrency=4, env=skewed(skew)))
        for n in range(3 * len(workers) - 3, 3 * len(workers)):
            fair.job.delay("slow", n, 6.0)  # runs past its 4 s lease: only heartbeats keep it
        assert wait_until(lambda: store.counts("celery")["running"] == 3 * len(workers), 10)
    behind, ahead = workers
    for n in range(30):
        fair.job.delay("limited", n, 0.3)  # longer than a token: each worker must take some
    assert wait_until(lambda: len(ledger) == 36, timeout=60)
    runs = [json.loads(r) for r in redis_client.lrange("runs", 0, -1)]
    duplicates = {k: v for k, v in ledger.counts().items() if v > 1}
    starts = {k: int(v) for k, v in redis_client.hgetall("starts").items()}
    reran = [k for k in starts if k.startswith("slow") and starts[k] > 1]
    limited = [run for run in runs if run["account"] == "limited"]
    assert {run["pid"] for run in runs if run["account"] == "slow"} == {w.pid for w in workers}
    takers = {run["pid"] for run in limited}
    # the workers' own clocks differ by 60 s, so the rate is measured on Redis's clock, after
    # the burst
    ends = sorted(run["redis_end"] for run in limited)[burst:]
    rate = (len(ends) - 1) / (ends[-1] - ends[0])
    skews = [run["end"] - run["redis_end"] for run in runs]  # worker clock minus Redis clock
    figure(f"clock skew +-30 s: 36 jobs, {len(duplicates)} duplicates, {len(reran)} long jobs "
           f"re-run (their 4 s leases outlived by heartbeats), 5/s limit achieved "
           f"{rate:.2f}/s by {len(takers)} workers 60 s apart taking its tokens")
    assert max(skews) > 25 and min(skews) < -25  # the skews were really in force
    assert len(takers) == 2
    assert not duplicates and not reran and ahead.is_alive() and behind.is_alive()
    assert 4.0 <= rate <= 5.5
