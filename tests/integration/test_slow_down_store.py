"""Issue 47 in the store: a retry whose failure said "slow down" holds its scope, in the same
enqueue call that stores the retry; the claim defers the account (or skips the queue) until the
hold ends, with no attempt charged. On a real redis-server, no worker (the claims by hand)."""

import itertools
import time

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.states import DeferReason
from celery_fairqueue.store import FairStore
from celery_fairqueue.store.formats.keys import slow_down_field
from celery_fairqueue.store.formats.records import Deferral, JobRecord
from tests.harness.store_tools import claim_jobs

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"
NUMBERS = itertools.count()


def fill(store: FairStore, account: str, count: int, queue: str = "default") -> None:
    for _ in range(count):
        put(store, account, next(NUMBERS), queue=queue)


def retry_slowed(store: FairStore, account: str, seconds: float, scope: str = "account",
                 queue: str = "default", cause: str = "429") -> str:
    """The retry a worker stores for a job that got a 429 with Retry-After: ``seconds``."""
    task_id = f"{account}-got-429-{next(NUMBERS)}"
    envelope = Envelope(body='[[], {}, {}]', headers={"task": "t", "id": task_id,
                                                      "fairqueue_account": account})
    store.enqueue(queue=queue, account=account, job_id=delivery_id(task_id, 1),
                  envelope=envelope.to_json(), due=time.time() + seconds, dedupe=False,
                  slow_down=(scope, seconds, cause))
    return task_id


def claim_all(store: FairStore, queues=("default",)) -> list[tuple[str, str]]:
    taken = []
    while leases := claim_jobs(store, list(queues), 50, TOKEN, NO_LIMIT):
        for lease in leases:
            taken.append((lease.queue, lease.account))
            store.ack(lease)
    return taken


def end_holds(store: FairStore, queue: str = "default") -> None:
    """Move every hold's end into the past, and the deferrals it made, as time would (no
    sleeping through it)."""
    for field, raw in store.client.hgetall(store.keys.pauses).items():
        if field[:2] in ("s:", "S:"):
            store.client.hset(store.keys.pauses, field, "1.0 " + raw.split(" ", 1)[1])
    qk = store.keys.queue(queue)
    for account, raw in store.client.hgetall(qk.deferrals).items():
        if Deferral.parse(raw).reason == DeferReason.SLOWED:
            store.client.zadd(qk.deferred, {account: 1.0})


def test_a_slow_down_defers_the_accounts_jobs_in_its_queue_and_charges_no_attempt(store):
    fill(store, "acme", 5)
    fill(store, "other", 5)
    fill(store, "acme", 2, queue="email")
    task_id = retry_slowed(store, "acme", 30)
    taken = claim_all(store, ("default", "email"))
    assert sorted(taken) == [("default", "other")] * 5 + [("email", "acme")] * 2
    qk = store.keys.queue("default")
    deferral = Deferral.parse(store.client.hget(qk.deferrals, "acme"))
    assert deferral.reason == DeferReason.SLOWED and deferral.until > time.time() + 25
    records = [JobRecord.parse(r) for r in store.client.hvals(store.keys.records)]
    assert records and all(r.deliveries == 0 for r in records)  # none handed out
    [hold] = store.slow_downs()
    assert (hold.account, hold.queue, hold.cause, hold.job) == ("acme", "default", "429", task_id)
    end_holds(store)
    assert claim_all(store) == [("default", "acme")] * 5  # the hold ended: its jobs run
    assert store.slow_downs() == [] and store.client.hlen(store.keys.pauses) == 0


def test_a_second_slow_down_during_the_pause_extends_it_and_never_shortens_it(store):
    retry_slowed(store, "acme", 30)
    field = slow_down_field("acme", "default")
    first = float(store.client.hget(store.keys.pauses, field).split()[0])
    retry_slowed(store, "acme", 5, cause="503")
    [hold] = store.slow_downs()
    assert hold.until == first and hold.cause == "429"
    retry_slowed(store, "acme", 60, cause="SlowDown")
    [hold] = store.slow_downs()
    assert hold.until > first + 25 and hold.cause == "SlowDown"


def test_scope_queue_holds_every_accounts_jobs_in_the_queue_and_not_other_queues(store):
    for account in ("acme", "other", "third"):
        fill(store, account, 3)
        fill(store, account, 1, queue="email")
    retry_slowed(store, "acme", 30, scope="queue")
    claim = store.claim(["default", "email"], 50, TOKEN, NO_LIMIT)
    assert sorted(lease.queue for lease in claim.leases) == ["email"] * 3
    assert claim.next_due is not None and 25 < claim.next_due <= 30  # asks again at the end
    end_holds(store)
    assert len(claim_all(store)) == 9


def test_the_pause_ends_with_the_accounts_rate_at_its_own_burst_not_every_waiting_job(store):
    store.set_limit("acme", AccountLimit(rate="1/h", burst=3))
    fill(store, "acme", 10)
    retry_slowed(store, "acme", 30)
    assert claim_all(store) == []
    end_holds(store)
    assert claim_all(store) == [("default", "acme")] * 3  # its burst, then its rate


def test_an_operator_lifts_a_slow_down_and_the_account_runs_at_once(store):
    fill(store, "acme", 2)
    retry_slowed(store, "acme", 300)
    assert claim_all(store) == []
    assert store.lift_slow_down("acme", "default") is True
    assert claim_all(store) == [("default", "acme")] * 2
    assert store.lift_slow_down("acme", "default") is False
    retry_slowed(store, "acme", 300, scope="queue")
    fill(store, "other", 1)
    assert claim_all(store) == []
    assert store.lift_slow_down(None, "default") is True
    assert claim_all(store) == [("default", "other")]


def test_a_slow_down_is_not_an_operator_pause(store):
    retry_slowed(store, "acme", 300)
    retry_slowed(store, "acme", 300, scope="queue")
    assert store.pauses() == []
    assert [hold.scope for hold in store.slow_downs()] == ["account", "queue"]


def test_on_a_sharded_store_an_accounts_hold_lives_on_its_shard_and_a_queues_on_every_one(
        make_store):
    sharded = make_store(shards=4, lease_seconds=30.0)
    accounts = [f"acct{n}" for n in range(16)]
    for account in accounts:
        fill(sharded, account, 2)
    retry_slowed(sharded, "acct0", 300)
    home = sharded.shard_for("acct0")
    holding = [s for s in sharded.shards if s.client.hlen(s.keys.pauses)]
    assert holding == [home]
    assert sorted(a for _, a in claim_all(sharded)) == sorted(
        a for a in accounts if a != "acct0" for _ in range(2))
    retry_slowed(sharded, "acct1", 300, scope="queue")
    assert all(s.client.hexists(s.keys.pauses, slow_down_field(None, "default"))
               for s in sharded.shards)
    fill(sharded, "acct5", 1)
    assert claim_all(sharded) == []  # one claim of each shard sees it
    assert len([h for h in sharded.slow_downs() if h.scope == "queue"]) == 1
    assert sharded.lift_slow_down(None, "default") is True  # rings every shard's doorbell
    worker = make_store(shards=4, lease_seconds=30.0)  # a worker the doorbell woke
    assert claim_all(worker) == [("default", "acct5")]  # (acct1: its retry is due later)


def test_why_an_account_waits_names_the_slow_down_its_cause_and_job_and_the_metric_counts_it(
        store):
    from celery_fairqueue.reasons import format_clock, reason_text
    from celery_fairqueue.store import ConsoleReader

    fill(store, "acme", 2)
    task_id = retry_slowed(store, "acme", 30)
    assert claim_all(store) == []
    [state] = ConsoleReader(store).account_state("acme", ["default"])
    assert state.reason == "slowed" and state.deferred == 2
    assert reason_text(state) == (f"the provider asked to slow down until "
                                  f"{format_clock(state.until)} (429 on job {task_id})")
    assert store.stats()["deferred_slowed"] == 1  # fairqueue_deferrals_total{reason="slowed"}


def test_a_reshard_moves_an_accounts_hold_with_the_account(redis_server, redis_client):
    from celery_fairqueue.settings import FairqueueSettings
    from celery_fairqueue.store import open_store
    from celery_fairqueue.store.shards.reshard import Resharder

    def settings(shards: int) -> FairqueueSettings:
        return FairqueueSettings(redis_url=redis_server.url, shards=shards,
                                 shards_check_interval=0.05)

    store = open_store(settings(4))
    for n in range(12):
        fill(store, f"acct{n}", 2)
    retry_slowed(store, "acct0", 300)  # on shard 2 of 4, then 15 of 16
    Resharder(settings(4), 16, settle=0).run()
    moved = open_store(settings(16))
    [hold] = moved.slow_downs()
    assert (hold.account, hold.queue) == ("acct0", "default")
    home = moved.shard_for("acct0")
    assert home.client.hexists(home.keys.pauses, slow_down_field("acct0", "default"))
    assert ("default", "acct0") not in claim_all(moved)  # still held on its new shard


def test_the_reaper_forgets_a_hold_that_ended_for_an_account_that_never_came_back(store):
    retry_slowed(store, "acme", 30)
    retry_slowed(store, "other", 30, scope="queue")
    end_holds(store)
    assert store.client.hlen(store.keys.pauses) == 2  # nothing of acme's comes up to drop it
    store.reap()
    assert store.client.hlen(store.keys.pauses) == 0  # each claim: one HLEN answers again
