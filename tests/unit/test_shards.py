"""Where accounts live in a sharded store, and which shard a worker claims from."""

import math
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from celery_fairqueue.store.formats.keys import Keys
from celery_fairqueue.store.formats.tags import shard_tag
from celery_fairqueue.store.shards.chooser import ShardChooser
from celery_fairqueue.store.shards.placement import account_shard, jump_hash


def test_jump_hash_gives_the_published_buckets():
    # the reference implementation's (Lamping and Veach, 2014) values
    assert [jump_hash(key, 1) for key in (0, 1, 2**63)] == [0, 0, 0]
    assert jump_hash(256, 1024) == 520
    assert jump_hash(0xDEAD10CC, 1) == 0


@given(st.text(max_size=40), st.integers(1, 64), st.integers(1, 64))
def test_growing_the_shards_moves_an_account_only_to_a_new_shard(account, before, more):
    old, new = account_shard(account, before), account_shard(account, before + more)
    assert 0 <= old < before and 0 <= new < before + more
    assert new == old or new >= before


def test_accounts_spread_evenly_over_the_shards():
    counts = Counter(account_shard(f"account-{n}", 16) for n in range(32_000))
    assert len(counts) == 16
    assert max(counts.values()) < 1.1 * 2000 and min(counts.values()) > 0.9 * 2000


def test_an_unsharded_store_keeps_its_one_tag():
    assert Keys("fairqueue").records == "{fairqueue}:records"
    assert Keys("fairqueue", 0).queue("celery").state == "{fairqueue}:queue:celery:state"


def test_shard_tags_are_spread_evenly_over_a_clusters_primaries():
    slots = [key_slot(shard_tag("fairqueue", n).encode()) for n in range(16)]
    assert len(set(slots)) == 16
    for primaries in (1, 2, 3, 4):
        owned = Counter(min(primaries - 1, slot * primaries // REDIS_CLUSTER_HASH_SLOTS)
                        for slot in slots)
        assert max(owned.values()) <= math.ceil(16 / primaries)


def test_a_shards_tag_does_not_depend_on_the_number_of_shards():
    assert Keys("app", 3).tag == "{" + shard_tag("app", 3) + "}"
    assert shard_tag("app", 3).startswith("app.3.")


def test_shares_follow_the_shards_runnable_weights():
    chooser = ShardChooser(3)
    weights, jobs = [1, 2, 4], Counter()
    now = 0.0
    for _ in range(7000):
        shard = chooser.pick(now, set())
        jobs[shard] += 1
        chooser.claimed(shard, 1, weights[shard], None, now)
        now += 0.001
    for shard, entitled in enumerate((1000, 2000, 4000)):
        assert abs(jobs[shard] - entitled) <= 1  # the first turn of each asks it


def test_a_shard_without_work_is_asked_again_when_woken_or_due():
    chooser = ShardChooser(2)
    for shard in (0, 1):
        assert chooser.pick(0.0, set()) == shard
        chooser.claimed(shard, 0, 0, 5.0 if shard else None, 0.0)
    assert chooser.pick(1.0, set()) is None
    assert chooser.next_due(1.0) == 4.0
    assert chooser.pick(5.0, set()) == 1  # its delayed job is due
    chooser.woken(0)
    assert chooser.pick(1.0, set()) == 0
    assert chooser.pick(1.0, {0}) is None


def test_a_shard_back_at_work_banks_no_turns():
    chooser = ShardChooser(2)
    chooser.claimed(0, 0, 1, None, 0.0)
    chooser.claimed(1, 0, 0, None, 0.0)  # idle while shard 0 serves 100 jobs
    for _ in range(100):
        chooser.claimed(0, 1, 1, None, 0.0)
    chooser.woken(1)
    chooser.claimed(1, 1, 1, None, 0.0)
    picks = Counter()
    for _ in range(100):
        shard = chooser.pick(0.0, set())
        picks[shard] += 1
        chooser.claimed(shard, 1, 1, None, 0.0)
    assert abs(picks[0] - picks[1]) <= 2


def test_acks_ride_on_a_claim_of_their_shard_while_it_is_within_a_claim_of_its_pass():
    chooser = ShardChooser(2)
    for shard in (0, 1):
        chooser.claimed(shard, 0, 1, None, 0.0)
    chooser.claimed(1, 4, 1, None, 0.0)  # shard 1 is 4 jobs ahead
    assert chooser.pick(0.0, set()) == 0
    assert chooser.pick(0.0, set(), settling={1}, batch=4) == 1
    assert chooser.pick(0.0, set(), settling={1}, batch=3) == 0  # more than a claim ahead
    picks = Counter()
    for _ in range(800):  # acks always pending for shard 1: shares still hold
        shard = chooser.pick(0.0, set(), settling={1}, batch=4)
        picks[shard] += 4
        chooser.claimed(shard, 4, 1, None, 0.0)
    assert abs(picks[0] - picks[1]) <= 8
