"""A success acked after its account moved (issue 36, item 4), on a real redis-server: the job
ran past its lease, was reaped, and a reshard moved its account (the job waiting again, its key
only started) before the first run acked. The done marker goes to the account's new shard,
where the key dedupes now, so the job's next run there returns without running the side effect
again; an ack that rides on a claim and one sent alone alike."""

import pytest

from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import open_store
from celery_fairqueue.store.formats.keys import Keys
from celery_fairqueue.store.formats.records import Marker
from celery_fairqueue.store.shards.placement import account_shard
from celery_fairqueue.store.shards.reshard import Resharder

NO_LIMIT = "0 1 0 - 1"


def settings(redis_url: str, shards: int) -> FairqueueSettings:
    return FairqueueSettings(redis_url=redis_url, shards=shards, shards_check_interval=0.05)


@pytest.mark.parametrize("riding", [False, True], ids=["alone", "riding on a claim"])
def test_a_success_acked_after_its_account_moved_marks_its_key_done_on_the_new_shard(
        redis_server, redis_client, riding):
    store = open_store(settings(redis_server.url, 4))
    store.check_shards()
    account = next(f"acct{n}" for n in range(100)
                   if account_shard(f"acct{n}", 4) != account_shard(f"acct{n}", 16))
    old, new = Keys("fairqueue", account_shard(account, 4)), Keys(
        "fairqueue", account_shard(account, 16))
    store.enqueue(queue="celery", account=account, job_id="j:0", envelope="{}", job_key="k1")
    [lease] = store.claim(["celery"], 1, "w1", NO_LIMIT).leases
    redis_client.zadd(old.leases, {"j:0": 0})  # it ran past its lease
    assert store.reap() == 1
    Resharder(settings(redis_server.url, 4), 16, settle=0).run()
    assert Marker.read(redis_client.get(new.job_key("k1"))).state == "started"

    lease.succeeded()
    if riding:
        assert store.claim(["celery"], 0, "w1", NO_LIMIT, acks=[lease]).lost == ["j:0"]
    else:
        lease.ack()

    marker = Marker.read(redis_client.get(new.job_key("k1")))
    assert (marker.state, marker.job_id) == ("done", "j:0")
    assert redis_client.pttl(new.job_key("k1")) > 0  # kept for the retention, like any done


def test_a_done_marker_on_the_new_shard_is_kept_as_it_is(redis_server, redis_client):
    """The job's next run finished first there, with its external id: the late ack keeps it."""
    store = open_store(settings(redis_server.url, 4))
    store.check_shards()
    account = next(f"acct{n}" for n in range(100)
                   if account_shard(f"acct{n}", 4) != account_shard(f"acct{n}", 16))
    new = Keys("fairqueue", account_shard(account, 16))
    store.enqueue(queue="celery", account=account, job_id="j:0", envelope="{}", job_key="k1")
    [lease] = store.claim(["celery"], 1, "w1", NO_LIMIT).leases
    redis_client.zadd(Keys("fairqueue", account_shard(account, 4)).leases, {"j:0": 0})
    store.reap()
    Resharder(settings(redis_server.url, 4), 16, settle=0).run()
    moved = open_store(settings(redis_server.url, 16))
    moved.shard_for(account).mark_done("k1", "j:0", external_id="msg-42")

    lease.succeeded()
    lease.ack()

    marker = Marker.read(redis_client.get(new.job_key("k1")))
    assert (marker.state, marker.external_id) == ("done", "msg-42")
