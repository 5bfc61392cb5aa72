"""Real workers on a store of four shards: every shard's jobs run, an idle worker is woken by
the shard that gained work, and a worker that says another number of shards follows the
store's."""

from collections.abc import Iterator

import pytest

from celery_fairqueue.store import store_for
from celery_fairqueue.store.shards.placement import account_shard
from tests.harness import wait_until

APP = "tests.apps.fair"
SHARDS = 4
SHARDED = {"FQ_SHARDS": str(SHARDS)}


def account_on(shard: int) -> str:
    return next(f"acct-{n}" for n in range(1000) if account_shard(f"acct-{n}", SHARDS) == shard)


@pytest.fixture
def sharded_fair(fair, redis_client) -> Iterator:
    """The fair test app, producing into a store of four shards."""
    fair.app.conf.fairqueue_shards = SHARDS
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        fair.app.__dict__.pop(cached, None)
    yield fair
    fair.app.conf.fairqueue_shards = 1
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        fair.app.__dict__.pop(cached, None)


def test_a_worker_runs_the_jobs_of_every_shard(sharded_fair, celery_worker_factory,
                                               redis_client):
    celery_worker_factory(APP, env=SHARDED, concurrency=2)
    results = [sharded_fair.job.delay(account_on(shard), n)
               for shard in range(SHARDS) for n in range(3)]
    assert [r.get(timeout=20) for r in results] == [0, 1, 2] * SHARDS
    store = store_for(sharded_fair.app)
    # each ack rides on the worker's next claim, a moment after the result
    assert wait_until(lambda: [store.client.hlen(shard.keys.records)
                               for shard in store.shards] == [0] * SHARDS, timeout=10)


def test_an_idle_worker_is_woken_by_the_shard_that_gained_work(sharded_fair,
                                                               celery_worker_factory):
    celery_worker_factory(APP, env={**SHARDED, "FQ_POLL_INTERVAL": "60"})
    for shard in (3, 1):
        assert sharded_fair.job.delay(account_on(shard), 7).get(timeout=15) == 7


def test_a_worker_that_says_one_shard_follows_a_store_of_four(sharded_fair,
                                                              celery_worker_factory,
                                                              redis_client):
    sharded_fair.job.delay(account_on(2), 1)  # the store is now laid out in four shards
    worker = celery_worker_factory(APP, env={"FQ_SHARDS": "1"}, concurrency=2)
    results = [sharded_fair.job.delay(account_on(shard), 5) for shard in range(SHARDS)]
    assert [r.get(timeout=20) for r in results] == [5] * SHARDS
    assert "the fair store has 4 shard(s) and this process says fairqueue_shards = 1" in (
        worker.log_tail(100_000))
    assert redis_client.get("{fairqueue}:shards") == "4"
