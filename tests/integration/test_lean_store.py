"""The lean layout's guarantees on a real redis-server (issue 24): what a job costs Redis, in
commands, exactly; counts the console derives instead of every job keeping them; events never
lost to a producer's stale word; a concurrency cap set while jobs run counts them."""

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.store import EventReader, FairStore
from tests.harness.store_tools import claim_jobs

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"


def commands(store: FairStore) -> int:
    return int(store.client.info("stats")["total_commands_processed"])


def cost(store: FairStore, call) -> int:
    """Redis commands one call of ours costs (inside scripts counted; INFO itself left out)."""
    before = commands(store)
    call()
    return commands(store) - before - 1


def test_a_keyed_job_costs_at_most_thirty_commands_enqueue_to_ack(store):
    """The whole life of a job with a business key, in a backlog of its account: an enqueue, its
    share of a claim of 4 and of the acks riding on the next claim; the fixed cost of a claim
    call is shared by its jobs."""
    for n in range(8):
        put(store, "acme", n, job_key=f"k{n}")
    claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)  # clock read, scripts loaded
    enqueue = cost(store, lambda: put(store, "acme", 100, job_key="k100"))
    leases: list = []
    claim = cost(store, lambda: leases.extend(
        claim_jobs(store, ["default"], 4, TOKEN, NO_LIMIT)))
    for lease in leases:
        lease.succeeded()
    acks = cost(store, lambda: store.claim(["default"], 0, TOKEN, NO_LIMIT, acks=leases))
    assert enqueue <= 9  # the script call and 8 commands in it
    per_job = enqueue + (claim + acks) / len(leases)
    assert per_job <= 30, (enqueue, claim, acks)


def test_no_count_is_kept_per_job_for_the_console(store):
    """A job of an account without a cap touches no count hash on its way: the console reads
    ready jobs off the accounts' FIFOs and running ones off the lease set."""
    for n in range(3):
        put(store, "acme", n)
    leases = claim_jobs(store, ["default"], 2, TOKEN, NO_LIMIT)
    qk = store.keys.queue("default")
    assert not store.client.exists(qk.running)
    assert store.running() == {("default", "acme"): 2}
    assert store.counts("default")["running"] == 2 and store.counts("default")["ready"] == 1
    for lease in leases:
        lease.ack()
    assert store.running() == {}


def test_an_event_is_recorded_even_when_the_producer_had_seen_no_recorder(store):
    """The producer asks whether a recorder listens every few seconds; the script asks Redis
    itself when the producer says no, so a recorder that started since misses nothing."""
    put(store, "acme", 0)  # the producer now believes nobody records
    assert not store.recording()
    reader = EventReader(store, "c1")  # a recorder in another process: this store not told
    store.client.xgroup_create(store.keys.events, reader.group, id="0", mkstream=True)
    put(store, "acme", 1)
    assert [e.type for e in reader.read(block_ms=10)] == ["enqueued"]


def test_a_cap_set_while_jobs_run_counts_them(store):
    """Jobs of an account without a cap are not counted for it; a cap set while three run counts
    those three at once, so no fourth starts until two of them end."""
    for n in range(6):
        put(store, "acme", n)
    running = claim_jobs(store, ["default"], 3, TOKEN, NO_LIMIT)
    assert len(running) == 3
    store.set_limit("acme", AccountLimit(concurrency=2))
    assert claim_jobs(store, ["default"], 3, TOKEN, NO_LIMIT) == []
    running[0].ack()
    assert claim_jobs(store, ["default"], 3, TOKEN, NO_LIMIT) == []
    running[1].ack()
    [more] = claim_jobs(store, ["default"], 3, TOKEN, NO_LIMIT)
    assert store.counts("default")["running"] == 2
    store.clear_limit("acme")
    assert len(claim_jobs(store, ["default"], 3, TOKEN, NO_LIMIT)) == 2
    for lease in (running[2], more):
        lease.ack()
    assert not store.client.exists(store.keys.queue("default").running)


def test_a_replay_right_after_the_dead_letter_runs_before_the_failed_jobs_ack(store):
    """A task dead-letters its job (bury) and its ack rides with the worker's next claim, which
    may come much later; a replay sent in between is a new job, not the dead one's duplicate."""
    put(store, "acme", 1, job_key="lead-7")
    [lease] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    store.bury(lease.job_id, "permanent: lead deleted", record={"task": "t"})
    replay = store.enqueue(queue="default", account="acme", job_id="replay-1:0", envelope="{}",
                           job_key="lead-7", replays=lease.job_id)
    assert replay.created and replay.job_id == "replay-1:0"
    lease.ack()  # the failed job's ack arrives: the replay keeps the key
    [again] = claim_jobs(store, ["default"], 1, TOKEN, NO_LIMIT)
    assert again.job_id == "replay-1:0" and store.marker("lead-7").job_id == "replay-1:0"
    assert again.marker and '"started"' in again.marker  # it asks already_applied first
