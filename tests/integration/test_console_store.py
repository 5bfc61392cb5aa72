"""The store side of the support console on a real redis-server: operator pause and resume, run
now, the worker registry and the account's live state with its reason in words."""

from datetime import UTC, datetime

import pytest

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reasons import reason_text
from celery_fairqueue.store import ConsoleReader, FairStore, StoreInspector, WorkerRegistration
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.formats.records import JobRecord, ReadyMember
from tests.harness import wait_until
from tests.harness.store_tools import claim_jobs

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"


class Inspector(StoreInspector):
    """A StoreInspector on a test store (StoreInspector itself takes a Celery app)."""

    def __init__(self, store: FairStore) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys
        self.console = ConsoleReader(store)


def claimed_accounts(store, queues=("default",), want=10, limit=NO_LIMIT):
    return [job.account for job in claim_jobs(store, list(queues), want, TOKEN, limit)]


def drain(store, queues=("default",), limit=NO_LIMIT):
    """Claim and ack one job at a time until none is handed out; the accounts in order."""
    order = []
    while jobs := claim_jobs(store, list(queues), 1, TOKEN, limit):
        for job in jobs:
            order.append(job.account)
            store.ack(job)
    return order


def live(store, queues=("default",)):
    """Register a live worker consuming ``queues``, so no state reads "no_worker"."""
    store.register_worker("w1", WorkerRegistration("celery@test", tuple(queues), 4))


def state_of(store, account, queue="default"):
    [state] = Inspector(store).console.account_state(account, [queue])
    return state


def test_paused_account_keeps_its_jobs_ready_and_others_run(store):
    for n in range(3):
        put(store, "paused", n)
        put(store, "other", n)
    pause = store.pause("paused", "default", by="alice", reason="customer asked")
    assert drain(store) == ["other"] * 3
    counts = store.counts("default")
    assert counts["ready"] == 3 and counts["deferred_accounts"] == 0
    assert counts["paused_accounts"] == 1  # paused by an operator, not deferred
    assert store.stats().get("deferred", 0) == 0
    records = [JobRecord.parse(r) for r in store.client.hvals(store.keys.records)]
    assert [r.deliveries for r in records] == [0] * 3  # no attempt charged
    assert (pause.by, pause.reason, pause.account, pause.queue) == (
        "alice", "customer asked", "paused", "default")
    assert abs(pause.at - store.server_time()) < 60  # Redis server time


def test_resume_lets_the_account_rotate_again(store):
    for n in range(2):
        put(store, "acme", n)
    store.pause("acme")  # in every queue
    assert drain(store) == []
    put(store, "acme", 2)  # enqueued while paused: waits with the others
    assert store.resume("acme") is True
    assert drain(store) == ["acme"] * 3
    assert store.resume("acme") is False  # nothing left to resume


def test_a_pause_everywhere_outlives_the_end_of_a_pause_in_one_queue(store):
    put(store, "acme", 1)
    store.pause("acme", "default")
    store.pause("acme")
    assert drain(store) == []
    store.resume("acme", "default")
    assert drain(store) == []
    store.resume("acme")
    assert drain(store) == ["acme"]


def test_a_paused_queue_hands_out_nothing_until_resumed_and_other_queues_run(store):
    put(store, "acme", 1)
    put(store, "acme", 2, queue="critical")
    store.pause(queue="default", by="bob")
    assert drain(store, ("default", "critical")) == ["acme"]
    assert store.counts("default")["ready"] == 1
    [pause] = store.pauses()
    assert (pause.scope, pause.queue, pause.by) == ("queue", "default", "bob")
    store.resume(queue="default")
    assert drain(store, ("default", "critical")) == ["acme"]


def test_pausing_twice_keeps_the_first_pause(store):
    first = store.pause("acme", by="alice", reason="one")
    again = store.pause("acme", by="bob", reason="two")
    assert (again.by, again.reason, again.at) == ("alice", "one", first.at)


@pytest.mark.parametrize("account", ["a b", "é\U0001f600", "\ud800x", "a:b*", "q:x", "%41"])
def test_hostile_account_ids_pause_and_resume_through_the_encoding(store, account):
    put(store, account, 1)
    put(store, "%2541", 1)  # what "%41" would be if it were encoded twice
    store.pause(account, by="a b\ud800", reason="x|y\n")
    live(store)
    state = state_of(store, account)
    assert (state.reason, state.paused_by, state.pause_reason) == ("paused", "a b\\ud800",
                                                                   "x|y\n")
    assert drain(store) == ["%2541"]
    [pause] = store.pauses()
    assert pause.account == account
    assert store.resume(account) is True
    assert drain(store) == [account]


def test_run_now_makes_a_delayed_job_ready(store):
    job_id = put(store, "acme", 1, due=store.server_time() + 3600)
    assert drain(store) == []
    assert store.run_now(job_id.rsplit(":", 1)[0]) == [job_id]  # the Celery task id
    assert store.run_now(job_id) == []  # ready now: nothing delayed to move
    assert drain(store) == ["acme"]


def test_run_now_still_obeys_the_rate_limit(store):
    live(store)
    store.set_limit("acme", AccountLimit(rate="1/h", burst=1))
    put(store, "acme", 1)
    delayed = put(store, "acme", 2, due=store.server_time() + 3600)
    assert drain(store) == ["acme"]  # the one token
    assert store.run_now(delayed) == [delayed]
    assert drain(store) == []
    state = state_of(store, "acme")
    assert state.reason == "rate_limited"
    assert state.deferred == 1 and state.delayed_future == 0
    assert reason_text(state).startswith("rate limit: next token in ")
    assert state.until is not None and state.until > state.server_time + 3000


def test_account_state_says_window_closed_until_reopening(store):
    live(store)
    hour = datetime.now(UTC).hour
    window = f"{(hour + 3) % 24:02d}:00-{(hour + 4) % 24:02d}:00"
    store.set_limit("acme", AccountLimit(window=window, tz="Europe/Berlin"))
    put(store, "acme", 1)
    assert drain(store) == []
    state = state_of(store, "acme")
    assert state.reason == "window_closed"
    assert state.limit == AccountLimit(window=window, tz="Europe/Berlin")
    assert not state.limit_is_default
    assert state.until is not None
    opening = datetime.fromtimestamp(state.until, UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert reason_text(state) == f"window closed until {opening:%H:%M} Europe/Berlin"
    assert state.deferred == 1 and state.ready == 0
    assert state.oldest_waiting is not None  # a deferred job waits too


def test_account_state_says_concurrency_cap_with_the_running_count(store):
    live(store)
    store.set_limit("acme", AccountLimit(concurrency=2))
    for n in range(3):
        put(store, "acme", n)
    assert claimed_accounts(store) == ["acme", "acme"]
    state = state_of(store, "acme")
    assert (state.reason, reason_text(state)) == ("concurrency_cap",
                                                  "concurrency cap: 2 of 2 running")
    assert (state.ready, state.running) == (1, 2)


def test_account_state_says_no_worker_consumes_this_queue(store):
    put(store, "acme", 1)
    assert state_of(store, "acme").reason == "no_worker"
    live(store, ("critical",))
    assert reason_text(state_of(store, "acme")) == "no worker consumes this queue"
    live(store, ("default",))
    state = state_of(store, "acme")
    assert (state.reason, state.ready, state.limit, state.limit_is_default) == (
        "runnable", 1, None, True)


def test_account_state_with_nothing_waiting_says_no_ready_jobs(store):
    live(store)
    put(store, "acme", 1, due=store.server_time() + 3600)
    state = state_of(store, "acme")
    assert (state.reason, reason_text(state)) == ("no_ready_jobs", "no ready jobs")
    assert (state.delayed_future, state.delayed_due, state.oldest_waiting) == (1, 0, None)


def test_account_state_names_the_default_limit_when_the_account_has_none(make_store):
    store = make_store(default_concurrency=1)
    live(store)
    put(store, "acme", 1)
    put(store, "acme", 2)
    assert claimed_accounts(store, limit=store.settings.default_limit.pack(0)) == ["acme"]
    state = state_of(store, "acme")
    assert state.limit == AccountLimit(concurrency=1) and state.limit_is_default
    assert state.reason == "concurrency_cap"


def test_oldest_waiting_counts_ready_and_due_delayed_jobs_not_future_ones(store):
    inspector = Inspector(store)
    start = store.server_time()
    put(store, "far", 1, due=start + 3600)
    assert inspector.console.queue_oldest_waiting() == {"default": None}
    due = start + 0.3
    put(store, "soon", 1, due=due)
    assert wait_until(lambda: store.server_time() > due, timeout=10)
    assert inspector.console.queue_oldest_waiting()["default"] == pytest.approx(due, abs=1e-3)
    state = state_of(store, "soon")
    assert (state.delayed_due, state.oldest_waiting) == (1, pytest.approx(due, abs=1e-3))
    put(store, "now", 1)
    drain(store)  # promotes "soon" (ready since its due time) and runs both
    assert inspector.console.queue_oldest_waiting() == {"default": None}


def test_oldest_waiting_of_a_queue_is_its_oldest_ready_job_and_moves_on_when_claimed(store):
    inspector = Inspector(store)
    put(store, "a", 1)
    first = inspector.console.queue_oldest_waiting()["default"]
    put(store, "b", 1)
    assert inspector.console.queue_oldest_waiting()["default"] == first
    assert inspector.console.oldest_accounts("default", top=5) == [
        ("a", first), ("b", pytest.approx(first, abs=5))]
    claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    assert inspector.console.queue_oldest_waiting()["default"] > first


def test_cancel_takes_a_job_out_of_the_console_views_too(store):
    inspector = Inspector(store)
    job_id = put(store, "acme", 1)
    put(store, "acme", 2, due=store.server_time() + 3600)
    assert store.cancel(job_id) == [job_id]  # a delivery id as the console shows it
    assert store.cancel("acme-2") == ["acme-2:0"]
    assert inspector.console.queue_oldest_waiting() == {"default": None}
    assert inspector.console.live_jobs("acme") == []
    assert state_of(store, "acme").delayed_future == 0


def test_live_jobs_lists_running_ready_and_delayed_jobs_of_the_account(store):
    inspector = Inspector(store)
    for n in range(3):
        put(store, "acme", n)
    put(store, "other", 1)
    later = store.server_time() + 3600
    put(store, "acme", 9, due=later)
    [running] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    jobs = inspector.console.live_jobs("acme")
    assert [(j.job_id, j.state) for j in jobs] == [
        (running.job_id, "running"), ("acme-1:0", "ready"), ("acme-2:0", "ready"),
        ("acme-9:0", "delayed")]
    assert jobs[-1].due == pytest.approx(later, abs=1e-3)
    assert all(j.since is not None for j in jobs[:3]) and jobs[-1].since is None
    assert {j.task for j in jobs} == {"t"} and jobs[0].task_id == "acme-0"
    assert len(inspector.console.live_jobs("acme", limit=2)) == 2


def test_dead_worker_leaves_the_registry(make_store):
    store = make_store(heartbeat_interval=0.2, lease_seconds=1.0)
    inspector = Inspector(store)
    beat = store.register_worker("w1", WorkerRegistration("celery@a", ("default", "x"), 3))
    store.register_worker("w2", WorkerRegistration("celery@b", ("default",), 1))
    [a, _] = inspector.console.workers()
    assert (a.name, a.queues, a.slots, a.heartbeat) == ("celery@a", ("default", "x"), 3, beat)
    assert inspector.console.consumers() == {"default": 2, "x": 1}
    store.unregister_worker("w2")  # a clean shutdown leaves at once
    assert [w.name for w in inspector.console.workers()] == ["celery@a"]
    # w1 stops beating (killed): it is gone once its registration expires
    assert wait_until(lambda: inspector.console.workers() == [], timeout=10)
    store.register_worker("w3", WorkerRegistration("celery@c", ("default",), 1))
    assert store.client.hkeys(store.keys.worker_info) == ["w3"]  # the dead one was dropped


def test_heartbeat_extends_leases_and_renews_the_registration_in_one_call(store):
    put(store, "acme", 1)
    [job] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    registration = WorkerRegistration("celery@a", ("default",), 2)
    assert store.heartbeat(TOKEN, registration, [job.job_id, "gone:0"]) == ["gone:0"]
    assert [w.id for w in Inspector(store).console.workers()] == [TOKEN]
    assert store.heartbeat(TOKEN, registration, []) == []


def test_metrics_show_oldest_waiting_age_per_queue_and_for_the_top_accounts(fair, redis_client):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from celery_fairqueue.metrics import METRIC_NAMES, make_registry
    from celery_fairqueue.store import store_for

    fair_store = store_for(fair.app)
    accounts = [f"acct{n:02d}" for n in range(11)] + ["\ud800 x"]
    for account in accounts:
        put(fair_store, account, 1, queue="celery")
    put(fair_store, "later", 1, queue="critical", due=fair_store.server_time() + 3600)
    fair_store.pause("acct00", by="ops")
    text = generate_latest(make_registry(fair.app)).decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert {s.name for s in samples} <= METRIC_NAMES
    queue_age = {s.labels["queue"]: s.value for s in samples
                 if s.name == "fairqueue_oldest_waiting_age_seconds"}
    assert set(queue_age) == {"celery", "critical"}
    assert queue_age["critical"] == 0 and queue_age["celery"] >= 0  # a future eta is not waiting
    per_account = [s.labels for s in samples
                   if s.name == "fairqueue_account_oldest_waiting_age_seconds"]
    top = fair_store.settings.metrics_top_accounts
    assert len(per_account) == top == 10  # bounded: 12 accounts wait, the 10 oldest are shown
    assert [labels["account"] for labels in per_account] == accounts[:10]  # oldest first
    reasons = {labels["account"]: labels["reason"] for labels in per_account}
    assert reasons["acct00"] == "paused" and reasons["acct01"] == "no_worker"
    workers = {s.labels.get("queue"): s.value for s in samples
               if s.name == "fairqueue_queue_workers"}
    assert workers == {"celery": 0, "critical": 0}
    assert [s.value for s in samples if s.name == "fairqueue_operator_pauses"] == [1]


def test_a_lone_surrogate_account_is_a_valid_metric_label(fair, redis_client):
    from prometheus_client import generate_latest

    from celery_fairqueue.metrics import make_registry
    from celery_fairqueue.store import store_for

    put(store_for(fair.app), "\ud800 x", 1, queue="celery")
    text = generate_latest(make_registry(fair.app)).decode()
    assert 'account="\\\\ud800 x"' in text


def test_the_accounts_listing_shows_an_operator_pause_as_paused(store):
    put(store, "acme", 1)
    store.pause("acme")
    claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    [row] = Inspector(store).accounts().rows
    assert (row.account, row.state, row.ready) == ("acme", "paused", 1)


def test_an_expired_job_dropped_at_claim_leaves_the_console_views(store):
    inspector = Inspector(store)
    put(store, "acme", 1, expires=store.server_time() + 0.2)
    assert wait_until(lambda: store.server_time()
                      > inspector.console.queue_oldest_waiting()["default"] + 0.2, timeout=10)
    claim = store.claim(["default"], 1, TOKEN, NO_LIMIT)
    assert [job.job_id for job in claim.expired] == ["acme-1:0"]
    assert inspector.console.queue_oldest_waiting() == {"default": None}
    assert inspector.console.live_jobs("acme") == []


@pytest.mark.parametrize("queue", ["q é:*", "a|b {c}", "\udcff-q"])
def test_hostile_queue_names_pause_and_resume_through_the_encoding(store, queue):
    put(store, "acme", 1, queue=queue)
    put(store, "acme", 2, queue="default")
    store.pause(queue=queue, by="ops")
    store.pause("acme", queue)
    assert drain(store, (queue, "default")) == ["acme"]  # only the default queue's job
    pauses = {p.scope: p for p in store.pauses()}
    assert (pauses["queue"].queue, pauses["queue"].account) == (queue, None)
    assert (pauses["account"].account, pauses["account"].queue) == ("acme", queue)
    assert store.resume(queue=queue) is True
    assert drain(store, (queue,)) == []  # the account's own pause there still holds it
    assert store.resume("acme", queue) is True
    assert drain(store, (queue,)) == ["acme"]


def test_the_claim_records_why_it_deferred_an_account_and_clears_it_when_it_runs(store):
    """The reason and until when are written where the claim decides them (claim.lua) and the
    console reads them; the record goes when the account runs again."""
    from celery_fairqueue.store.formats.records import Deferral
    live(store)
    store.set_limit("acme", AccountLimit(rate="1/s", burst=1))
    for n in range(2):
        put(store, "acme", n)
    assert drain(store) == ["acme"]
    deferrals = store.keys.queue("default").deferrals
    record = Deferral.parse(store.client.hget(deferrals, "acme"))
    assert record.reason == "rate_limited" and record.until is not None
    state = state_of(store, "acme")
    assert (state.reason, state.until) == ("rate_limited", record.until)
    [row] = Inspector(store).accounts().rows
    assert (row.state, row.reason, row.deferred_until) == ("deferred", "rate_limited",
                                                           record.until)
    assert wait_until(lambda: drain(store) == ["acme"], timeout=5)
    assert store.client.hget(deferrals, "acme") is None  # it ran: no longer deferred
    store.set_limit("acme", AccountLimit(concurrency=1))
    put(store, "acme", 3)
    put(store, "acme", 4)
    assert claimed_accounts(store) == ["acme"]
    assert Deferral.parse(store.client.hget(deferrals, "acme")) == Deferral(
        "concurrency_cap", None)
    status = Inspector(store).status()
    assert status.queues[0].accounts_deferred == 1  # capped: deferred until a job ends
    assert store.counts("default")["deferred_accounts"] == 1


@pytest.mark.parametrize("page", [1000, 7, 1])
def test_the_heads_read_finds_every_accounts_first_job(store, monkeypatch, page):
    """The heads read (the state hash in HSCAN pages of ``page``, each page's FIFOs read the
    round trip after) finds each account's first job once, also of accounts whose ids begin
    with another's, and the ready count adds up every FIFO once: more accounts than a
    listpack hash holds (128), so HSCAN returns the hash in pages."""
    from celery_fairqueue.store.shards import fifos

    monkeypatch.setattr(fifos, "FIFO_PAGE", page)
    accounts = ["a", "a-", "a~b", "a|", "ab", "b", "b}"] + [f"n{n}" for n in range(150)]
    for n, account in enumerate(accounts):
        for k in range(n % 3 + 1):
            put(store, account, k)
    qk = store.keys.queue("default")
    expected = sorted(
        (ReadyMember.parse(store.client.zrange(qk.fifo(encode_id(account)), 0, 0)[0]
                           ).ready_since, account) for account in accounts)
    assert sorted(ConsoleReader(store)._heads("default")) == expected
    assert store.counts("default")["ready"] == sum(n % 3 + 1 for n in range(len(accounts)))
