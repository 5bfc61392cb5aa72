"""The workers' choice of a shard (store/shards/chooser.py), on its own: claims are simulated by
telling the chooser what each one leased and left runnable."""

from collections import Counter

from celery_fairqueue.store.shards.chooser import ShardChooser


def run(chooser: ShardChooser, weights: dict[int, int], claims: int, batch: int,
        every: float) -> Counter[int]:
    """``claims`` claims of ``batch`` jobs, one each ``every`` seconds, on shards that stay
    backlogged at ``weights`` (the others are empty); the jobs leased per shard."""
    leased: Counter[int] = Counter()
    now = 0.0
    for _ in range(claims):
        tried: set[int] = set()
        while (n := chooser.pick(now, tried)) is not None:
            tried.add(n)
            jobs = batch if weights.get(n, 0) else 0
            chooser.claimed(n, jobs, weights.get(n, 0), None, now)
            leased[n] += jobs
            if jobs:
                break
        now += every
    return leased


def test_backlogged_shards_get_jobs_in_proportion_to_their_weights():
    chooser = ShardChooser(16)
    leased = run(chooser, {3: 1, 7: 2, 8: 4}, claims=700, batch=1, every=0.001)
    assert all(abs(leased[n] - 100 * w) <= 2 for n, w in ((3, 1), (7, 2), (8, 4))), leased


def test_shares_hold_when_each_shard_is_claimed_from_seldom():
    """Claims of 4 jobs every 20 ms: each backlogged shard's turn comes long after the last
    (once more than a 50 ms poll interval). Asking a stale shard first whatever its weight
    gave them equal turns (233 jobs each of 700), not 1:2:4."""
    chooser = ShardChooser(16)
    leased = run(chooser, {3: 1, 7: 2, 8: 4}, claims=175, batch=4, every=0.02)
    total = sum(leased.values())
    for n, weight in ((3, 1), (7, 2), (8, 4)):
        assert abs(leased[n] / total / (weight / 7) - 1) <= 0.05, leased


def test_an_empty_shard_is_asked_again_at_the_workers_poll_and_when_due():
    chooser = ShardChooser(2)
    chooser.claimed(0, 1, 1, None, 0.0)
    chooser.claimed(1, 0, 0, 0.01, 0.0)  # empty, a deferred account due in 10 ms
    assert chooser.pick(0.005, set()) == 0
    assert chooser.pick(0.01, set()) == 1  # due
    chooser.claimed(1, 0, 0, None, 0.01)
    assert chooser.pick(0.02, set()) == 0
    assert chooser.pick(0.07, set()) == 0  # believed empty: not asked on its own
    chooser.rescan()  # the worker's poll
    assert chooser.pick(0.07, set()) == 1
    chooser.woken(0)
    chooser.claimed(1, 0, 0, None, 0.07)
    assert chooser.pick(0.08, set()) == 0  # woken: asked first


def test_a_shard_back_to_work_joins_at_the_lowest_pass_without_banked_turns():
    chooser = ShardChooser(2)
    chooser.claimed(1, 0, 0, None, 0.0)
    for step in range(100):
        chooser.claimed(0, 1, 1, None, step * 0.001)  # shard 0 alone: its pass grows
    chooser.woken(1)
    chooser.claimed(1, 1, 1, None, 0.1)
    picks = Counter()
    for step in range(20):
        n = chooser.pick(0.1 + step * 0.001, set())
        assert n is not None
        picks[n] += 1
        chooser.claimed(n, 1, 1, None, 0.1 + step * 0.001)
    assert abs(picks[0] - picks[1]) <= 2, picks  # alternating, not 100 turns of shard 1
