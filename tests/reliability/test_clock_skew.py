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
    for skew in (-30, 30):  # each runs three long jobs of its own queue and has one slot left
        own = f"slow{len(workers)}"
        workers.append(celery_worker_factory(APP, concurrency=4, queues=("celery", own),
                                             env=skewed(skew)))
        for n in range(3 * len(workers) - 3, 3 * len(workers)):
            # past its 4 s lease, and past the limited jobs
            fair.job.apply_async(("slow", n, 12.0), queue=own)
        assert wait_until(lambda own=own: store.counts(own)["running"] == 3, 10)
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
    # the workers' own clocks differ by 60 s, so the runs are timed on Redis's clock; the
    # guarantee is the token bucket's: no stretch of runs holds more than burst + rate x its
    # length (0.2 s of slack for the time between a claim and the end of its 0.3 s run)
    ends = sorted(run["redis_end"] for run in limited)
    over = [(i, j) for i in range(len(ends)) for j in range(i + 1, len(ends))
            if j - i + 1 > burst + 5 * (ends[j] - ends[i] + 0.2)]
    rate = (len(ends) - burst - 1) / (ends[-1] - ends[burst])
    skews = [run["end"] - run["redis_end"] for run in runs]  # worker clock minus Redis clock
    figure(f"clock skew +-30 s: 36 jobs, {len(duplicates)} duplicates, {len(reran)} long jobs "
           f"re-run (their 4 s leases outlived by heartbeats), 5/s limit achieved "
           f"{rate:.2f}/s by {len(takers)} workers 60 s apart taking its tokens")
    assert max(skews) > 25 and min(skews) < -25  # the skews were really in force
    assert len(takers) == 2
    assert not duplicates and not reran and ahead.is_alive() and behind.is_alive()
    assert not over and rate >= 4.0
