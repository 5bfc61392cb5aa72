"""A store of several shards on one real redis-server: each account on its own shard, claims
across them by runnable weight, lookups by task id on any shard, the store's S followed."""

import logging
import time

import pytest

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore, WorkerRegistration, open_store
from celery_fairqueue.store.shards.chooser import RETRY_FAILED_SECONDS
from celery_fairqueue.store.shards.placement import account_shard

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"
SHARDS = 4


def accounts_on(shard: int, count: int, shards: int = SHARDS) -> list[str]:
    """``count`` account ids that live on ``shard``."""
    found = []
    n = 0
    while len(found) < count:
        if account_shard(f"acct-{n}", shards) == shard:
            found.append(f"acct-{n}")
        n += 1
    return found


@pytest.fixture
def sharded(make_store) -> FairStore:
    return make_store(shards=SHARDS, lease_seconds=30.0)


def held_on(store: FairStore, job_id: str) -> list[int]:
    return [n for n, shard in enumerate(store.shards)
            if store.client.hexists(shard.keys.records, job_id)]


def test_each_account_lives_on_its_own_shard(sharded):
    for shard in range(SHARDS):
        for account in accounts_on(shard, 2):
            job_id = put(sharded, account, 1)
            assert held_on(sharded, job_id) == [shard]
            assert sharded.shard_for(account) is sharded.shards[shard]
    assert sharded.counts("default")["ready"] == 2 * SHARDS


def test_a_claim_takes_the_jobs_of_every_shard_and_settles_each_on_its_own(sharded):
    ids = {put(sharded, account, n) for shard in range(SHARDS)
           for account in accounts_on(shard, 2) for n in range(3)}
    claimed = []
    acks = []
    while True:
        claim = sharded.claim(["default"], 5, TOKEN, NO_LIMIT, acks=acks)
        if not claim.leases:
            break
        assert not claim.lost
        claimed += claim.leases
        for lease in claim.leases:
            assert lease.store is sharded.shard_for(lease.account)
        acks = claim.leases
    assert {lease.job_id for lease in claimed} == ids
    assert sharded.stats()["acked"] == len(ids)
    assert sharded.counts("default") == {"ready": 0, "delayed": 0, "running": 0,
                                         "deferred_accounts": 0, "paused_accounts": 0}


def test_a_claim_returns_its_shards_runnable_weight_exactly(sharded):
    light, heavy = accounts_on(1, 2)
    sharded.set_limit(heavy, AccountLimit(weight=4))
    for n in range(3):
        put(sharded, light, n)
        put(sharded, heavy, n)
    shard = sharded.shards[1]
    claim = shard.claim(["default"], 1, TOKEN, NO_LIMIT)
    assert claim.runnable == 5
    rest = shard.claim(["default"], 10, TOKEN, NO_LIMIT)
    assert len(claim.leases) + len(rest.leases) == 6
    assert rest.runnable == 0
    assert shard.claim(["default"], 10, TOKEN, NO_LIMIT).runnable == 0


def test_a_rate_limited_account_leaves_its_shards_runnable_weight(sharded):
    [slow] = accounts_on(2, 1)
    sharded.set_limit(slow, AccountLimit(rate="1/h", burst=1))
    for n in range(3):
        put(sharded, slow, n)
    claim = sharded.shards[2].claim(["default"], 5, TOKEN, NO_LIMIT)
    assert len(claim.leases) == 1 and claim.runnable == 0
    assert claim.next_due is not None and claim.next_due > 60


def test_a_process_follows_the_stores_number_of_shards_whatever_it_says(sharded, redis_url,
                                                                         caplog):
    put(sharded, accounts_on(0, 1)[0], 1)
    for other in (1, 8):
        store = open_store(FairqueueSettings(redis_url=redis_url, shards=other))
        with caplog.at_level(logging.WARNING, logger="celery_fairqueue"):
            put(store, accounts_on(3, 1)[0], other)
            put(store, accounts_on(2, 1)[0], other)
        assert len(store.shards) == SHARDS and store.sharded
        assert [r.message for r in caplog.records if "following the store" in r.message] == [
            f"fairqueue: the fair store has 4 shard(s) and this process says fairqueue_shards "
            f"= {other}: following the store's (the setting counts for a new store only)"]
        caplog.clear()
    assert [store.client.hlen(shard.keys.records) for shard in sharded.shards] == [1, 0, 2, 2]


def test_a_store_of_one_shard_holding_jobs_stays_of_one_for_a_process_that_says_four(
        make_store, redis_url, redis_client):
    put(make_store(), "acme", 1)
    store = open_store(FairqueueSettings(redis_url=redis_url, shards=4))
    put(store, "acme", 2)
    put(store, accounts_on(3, 1)[0], 3)
    assert len(store.shards) == 1 and not store.sharded
    assert redis_client.get("{fairqueue}:shards") == "1"
    assert redis_client.hlen("{fairqueue}:records") == 3


def test_a_new_store_takes_the_number_of_its_first_process(redis_url, redis_client):
    store = open_store(FairqueueSettings(redis_url=redis_url, shards=4))
    put(store, "acme", 1)
    assert redis_client.get("{fairqueue}:shards") == "4"
    assert len(open_store(FairqueueSettings(redis_url=redis_url)).shards) == 1  # until it reads
    assert put(open_store(FairqueueSettings(redis_url=redis_url)), "acme", 2)
    assert sum(redis_client.hlen(shard.keys.records) for shard in store.shards) == 2


def test_cancel_and_run_now_find_a_job_on_any_shard(sharded):
    for shard in range(SHARDS):
        [account] = accounts_on(shard, 1)
        later = put(sharded, account, 1, due=sharded.server_time() + 3600)
        soon = put(sharded, account, 2)
        assert sharded.run_now(later.partition(":")[0]) == [later]
        assert sharded.cancel(soon.partition(":")[0]) == [soon]
        assert held_on(sharded, soon) == []
    assert sharded.counts("default")["ready"] == SHARDS


def test_a_queue_pause_holds_on_every_shard_and_an_account_pause_on_its_own(sharded):
    accounts = [accounts_on(shard, 1)[0] for shard in range(SHARDS)]
    for account in accounts:
        put(sharded, account, 1)
    sharded.pause(queue="default", by="ops")
    assert sharded.claim(["default"], 10, TOKEN, NO_LIMIT).leases == []
    sharded.resume(queue="default")
    sharded.pause(accounts[3], by="ops")
    assert [pause.account for pause in sharded.pauses()] == [accounts[3]]
    claimed = sharded.claim(["default"], 10, TOKEN, NO_LIMIT).leases
    assert sorted(lease.account for lease in claimed) == sorted(accounts[:3])


def test_limits_live_on_their_accounts_shard(sharded):
    accounts = [accounts_on(shard, 1)[0] for shard in range(SHARDS)]
    for n, account in enumerate(accounts):
        sharded.set_limit(account, AccountLimit(concurrency=n + 1))
    for shard, account in enumerate(accounts):
        assert sharded.shards[shard].get_limit(account) == AccountLimit(concurrency=shard + 1)
    assert dict(sharded.limits()) == {account: AccountLimit(concurrency=n + 1)
                                      for n, account in enumerate(accounts)}
    sharded.set_default_limit(AccountLimit(rate="5/s"))
    assert {shard.default_limit() for shard in sharded.shards} == {AccountLimit(rate="5/s")}


def test_heartbeat_and_reap_keep_each_lease_on_its_shard(make_store):
    store = make_store(shards=SHARDS, lease_seconds=1.0, heartbeat_interval=0.5)
    ids = [put(store, accounts_on(shard, 1)[0], 1) for shard in range(SHARDS)]
    leases = store.claim(["default"], 10, TOKEN, NO_LIMIT).leases
    assert sorted(lease.job_id for lease in leases) == sorted(ids)
    registration = WorkerRegistration("celery@test", ("default",), 4)
    beat = store.beat(TOKEN, registration, [*ids, delivery_id("gone", 0)])
    assert beat.lost == [delivery_id("gone", 0)]
    assert beat.live_workers == 1
    assert len(beat.instance.split(",")) == SHARDS
    assert [store.client.zcard(shard.keys.workers) for shard in store.shards] == [1, 0, 0, 0]
    store.client.zadd(store.shards[3].keys.leases, {leases[0].job_id: 0}, xx=True)
    for shard in store.shards:  # expire every lease
        for job_id in store.client.zrange(shard.keys.leases, 0, -1):
            store.client.zadd(shard.keys.leases, {job_id: 0})
    assert store.reap() == SHARDS
    assert store.counts("default")["ready"] == SHARDS


def test_a_failing_shard_leaves_the_others_claiming_and_its_acks_unsettled(sharded):
    accounts = [accounts_on(shard, 1)[0] for shard in range(SHARDS)]
    for account in accounts:
        put(sharded, account, 1)
        put(sharded, account, 2)
    held = sharded.shards[3].claim(["default"], 1, TOKEN, NO_LIMIT).leases
    broken = sharded.shards[3].keys.records  # an error reply on shard 3: WRONGTYPE
    sharded.client.rename(broken, "{saved}")  # (a script's first command fails: no writes)
    sharded.client.rpush(broken, "not a hash")
    sharded._chooser.forget()
    claim = sharded.claim(["default"], 10, TOKEN, NO_LIMIT, acks=held)
    assert sorted(lease.account for lease in claim.leases) == sorted(accounts[:3] * 2)
    assert claim.unsettled == held
    assert "Redis refused the command" in str(claim.failure)
    sharded.client.delete(broken)
    sharded.client.rename("{saved}", broken)
    time.sleep(RETRY_FAILED_SECONDS)  # the failed shard is left out that long
    retried = sharded.claim(["default"], 10, TOKEN, NO_LIMIT, acks=claim.unsettled)
    assert not retried.lost and retried.failure is None
    assert [lease.account for lease in retried.leases] == [accounts[3]]
    assert sharded.stats()["acked"] == 1
