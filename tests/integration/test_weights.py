"""Weighted fair share in the claim, on a real redis-server: start-time fair queueing over
virtual tags (claim.lua, join_rotation in lib/rotation.lua)."""

import dataclasses
import json
import time
from collections import Counter

import pytest

from celery_fairqueue import set_account_limit
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import FairStore, open_store
from celery_fairqueue.store.shards.placement import account_shard
from tests.harness import wait_until
from tests.harness.store_tools import claim_jobs, enqueue_many, place_accounts

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-w"


def backlog(store: FairStore, jobs: dict[str, int], start: int = 0) -> None:
    """Enqueue ``jobs[account]`` jobs per account, interleaved (as producers would)."""
    rows = []
    for n in range(start, start + max(jobs.values())):
        for account, count in jobs.items():
            if n - start < count:
                rows.append(dict(queue="default", account=account, job_id=f"{account}-{n}:0",
                                 envelope='{"body": "[[], {}, {}]", "headers": {}}'))
    enqueue_many(store, rows)


def claims(store: FairStore, count: int, want: int = 1) -> list[str]:
    """Claim and ack ``count`` jobs, ``want`` per call; the accounts in claim order."""
    order: list[str] = []
    while len(order) < count:
        jobs = claim_jobs(store, ["default"], want, TOKEN, NO_LIMIT)
        if not jobs:
            break
        for job in jobs:
            order.append(job.account)
            store.ack(job)
    return order[:count]


def test_backlogged_accounts_share_claims_in_proportion_to_their_weights(store):
    for account, weight in (("w1", 1), ("w2", 2), ("w4", 4)):
        store.set_limit(account, AccountLimit(weight=weight))
    backlog(store, {"w1": 700, "w2": 700, "w4": 700})
    counts = Counter(claims(store, 700))
    assert counts == {"w1": 100, "w2": 200, "w4": 400}
    # and in every window of 7 claims, the same 1:2:4 (no long runs of one account)
    order = claims(store, 70, want=3)
    for start in range(0, 70, 7):
        assert Counter(order[start:start + 7]) == {"w1": 1, "w2": 2, "w4": 4}, order


def test_an_account_back_from_idle_gets_its_weighted_share_not_banked_turns(store):
    """C (weight 2) ran, went idle while A and B were served 200 times, then came back: from
    its return it gets 2/4 of the claims, not a burst of the turns it missed (a counter of
    jobs served per weight would give it the next 100 in a row)."""
    store.set_limit("c", AccountLimit(weight=2))
    backlog(store, {"a": 400, "b": 400, "c": 2})
    first = claims(store, 6)
    assert Counter(first)["c"] == 2
    assert Counter(claims(store, 200)) == {"a": 100, "b": 100}  # c idle: no job
    backlog(store, {"c": 200}, start=100)
    after = claims(store, 40)
    assert Counter(after) == {"c": 20, "a": 10, "b": 10}, after
    assert "cc" * 2 not in "".join(after)  # never more than two c's in a row


def test_an_account_that_runs_one_job_at_a_time_does_not_jump_ahead(store):
    """A trickle (one job, served, the next one enqueued) keeps its weight's share: it rejoins
    no earlier than the tag it left with, not at the floor each time."""
    store.set_limit("big", AccountLimit(weight=4))
    backlog(store, {"big": 400})
    order: list[str] = []
    for n in range(50):
        if not order or order[-1] == "trickle":  # its one job ran: the producer sends the next
            backlog(store, {"trickle": 1}, start=n)
        order += claims(store, 1)
    assert 9 <= Counter(order)["trickle"] <= 11, order  # 1/5 of 50, with a turn's slack


def test_a_weight_change_applies_to_waiting_jobs_from_the_next_claim(store):
    backlog(store, {"a": 300, "b": 300})
    assert Counter(claims(store, 20)) == {"a": 10, "b": 10}
    store.set_limit("b", AccountLimit(weight=3))
    after = claims(store, 41)
    assert abs(Counter(after)["b"] - 30) <= 1, after


def test_a_paused_account_takes_no_extra_share_when_it_comes_back(store):
    store.set_limit("heavy", AccountLimit(weight=4))
    backlog(store, {"heavy": 300, "a": 300, "b": 300})
    store.pause("heavy")
    assert set(claims(store, 100)) == {"a", "b"}
    store.resume("heavy")
    after = claims(store, 60)
    assert Counter(after)["heavy"] == 40, after  # 4/6 from its return, not the 100 it missed


def test_virtual_tags_are_shifted_back_when_they_grow_large(store, redis_client):
    store.set_limit("b", AccountLimit(weight=2))
    backlog(store, {"a": 100, "b": 100, "gone": 1})
    claims(store, 7)
    qk = store.keys.queue("default")
    big = 2 ** 52
    before = redis_client.zrange(qk.tags, 0, -1, withscores=True)
    for member, score in before:
        redis_client.zadd(qk.tags, {member: score + big})
    redis_client.zadd(qk.finish, {"gone": big + 3_000_000})
    store.reap()
    after = redis_client.zrange(qk.tags, 0, -1, withscores=True)
    assert [m for m, _ in after] == [m for m, _ in before]
    assert [s for _, s in after] == [s - before[0][1] for _, s in before]
    assert redis_client.zscore(qk.finish, "gone") < 2 ** 40
    assert Counter(claims(store, 30)) == {"a": 10, "b": 20}


def test_an_empty_rotation_leaves_no_virtual_time_behind(store, redis_client):
    backlog(store, {"a": 2, "b": 1})
    claims(store, 10)
    qk = store.keys.queue("default")
    assert not redis_client.exists(qk.tags, qk.finish)


def test_a_claim_that_takes_the_last_job_leaves_no_virtual_time_behind(store, redis_client):
    """The claim that empties the rotation forgets the finish tags, though it took all it
    wanted and popped no further: the next account to join starts virtual time again at 0
    without deleting them itself (an enqueue into an empty queue saves that command)."""
    backlog(store, {"a": 2, "b": 1})
    assert claims(store, 3) == ["a", "b", "a"]
    qk = store.keys.queue("default")
    assert not redis_client.exists(qk.tags, qk.finish)


def test_the_reaper_forgets_finish_tags_an_empty_rotation_was_left_with(store, redis_client):
    """A claim of an earlier release left them (it forgot them only when it popped the empty
    rotation); kept, they would put accounts far behind the new virtual time."""
    qk = store.keys.queue("default")
    backlog(store, {"a": 1})
    claims(store, 1)
    redis_client.zadd(qk.finish, {"a": 7_000_000, "b": 9_000_000})
    store.reap()
    assert not redis_client.exists(qk.finish)



def rings(redis_client, bell: str, run) -> int:
    """How many rings ``run()`` leaves on the doorbell ``bell`` (emptied first)."""
    redis_client.delete(bell)
    run()
    return int(redis_client.zcard(bell))


def test_a_claim_that_takes_the_account_it_promoted_wakes_no_idle_worker(store, redis_client):
    """A rate-limited account alone in its queue (weight 4, as in the issue): each claim that
    brings it back when its token is due and takes its job itself rings nobody (it woke every
    idle worker for nothing, a claim each per token); a claim that brings back more than it
    takes rings once. A token every 0.2 s: the two claims below, back to back, take far less."""
    store.set_limit("limited", AccountLimit(rate="5/s", burst=1, weight=4))
    backlog(store, {"limited": 5})
    assert claims(store, 1) == ["limited"]
    assert claims(store, 1) == []  # no token: deferred, the rotation is empty
    bell = store.keys.queue("default").bell
    for _ in range(3):
        time.sleep(0.21)  # its next token is there
        assert rings(redis_client, bell, lambda: claims(store, 1)) == 0


def test_a_claim_that_brings_back_more_than_it_takes_wakes_the_idle_workers(store,
                                                                             redis_client):
    for account in ("a", "b"):  # a token every 0.5 s: the claims below take far less
        store.set_limit(account, AccountLimit(rate="2/s", burst=1))
    backlog(store, {"a": 3, "b": 3})
    assert sorted(claims(store, 3)) == ["a", "b"]  # each took its token: both deferred
    time.sleep(0.55)  # both tokens are there; a claim of one job leaves the other's
    bell = store.keys.queue("default").bell
    assert rings(redis_client, bell, lambda: claims(store, 1)) == 1


def test_a_rate_limited_account_costs_no_skip_per_token_beside_a_backlogged_one(store,
                                                                                redis_client):
    """Weight 4 brought the limited account back to the front right after each job, with no
    token: every job of it cost the next claim an extra pop and a deferral. Now the job that
    takes its last token defers it at once, keeping its tag: one pop of the rotation per job
    (and one of the job's own account's FIFO)."""
    store.set_limit("limited", AccountLimit(rate="20/s", burst=1, weight=4))
    backlog(store, {"limited": 50, "free": 400})

    def pops() -> int:
        stats = redis_client.info("commandstats")
        return int(stats.get("cmdstat_zpopmin", {}).get("calls", 0))

    before, order = pops(), []
    for _ in range(6):
        order += claims(store, 20)
        time.sleep(0.06)  # a token of the limited account is there
    assert Counter(order)["limited"] >= 6, order
    assert pops() - before == 2 * len(order)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_real_workers_share_in_proportion_to_weights(fair, celery_worker_factory, redis_client,
                                                     figure, workers):
    """Weights 1, 2 and 4, all backlogged, 20 ms jobs, workers of 4 threads: among the first
    700 completions each account's share is within 5 % (relative) of 1/7, 2/7 and 4/7."""
    weights = {"one": 1, "two": 2, "four": 4}
    for account, weight in weights.items():
        set_account_limit(fair.app, account, weight=weight)
    for n in range(450):
        for account in weights:
            fair.job.delay(account, n, 0.02)
    for _ in range(workers):
        celery_worker_factory("tests.apps.fair", concurrency=4)
    assert wait_until(lambda: redis_client.llen("runs") >= 700, timeout=90)
    first = [json.loads(r)["account"] for r in redis_client.lrange("runs", 0, 699)]
    shares = {a: Counter(first)[a] / 700 for a in weights}
    figure(f"weights 1:2:4, {workers} worker(s) x 4 threads, 20 ms jobs, first 700 "
           "completions: " + ", ".join(f"{a} {shares[a]:.4f} (entitled {w / 7:.4f})"
                                       for a, w in weights.items()))
    for account, weight in weights.items():
        assert abs(shares[account] / (weight / 7) - 1) <= 0.05, shares


SHARDS = 16


@pytest.fixture
def sharded_fair(fair, monkeypatch):
    """The fair test app with a store of SHARDS shards (its workers get ``FQ_SHARDS``)."""
    settings = dataclasses.replace(settings_for(fair.app), shards=SHARDS)
    store = open_store(settings)
    monkeypatch.setattr(fair.app, "_fairqueue_settings", settings, raising=False)
    monkeypatch.setattr(fair.app, "_fairqueue_store", store, raising=False)
    yield fair
    store.client.close()


@pytest.mark.slow
@pytest.mark.parametrize("together", [False, True], ids=["three-shards", "one-shard"])
def test_real_workers_share_in_proportion_to_weights_across_shards(
        sharded_fair, celery_worker_factory, redis_client, figure, together):
    """The same 1:2:4 share with the store in 16 shards, two workers claiming from every
    shard: with the three accounts on three shards (the workers' choice of a shard by its
    runnable weight does the weighting) and on one shard (its rotation does). Across shards a
    claim takes its batch (up to 4 jobs here, as slots free together) from one shard, so at
    any cut each share may be a batch per worker off: 8 jobs of the 200 due to weight 2 in
    700 completions, 4 %; hence 1,400."""
    weights = dict(zip(place_accounts(["one", "two", "four"], SHARDS, together), (1, 2, 4),
                       strict=True))
    assert len({account_shard(a, SHARDS) for a in weights}) == (1 if together else 3)
    for account, weight in weights.items():
        set_account_limit(sharded_fair.app, account, weight=weight)
    for n in range(900):
        for account in weights:
            sharded_fair.job.delay(account, n, 0.02)
    for _ in range(2):
        celery_worker_factory("tests.apps.fair", concurrency=4, env={"FQ_SHARDS": str(SHARDS)})
    assert wait_until(lambda: redis_client.llen("runs") >= 1400, timeout=90)
    first = [json.loads(r)["account"] for r in redis_client.lrange("runs", 0, 1399)]
    shares = {a: Counter(first)[a] / 1400 for a in weights}
    where = "one shard" if together else "three shards"
    figure(f"weights 1:2:4 on {where} of {SHARDS}, 2 workers x 4 threads, 20 ms jobs, first "
           "1,400 completions: " + ", ".join(f"{a} {shares[a]:.4f} (entitled {w / 7:.4f})"
                                           for a, w in weights.items()))
    for account, weight in weights.items():
        assert abs(shares[account] / (weight / 7) - 1) <= 0.05, shares
