"""The fair store's scripts on a real redis-server: rotation, limits, leases, delays, dedupe."""

import time

import pytest

from celery_fairqueue.errors import BacklogFullError
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.store import FairStore, WorkerRegistration
from celery_fairqueue.store.formats.keys import encode_id
from tests.harness.store_tools import ack_many, claim_jobs, enqueue_many

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
WORKER = WorkerRegistration("celery@test", ("default",), 1)
TOKEN = "worker-a"


def accounts_of(jobs):
    return [job.account for job in jobs]


def drain(store: FairStore, queues=("default",), want=1, limit=NO_LIMIT, token=TOKEN, ack=True):
    """Claim one job at a time until none is ready; returns the accounts in claim order."""
    order = []
    while jobs := claim_jobs(store, list(queues), want, token, limit):
        for job in jobs:
            order.append(job.account)
            if ack:
                store.ack(job)
    return order


def test_whale_burst_does_not_delay_small_accounts(store):
    for n in range(50):
        put(store, "whale", n)
    for account in ("s1", "s2", "s3"):
        for n in range(2):
            put(store, account, n)
    order = drain(store)
    # round robin: each small account's first job is among the first four claims
    assert order[:4] == ["whale", "s1", "s2", "s3"]
    assert order[4:8] == ["whale", "s1", "s2", "s3"]
    assert order[8:] == ["whale"] * 48


def test_each_account_keeps_fifo_order(store):
    ids = [put(store, "acme", n) for n in range(5)]
    claimed = []
    while jobs := claim_jobs(store, ["default"], 2, TOKEN, NO_LIMIT):
        claimed += [j.job_id for j in jobs]
        for j in jobs:
            store.ack(j)
    assert claimed == ids


def test_several_jobs_per_claim_rotate_over_accounts(store):
    for account in ("a", "b", "c"):
        for n in range(3):
            put(store, account, n)
    jobs = claim_jobs(store, ["default"], 7, TOKEN, NO_LIMIT)
    assert accounts_of(jobs) == ["a", "b", "c", "a", "b", "c", "a"]


def test_rate_limited_account_is_deferred_not_failed_and_others_go_on(store):
    store.set_limit("slow", AccountLimit(rate="2/s", burst=1))
    for n in range(5):
        put(store, "slow", n)
        put(store, "fast", n)
    first = drain(store)
    assert first.count("slow") == 1  # one token, then the account is paused
    assert first.count("fast") == 5
    assert store.stats()["deferred"] >= 1
    counts = store.counts("default")
    assert counts["ready"] == 4 and counts["deferred_accounts"] == 1
    time.sleep(0.6)  # about one more token
    assert drain(store) == ["slow"]


def test_rate_limit_holds_over_time(store):
    """20/s with a burst of 1, over 1.5 s: never more than the burst and 20 a second, and a
    claim made when the claim before said the next token is due takes a job. How many of the
    31 possible jobs are taken is the claimer's promptness, not the bucket's: a loaded machine
    claims late, and a burst of 1 keeps no token it did not take."""
    store.set_limit("acme", AccountLimit(rate="20/s", burst=1))
    for n in range(200):
        put(store, "acme", n)
    started = store.server_time()
    claimed = tokens_due = 0
    while store.server_time() - started < 1.5:
        claim = store.claim(["default"], 4, TOKEN, NO_LIMIT)
        claimed += len(claim.leases)
        assert len(claim.leases) <= 1  # the bucket holds one token at most
        if not claim.leases:
            assert claim.next_due is not None and claim.next_due > 0
            time.sleep(claim.next_due + 0.002)  # the token is there by Redis's clock
            assert len(claim_jobs(store, ["default"], 4, TOKEN, NO_LIMIT)) == 1
            claimed, tokens_due = claimed + 1, tokens_due + 1
    elapsed = store.server_time() - started
    assert claimed <= 1 + 20 * elapsed
    assert tokens_due >= 10  # the account was deferred between its tokens, then ran


def test_concurrency_cap_skips_account_until_a_job_settles(store):
    store.set_limit("acme", AccountLimit(concurrency=2))
    for n in range(5):
        put(store, "acme", n)
    jobs = claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT)
    assert len(jobs) == 2
    assert claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT) == []
    store.ack(jobs[0])
    assert len(claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT)) == 1


def test_window_closed_defers_until_it_opens(store):
    now = store.server_time()
    opens = time.strftime("%H:%M", time.gmtime(now + 3 * 3600))
    closes = time.strftime("%H:%M", time.gmtime(now + 4 * 3600))
    store.set_limit("office", AccountLimit(window=f"{opens}-{closes}", tz="UTC"))
    put(store, "office", 1)
    put(store, "anytime", 1)
    assert drain(store) == ["anytime"]
    wake = store.client.zscore(store.keys.queue("default").deferred, "office")
    assert wake == pytest.approx(now + 3 * 3600, abs=60)


def test_raising_a_limit_wakes_a_paused_account_at_once(store):
    store.set_limit("acme", AccountLimit(rate="1/h", burst=1))
    put(store, "acme", 1)
    put(store, "acme", 2)
    assert drain(store) == ["acme"]
    store.set_limit("acme", AccountLimit(rate="100/s", burst=5))
    assert drain(store) == ["acme"]


def test_default_limit_applies_to_accounts_without_their_own(store):
    for n in range(3):
        put(store, "anyone", n)
    default = AccountLimit(concurrency=1).pack(0)
    assert len(claim_jobs(store, ["default"], 3, TOKEN, default)) == 1


def test_delayed_job_waits_in_redis_until_due(store):
    put(store, "acme", 1, due=store.server_time() + 0.4)
    assert claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT) == []
    assert store.counts("default")["delayed"] == 1
    time.sleep(0.5)
    assert accounts_of(claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)) == ["acme"]


def test_expired_lease_returns_job_to_ready_in_its_place(make_store):
    store = make_store(lease_seconds=0.3, heartbeat_interval=0.1)
    first = put(store, "acme", 1)
    put(store, "acme", 2)
    [job] = claim_jobs(store, ["default"], 1, "dead-worker", NO_LIMIT)
    assert job.job_id == first
    time.sleep(0.4)
    assert store.reap() == 1
    [again] = claim_jobs(store, ["default"], 1, "live-worker", NO_LIMIT)
    assert again.job_id == first and again.deliveries == 2
    # the dead worker's late ack does not settle a job it no longer owns
    assert store.ack(job) is False
    assert store.ack(again) is True


def test_heartbeat_keeps_a_running_job_leased(make_store):
    store = make_store(lease_seconds=1.0, heartbeat_interval=0.1)
    put(store, "acme", 1)
    [job] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    for _ in range(5):  # 1.5 s in all, past the lease; a beat may come 0.7 s late
        time.sleep(0.3)
        assert store.heartbeat(TOKEN, WORKER, [job.job_id]) == []
    assert store.reap() == 0
    assert store.heartbeat("someone-else", WORKER, [job.job_id]) == [job.job_id]


def test_requeue_keeps_fifo_place_and_frees_the_cap(store):
    store.set_limit("acme", AccountLimit(concurrency=1))
    first = put(store, "acme", 1)
    put(store, "acme", 2)
    [job] = claim_jobs(store, ["default"], 2, TOKEN, NO_LIMIT)
    assert store.requeue(job)
    [again] = claim_jobs(store, ["default"], 2, TOKEN, NO_LIMIT)
    assert again.job_id == first


def test_same_business_key_is_one_job_until_retention_passes(make_store):
    store = make_store(job_retention=0.5)
    a = store.enqueue(queue="default", account="acme", job_id="t1:0", envelope="{}",
                      job_key="k1")
    b = store.enqueue(queue="default", account="acme", job_id="t2:0", envelope="{}",
                      job_key="k1")
    assert a.created and not b.created and b.task_id == "t1"
    [job] = claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT)
    c = store.enqueue(queue="default", account="acme", job_id="t3:0", envelope="{}",
                      job_key="k1")
    assert not c.created  # running
    store.ack(job)
    d = store.enqueue(queue="default", account="acme", job_id="t4:0", envelope="{}",
                      job_key="k1")
    assert not d.created and d.task_id == "t1"  # done, within retention
    assert 0 < store.client.pttl(store.keys.job_key("k1")) <= 500  # Redis forgets it then
    time.sleep(0.6)
    assert store.marker("k1") is None
    e = store.enqueue(queue="default", account="acme", job_id="t5:0", envelope="{}",
                      job_key="k1")
    assert e.created


def test_same_delivery_stored_twice_is_one_job(store):
    put(store, "acme", 1)
    put(store, "acme", 1)
    assert store.counts("default")["ready"] == 1


def test_named_queues_are_isolated(store):
    put(store, "acme", 1, queue="critical")
    put(store, "acme", 2, queue="default")
    jobs = claim_jobs(store, ["critical"], 5, TOKEN, NO_LIMIT)
    assert [j.queue for j in jobs] == ["critical"]
    jobs = claim_jobs(store, ["critical", "default"], 5, TOKEN, NO_LIMIT)
    assert [j.queue for j in jobs] == ["default"]


def test_poison_job_is_dead_lettered_after_max_deliveries(make_store):
    store = make_store(max_deliveries=2, lease_seconds=30.0)
    job_id = put(store, "acme", 1)
    for _ in range(2):
        [job] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
        store.requeue(job)
    assert claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT) == []
    assert store.client.hexists(store.keys.dead, job_id)
    assert "2 times" in store.client.hget(store.keys.dead, job_id)


HOSTILE_ACCOUNTS = ["*", "{x}", "a|b", "new\nline", "sp ace", "ümlaut-账户", "x" * 1024, "%41",
                    "a:b:c", "-"]


def test_hostile_account_ids_are_safe_and_distinct(store):
    for account in HOSTILE_ACCOUNTS:
        for n in range(2):
            put(store, account, n)
    order = drain(store, want=3)
    assert sorted(order) == sorted(HOSTILE_ACCOUNTS * 2)
    for key in store.client.keys("*"):
        assert key.startswith("{fairqueue}:"), key  # one hash tag: one Cluster slot
        assert "\n" not in key and "*" not in key


def test_settled_jobs_leave_no_per_job_state(store):
    for n in range(20):
        put(store, f"a{n % 4}", n)
    drain(store, want=5)
    c = store.client
    k = store.keys
    qk = store.keys.queue("default")
    assert c.hlen(k.records) == c.zcard(k.leases) == 0
    assert list(c.scan_iter(qk.fifo("*"))) == []  # each FIFO went as it emptied
    assert c.hlen(qk.state) == c.hlen(qk.running) == c.hlen(qk.ndelayed) == 0


def test_bulk_enqueue_and_ack_behave_as_one_call_each(store):
    jobs = [dict(queue="default", account=f"a{n % 3}", job_id=f"t{n}:0", envelope="{}",
                 job_key=f"k{n % 5}") for n in range(10)]
    jobs.append(dict(queue="default", account="later", job_id="late:0", envelope="{}",
                     due=time.time() + 60))
    results = enqueue_many(store, jobs, chunk=4)
    assert [r.created for r in results] == [True] * 5 + [False] * 5 + [True]
    assert results[7].task_id == "t2" and results[-1].delayed
    claimed = claim_jobs(store, ["default"], 10, TOKEN, NO_LIMIT)
    assert sorted(job.job_id for job in claimed) == [f"t{n}:0" for n in range(5)]
    assert ack_many(store, claimed, chunk=2) == [True] * 5
    assert ack_many(store, claimed) == [False] * 5  # settled already
    assert store.counts("default")["running"] == 0


def test_a_job_refused_by_a_backlog_bound_leaves_every_count_as_it_was(make_store):
    store = make_store(max_pending_per_account=2, max_pending=3)

    def pending() -> dict[str, int]:
        qk = store.keys.queue("default")
        counts = {account: store.client.zcard(qk.fifo(encode_id(account)))
                  for account in ("whale", "minnow", "newcomer")}
        return {account: n for account, n in counts.items() if n}

    for n in range(2):
        store.enqueue(queue="default", account="whale", job_id=f"w{n}:0", envelope="{}")
    with pytest.raises(BacklogFullError, match="per_account"):
        store.enqueue(queue="default", account="whale", job_id="w2:0", envelope="{}")
    store.enqueue(queue="default", account="minnow", job_id="m0:0", envelope="{}")
    with pytest.raises(BacklogFullError, match="fairqueue_max_pending "):
        store.enqueue(queue="default", account="newcomer", job_id="n0:0", envelope="{}")
    assert pending() == {"whale": 2, "minnow": 1}  # no count for the refused, none left over
    assert store.client.hlen(store.keys.records) == 3


def test_a_purge_takes_every_accounts_fifo_a_batch_a_round_trip(store):
    """The purge reads the accounts' FIFOs ``batch`` jobs a round trip, shared among a page
    of accounts: a large account among small ones, a paused one and delayed jobs all go; a
    running job stays."""
    for n in range(10):
        put(store, "whale", n)
    for account in ("a", "b", "c", "d", "e"):
        put(store, account, 0)
    put(store, "later", 0, due=time.time() + 60)
    [running] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    store.pause("b", "default")
    batches: list[list[str]] = []
    assert store.purge(["default"], batch=3, on_taken=batches.append) == 15
    assert all(len(batch) <= 3 for batch in batches)
    assert store.counts("default")["ready"] == store.counts("default")["delayed"] == 0
    assert store.client.hkeys(store.keys.records) == [running.job_id]
