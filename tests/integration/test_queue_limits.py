"""A queue's shared limit (issue 45, item 1): a quota all its accounts share, checked by the
claim with each account's own, on a real redis-server and real ``celery worker`` processes."""

import itertools
import json
import threading
import time

import pytest

import celery_fairqueue
from celery_fairqueue.errors import InvalidLimitError
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reasons import format_clock, reason_text
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.states import Reason
from celery_fairqueue.store import ConsoleReader, FairStore, WorkerRegistration, open_store
from celery_fairqueue.store.shards.quota import SharedQuotas
from celery_fairqueue.store.shards.reshard import Resharder
from tests.harness import wait_until

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"
NUMBERS = itertools.count()


@pytest.fixture(params=[1, 16], ids=["one-shard", "16-shards"])
def store(request, make_store) -> FairStore:
    """A store of one shard, where the claim keeps the quota, and of 16, where the home grants
    it (store/shards/quota.py)."""
    return make_store(shards=request.param, lease_seconds=30.0)


def fill(store: FairStore, account: str, count: int, queue: str = "linkedin") -> None:
    for _ in range(count):
        put(store, account, next(NUMBERS), queue=queue)


def claim(store: FairStore, queues, want: int):
    """A claim as a worker's dispatcher makes it: again at once while the store says so (a
    sharded store's worker learns of a queue's shared limit, then takes its grant)."""
    for _ in range(3):
        got = store.claim(list(queues), want, TOKEN, NO_LIMIT)
        if got.leases or got.next_due != 0:
            break
    return got


def claim_jobs(store: FairStore, queues, want: int, token=TOKEN, default=NO_LIMIT):
    return claim(store, queues, want).leases


def claim_held(store: FairStore, queues, want: int):
    """Every job claims of ``want`` give, held (not acked), as long as they give any."""
    held = []
    while (got := claim(store, queues, want)).leases:
        held += got.leases
    return held


def claim_all(store: FairStore, queues=("linkedin",), want=50) -> list[tuple[str, str]]:
    taken = []
    while leases := claim_jobs(store, list(queues), want):
        for lease in leases:
            taken.append((lease.queue, lease.account))
            lease.ack()
    return taken


def test_past_a_queues_quota_its_jobs_wait_with_no_attempt_charged_and_other_queues_go_on(store):
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=3))
    for account in ("a", "b", "c", "d"):
        fill(store, account, 5)
        fill(store, account, 2, queue="email")
    taken = claim_all(store, ("linkedin", "email"))
    assert len([t for t in taken if t[0] == "linkedin"]) == 3
    assert len([t for t in taken if t[0] == "email"]) == 8
    counts = store.counts("linkedin")
    assert counts["ready"] == 17 and counts["deferred_accounts"] == 0  # the queue waits
    records = [r for shard in store.shards for r in shard.client.hvals(shard.keys.records)]
    assert records and all(r.split("\n")[0].split(" ")[5] == "0" for r in records)


def test_a_queues_quota_goes_to_its_accounts_in_turn_one_token_at_a_time(store):
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=4))
    for account in ("a", "b", "c", "d"):
        fill(store, account, 3)
    assert sorted(a for _, a in claim_all(store, want=1)) == ["a", "b", "c", "d"]


def test_while_a_queues_quota_binds_its_waiting_accounts_share_it_by_their_weights(store):
    store.set_queue_limit("linkedin", AccountLimit(rate="40/s", burst=1))
    weights = {"one": 1, "two": 2, "four": 4}
    for account, weight in weights.items():
        if weight > 1:
            store.set_limit(account, AccountLimit(weight=weight))
        fill(store, account, 200)
    # 140 jobs, 20 turns of the 1:2:4 order, each claim made when the last said the next
    # token is due: how many a loaded machine's claims take in a given time is not the
    # quota's to say, that it never lets more through is
    taken: list[str] = []
    started = store.server_time()
    while len(taken) < 140:
        got = claim(store, ["linkedin"], 4)
        for lease in got.leases:
            taken.append(lease.account)
            lease.ack()
        if not got.leases:
            assert got.next_due is not None
            time.sleep(got.next_due + 0.002)
    assert len(taken) <= 1 + 40 * (store.server_time() - started)  # 40/s, a token at the start
    shares = {account: taken.count(account) / len(taken) for account in weights}
    for account, weight in weights.items():
        assert shares[account] == pytest.approx(weight / 7, abs=0.02), shares


def test_an_accounts_own_limit_still_binds_under_a_queues_quota_and_takes_no_quota_token(store):
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=3))
    store.set_limit("slow", AccountLimit(rate="1/h", burst=1))
    fill(store, "slow", 3)
    fill(store, "other", 3)
    assert sorted(a for _, a in claim_all(store)) == ["other", "other", "slow"]


def test_a_queues_shared_concurrency_caps_its_running_jobs_and_leaves_slots_to_other_queues(
        store):
    store.set_queue_limit("linkedin", AccountLimit(concurrency=2))
    for account in ("a", "b", "c"):
        fill(store, account, 3)
        fill(store, account, 3, queue="email")
    leases = claim_held(store, ["linkedin", "email"], 20)
    assert sorted(lease.queue for lease in leases) == ["email"] * 9 + ["linkedin"] * 2
    assert claim_jobs(store, ["linkedin"], 5, TOKEN, NO_LIMIT) == []
    next(lease for lease in leases if lease.queue == "linkedin").ack()
    assert [lease.queue for lease in claim_jobs(store, ["linkedin"], 5, TOKEN, NO_LIMIT)] == [
        "linkedin"]


def test_a_shared_concurrency_set_while_jobs_run_counts_them(store):
    for account in ("a", "b"):
        fill(store, account, 4)
    running = claim_jobs(store, ["linkedin"], 3, TOKEN, NO_LIMIT)
    store.set_queue_limit("linkedin", AccountLimit(concurrency=4))
    assert len(claim_jobs(store, ["linkedin"], 10, TOKEN, NO_LIMIT)) == 1
    for lease in running:
        lease.ack()
    assert len(claim_jobs(store, ["linkedin"], 10, TOKEN, NO_LIMIT)) == 3


def test_a_change_of_a_queues_limit_applies_from_the_next_claim(store):
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=1))
    fill(store, "a", 4)
    assert len(claim_all(store)) == 1
    store.set_queue_limit("linkedin", AccountLimit(rate="100/s", burst=10))
    assert len(claim_all(store)) == 3
    store.set_queue_limit("linkedin", None)
    assert store.queue_limit("linkedin") is None


@pytest.fixture
def app_store(fair, redis_client):
    return fair.app, celery_fairqueue.store_for(fair.app)


def test_set_queue_limit_through_the_public_api(app_store):
    app, store = app_store
    celery_fairqueue.set_queue_limit(app, "linkedin", rate="1000/m", burst=50, concurrency=50)
    assert celery_fairqueue.get_queue_limit(app, "linkedin") == AccountLimit(
        rate="1000/m", burst=50, concurrency=50)
    assert list(store.queue_limits()) == [("linkedin", AccountLimit(rate="1000/m", burst=50,
                                                                   concurrency=50))]
    assert list(store.limits()) == [] and list(store.limits_in_queues()) == []
    celery_fairqueue.clear_queue_limit(app, "linkedin")
    assert celery_fairqueue.get_queue_limit(app, "linkedin") is None


@pytest.mark.parametrize(("fields", "field"), [
    ({"rate": "1000/fortnight"}, "rate"), ({"burst": -5}, "burst"),
    ({"concurrency": 0}, "concurrency"), ({"rate": "nan/s"}, "rate")])
def test_a_bad_queue_limit_names_the_queue_and_the_field_and_changes_nothing(
        app_store, redis_client, fields, field):
    app, _ = app_store
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}
    with pytest.raises(InvalidLimitError, match=rf"queue 'linkedin'.*{field}"):
        celery_fairqueue.set_queue_limit(app, "linkedin", **fields)
    with pytest.raises(InvalidLimitError, match="queue"):
        celery_fairqueue.set_queue_limit(app, "x" * 2000, rate="1/s")
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == before


def test_a_sharded_stores_queue_quota_is_kept_at_its_home_and_copied_to_every_shard(
        make_store):
    sharded = make_store(shards=4, lease_seconds=30.0)
    sharded.set_queue_limit("linkedin", AccountLimit(rate="5/s"))
    assert [(q, limit.rate) for q, limit in sharded.queue_limits()] == [("linkedin", "5/s")]
    assert all(shard.queue_limit("linkedin") == AccountLimit(rate="5/s")
               for shard in sharded.shards)
    sharded.set_queue_limit("linkedin", None)
    assert not any(shard.queue_limit("linkedin") for shard in sharded.shards)


def test_a_worker_whose_every_queue_waits_for_a_grant_comes_back_for_the_token_not_at_once(
        make_store):
    """A shard's due time (a delayed job, due now) is the grant's to wait for too: asked at
    once, the claim would find the grant still dry, again and again (a busy loop)."""
    store = make_store(shards=16, lease_seconds=30.0)
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=1))
    fill(store, "a", 2)
    put(store, "b", 1, queue="linkedin", due=time.time() + 0.3)
    assert len(claim_all(store)) == 1  # the one token
    time.sleep(0.4)  # the delayed job's shard is due
    got = store.claim(["linkedin"], 4, TOKEN, NO_LIMIT)
    assert not got.leases and got.next_due is not None and got.next_due > 3000, got.next_due


def test_a_worker_of_two_queues_asks_one_shard_a_claim_while_the_others_quota_binds(
        make_store, monkeypatch):
    """The shards whose only work waits for a grant the worker does not hold are not asked
    for the other queue's jobs (13 shard claims a claim at 16 shards before, chooser.py)."""
    store = make_store(shards=16, lease_seconds=30.0)
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=1))
    for n in range(32):
        put(store, f"acct{n}", n, queue="linkedin")
    fill(store, "mailer", 60, queue="email")
    asked = []
    claim_on_shard = FairStore.claim
    monkeypatch.setattr(FairStore, "claim", lambda shard, *args, **kwargs: (
        asked.append(shard.keys.tag), claim_on_shard(shard, *args, **kwargs))[1])
    per_claim = []
    for _ in range(20):
        asked.clear()
        for lease in store.claim(["linkedin", "email"], 2, TOKEN, NO_LIMIT).leases:
            lease.ack()
        per_claim.append(len(asked))
    assert max(per_claim[4:]) <= 2, per_claim  # past the first claims, which learn the shards


def test_a_home_that_cannot_grant_stops_only_the_limited_queue_with_a_warning(make_store,
                                                                              caplog):
    """An error reply at the home (here WRONGTYPE: its counts key is a string) is a warning;
    the queue with a shared limit waits a second, the other queue's jobs are claimed."""
    store = make_store(shards=16, lease_seconds=30.0)
    store.set_queue_limit("linkedin", AccountLimit(concurrency=2))
    fill(store, "a", 3)
    fill(store, "a", 3, queue="email")
    store.client.set(store.keys.quotas, "not a hash")
    with caplog.at_level("WARNING"):
        held = claim_held(store, ["linkedin", "email"], 8)
    assert sorted(lease.queue for lease in held) == ["email"] * 3
    assert "could not grant jobs of the queues' shared limits" in caplog.text
    store.client.delete(store.keys.quotas)
    assert [lease.queue for lease in claim_held(store, ["linkedin"], 8)] == ["linkedin"] * 2


def test_a_sharded_quotas_running_count_forgets_a_dead_worker_and_one_that_left(make_store):
    """The home counts each worker's running jobs as it reports them (quota.py): a worker
    that stops beating, or leaves, runs none any more, and its count goes with its
    registration."""
    store = make_store(shards=16, lease_seconds=30.0, heartbeat_interval=0.1)
    store.set_queue_limit("linkedin", AccountLimit(concurrency=2))
    for account in ("a", "b", "c", "d"):
        fill(store, account, 3)
    for worker in ("dead", "gone"):  # each its own view of the quotas, as its own process
        store.register_worker(worker, WorkerRegistration("celery@test", ("linkedin",), 4))
        store.quotas = SharedQuotas(store)
        held = [lease for _ in range(3)
                for lease in store.claim(["linkedin"], 4, worker, NO_LIMIT).leases]
        assert len(held) == 2 and running_under_quota(store, "linkedin") == 2
        if worker == "gone":
            store.unregister_worker(worker)
        else:
            time.sleep(0.5)  # past its registration (3 beats of 0.1 s)
            store.reap()
        assert running_under_quota(store, "linkedin") == 0


def test_a_reshard_keeps_a_queue_quotas_bucket_and_its_jobs_keep_to_it_on_the_new_shards(
        redis_server, redis_client):
    """The quota spans the move: the tokens one shard's claims took are not given again by the
    home's grants on 4 (the bucket is the same field at the home before and after)."""
    settings = FairqueueSettings(redis_url=redis_server.url, shards=1, lease_seconds=30.0,
                                 shards_check_interval=0.1)
    one = open_store(settings)
    one.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=8))
    for account in ("a", "b", "c", "d", "e", "f"):
        fill(one, account, 3)
    taken = claim_jobs(one, ["linkedin"], 3)
    for lease in taken:
        lease.ack()  # no job held: the reshard moves every account
    assert len(taken) == 3
    Resharder(settings, 4, settle=0).run()
    time.sleep(0.2)  # past fairqueue_shards_check_interval: the store reads its 4 shards
    assert len(claim_all(one, want=2)) == 5  # 8 - 3, on whichever shards they live
    assert redis_client.get("{fairqueue}:shards") == "4"
    assert [(q, limit.burst) for q, limit in one.queue_limits()] == [("linkedin", 8)]


@pytest.fixture(params=[1, 16], ids=["one-shard", "16-shards"])
def shards(request, fair):
    """The fair app's store of one shard or of 16 (its workers told so by FQ_SHARDS)."""
    fair.app.conf.fairqueue_shards = request.param
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        fair.app.__dict__.pop(cached, None)
    yield request.param
    fair.app.conf.fairqueue_shards = 1
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        fair.app.__dict__.pop(cached, None)


def running_under_quota(store, queue: str) -> int:
    """The queue's jobs running under its shared limit, as the store counts them: the claim's
    count on one shard, the workers' reports at the home of a sharded one."""
    return store.quota_readings([queue])[queue][1]


@pytest.mark.slow
def test_a_queue_quota_of_concurrency_4_on_16_threads_never_runs_more_than_4_of_its_jobs(
        fair, shards, celery_worker_factory, redis_client):
    """Real workers: sampled from the tasks themselves (the ledger's start and end times) and
    from the store; the other queue keeps the free threads."""
    celery_fairqueue.set_queue_limit(fair.app, "linkedin", concurrency=4)
    store = celery_fairqueue.store_for(fair.app)
    env = {"FQ_SHARDS": str(shards)}
    for _ in range(2):  # both ready before the jobs come: the 16 threads are there for them
        celery_worker_factory("tests.apps.fair", queues=["linkedin", "email"], concurrency=8,
                              env=env)
    sampled: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sampled.append(running_under_quota(store, "linkedin"))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for n in range(40):
            fair.job.apply_async(args=(f"acct{n % 8}", n, 0.1), queue="linkedin")
        for n in range(1000, 1120):
            fair.job.apply_async(args=(f"acct{n % 8}", n, 0.1), queue="email")
        wait_until(lambda: redis_client.llen("runs") >= 160, timeout=60)
    finally:
        done.set()
        sampler.join()
    assert redis_client.llen("runs") == 160, redis_client.llen("runs")
    assert sampled
    runs = [json.loads(r) for r in redis_client.lrange("runs", 0, -1)]
    linkedin = [(r["start"], r["end"]) for r in runs if int(r["key"].split(":")[1]) < 1000]
    edges = sorted([(s, 1) for s, _ in linkedin] + [(e, -1) for _, e in linkedin])
    overlap = max(itertools.accumulate(step for _, step in edges))
    assert overlap <= 4 and max(sampled) <= 4, (overlap, max(sampled))
    assert overlap >= 3, overlap  # it used what it may (4; 3 leaves room for a loaded machine)
    email = [(r["start"], r["end"]) for r in runs if int(r["key"].split(":")[1]) >= 1000]
    edges = sorted([(s, 1) for s, _ in email] + [(e, -1) for _, e in email])
    # the other queue had the free threads (12 of 16; 8 leaves room for a loaded machine)
    email_overlap = max(itertools.accumulate(step for _, step in edges))
    assert email_overlap >= 8, email_overlap
    assert wait_until(lambda: not running_under_quota(store, "linkedin"), timeout=10)


def test_the_console_says_an_account_waits_for_its_queues_shared_limit_and_its_next_token(store):
    store.register_worker("w1", WorkerRegistration("celery@test", ("linkedin",), 4))
    store.set_queue_limit("linkedin", AccountLimit(rate="60/h", burst=1))
    fill(store, "a", 2)
    fill(store, "b", 2)
    assert len(claim_all(store)) == 1
    state = next(s for s in (ConsoleReader(store).account_state(a, ["linkedin"])[0]
                             for a in ("a", "b")) if s.ready)
    assert state.reason == Reason.QUEUE_QUOTA and state.until is not None
    assert 0 < state.until - state.server_time <= 60
    assert reason_text(state) == ("queue linkedin is at its shared limit of 60/h; next token "
                                  f"{format_clock(state.until)}")
    assert Reason.QUEUE_QUOTA.label == "Waiting: its queue is at its shared limit"


def test_the_console_says_an_account_waits_for_its_queues_shared_concurrency(store):
    store.register_worker("w1", WorkerRegistration("celery@test", ("linkedin",), 4))
    store.set_queue_limit("linkedin", AccountLimit(concurrency=1))
    fill(store, "a", 2)
    assert len(claim_jobs(store, ["linkedin"], 5, TOKEN, NO_LIMIT)) == 1
    [state] = ConsoleReader(store).account_state("a", ["linkedin"])
    assert (state.reason, reason_text(state)) == (
        Reason.QUEUE_QUOTA, "queue linkedin is at its shared concurrency: 1 of 1 running")


def test_the_deferral_metric_counts_each_reason_a_queue_quota_among_them(fair, redis_client):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from celery_fairqueue.metrics import METRIC_NAMES, make_registry

    store = celery_fairqueue.store_for(fair.app)
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=1))
    store.set_limit("slow", AccountLimit(rate="1/h", burst=1))
    fill(store, "a", 3)
    fill(store, "slow", 3, queue="email")
    claim_all(store, ("linkedin", "email"), want=1)
    text = generate_latest(make_registry(fair.app)).decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert {s.name for s in samples} <= METRIC_NAMES
    deferrals = {s.labels["reason"]: s.value for s in samples
                 if s.name == "fairqueue_deferrals_total"}
    assert set(deferrals) == {"rate_limited", "window_closed", "concurrency_cap", "slowed",
                              "queue_quota"}
    assert deferrals["rate_limited"] >= 1 and deferrals["queue_quota"] >= 1
