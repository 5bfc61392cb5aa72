"""The store's readers on a store of four shards on one real redis-server: the status, the
accounts listing, the scheduled jobs, the console's account reads, the dead letters, the event
streams and the metrics, with accounts known to land on different shards."""

import importlib

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from celery_fairqueue import DeadLetters
from celery_fairqueue.metrics import make_registry
from celery_fairqueue.store import ConsoleReader, EventReader, StoreInspector, store_for

QUEUE = "celery"


@pytest.fixture
def sharded(redis_server, redis_client):
    """The sharded test app, on the flushed session Redis, with an account on each shard."""
    module = importlib.import_module("tests.apps.sharded")
    assert len(module.fresh().shards) == module.SHARDS
    return module


def accounts_by_shard(sharded):
    return [sharded.on_shard(k)[0] for k in range(sharded.SHARDS)]


def ready_on(store, shard):
    """The ready jobs on ``shard``: its accounts' FIFOs of the queue, found by their names."""
    fifos = store.client.scan_iter(store.shards[shard].keys.queue(QUEUE).fifo("*"))
    return sum(store.client.zcard(key) for key in fifos)


def bury(store, job_id, account, task="tests.apps.sharded.job", n=1):
    store.bury(job_id, "permanent: no", record={"task": task, "account": account,
                                                "args": [account, n], "queue": QUEUE})


def test_status_accounts_and_scheduled_add_up_every_shard(sharded):
    store = store_for(sharded.app)
    accounts = accounts_by_shard(sharded)
    for n, account in enumerate(accounts):
        for k in range(n + 1):
            sharded.job.delay(account, k)
    sharded.job.apply_async((accounts[2], 9), countdown=300)
    bury(store, "dead-a:0", accounts[0])
    bury(store, "dead-b:0", accounts[3])
    assert [ready_on(store, k) for k in range(4)] == [1, 2, 3, 4]  # each on its own shard

    status = StoreInspector(sharded.app).status()
    [row] = status.queues
    assert (row.queue, row.ready, row.delayed, row.accounts_ready) == (QUEUE, 10, 1, 4)
    assert row.oldest_waiting is not None
    assert status.dead_letters == 2 and status.leased == 0
    assert status.counters["enqueued"] == 11 and status.counters["dead"] == 2

    page = StoreInspector(sharded.app).accounts()
    assert page.accounts_ready == 4 and page.complete
    assert {r.account: r.ready for r in page.rows} == {a: n + 1 for n, a in enumerate(accounts)}
    assert [r.delayed for r in page.rows if r.account == accounts[2]] == [1]
    [one] = StoreInspector(sharded.app).accounts(account=accounts[3]).rows
    assert (one.account, one.ready) == (accounts[3], 4)

    [scheduled] = StoreInspector(sharded.app).scheduled()
    assert (scheduled.account, scheduled.task) == (accounts[2], "tests.apps.sharded.job")


def test_an_account_on_shard_3_shows_its_state_and_jobs(sharded):
    store = store_for(sharded.app)
    account, other = sharded.on_shard(3)[0], sharded.on_shard(1)[0]
    for k in range(3):
        sharded.job.delay(account, k)
    sharded.job.delay(other, 0)
    sharded.job.apply_async((account, 7), countdown=300)
    reader = ConsoleReader(store)
    [state] = reader.account_state(account)
    assert (state.queue, state.ready, state.delayed_future) == (QUEUE, 3, 1)
    assert state.oldest_waiting is not None
    jobs = reader.live_jobs(account)
    assert [job.state for job in jobs] == ["ready"] * 3 + ["delayed"]
    assert {job.account for job in jobs} == {account}
    assert reader.live_jobs(sharded.on_shard(2)[0]) == []
    assert [a for a, _ in reader.oldest_accounts(QUEUE, 5)] == [account, other]


def test_dead_letters_of_two_shards_are_listed_and_one_is_replayed(sharded):
    store = store_for(sharded.app)
    first, second = sharded.on_shard(1)[0], sharded.on_shard(2)[0]
    bury(store, "one:0", first)
    bury(store, "two:0", second)
    letters = DeadLetters(sharded.app)
    assert letters.count() == 2 and sorted(letters.ids()) == ["one:0", "two:0"]
    assert [letter.job_id for letter in letters.list()] == ["two:0", "one:0"]  # newest first
    assert [letter.job_id for letter in letters.list(account=second)] == ["two:0"]
    assert letters.get("one:0").account == first
    assert letters.resolve("two") == ["two:0"]  # by its task id
    assert [letter.account for letter in letters.named("one")] == [first]

    letters.replay("one:0")
    assert ready_on(store, 1) == 1  # the replay runs on its account's shard
    assert [letter.job_id for letter in letters.list()] == ["two:0"]
    assert letters.purge(["two:0", "gone:0"]) == 1
    assert letters.count() == 0


def test_the_event_reader_reads_and_acks_every_shards_stream(sharded):
    store = store_for(sharded.app)
    reader = EventReader(store, "test")
    reader.ensure_group()
    assert len(set(reader.streams)) == 4
    accounts = accounts_by_shard(sharded)
    for account in accounts:
        sharded.job.delay(account, 1)
    assert reader.backlog() == 4
    events = reader.read(count=10, block_ms=10)
    assert sorted(event.fields["a"] for event in events) == sorted(accounts)
    assert len({event.stream for event in events}) == 4
    assert reader.read(count=10, block_ms=10) == []  # read on: none is read twice
    reader.rewind()  # as after a failed write: its pending ones again
    again = reader.read(count=10, block_ms=10)
    assert sorted(event.id for event in again) == sorted(event.id for event in events)
    leader = EventReader(store, "leader")
    leader.adopt_pending()  # a new leader takes over what the last one read
    taken = leader.read(count=10, block_ms=10)
    assert len(taken) == 4
    leader.ack(taken)
    assert reader.backlog() == 0 and leader.read(count=10, block_ms=10) == []


def samples(text):
    return {(s.name, *sorted(s.labels.values())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_add_up_every_shard(sharded):
    store = store_for(sharded.app)
    EventReader(store, "metrics").ensure_group()
    for account in accounts_by_shard(sharded):
        sharded.job.delay(account, 1)
    bury(store, "dead:0", sharded.on_shard(2)[0])
    metrics = samples(generate_latest(make_registry(sharded.app)).decode())
    assert metrics[("fairqueue_ready_jobs", QUEUE)] == 4
    assert metrics[("fairqueue_enqueued_total",)] == 4
    assert metrics[("fairqueue_dead_letters",)] == 1
    assert metrics[("fairqueue_event_backlog",)] == 5  # four enqueued, one dead
    assert metrics[("fairqueue_oldest_waiting_age_seconds", QUEUE)] >= 0


def test_an_accounts_reads_touch_its_shard_alone(sharded, redis_server):
    """MONITOR shows every key the account's state and jobs read: its shard's, and the
    workers' registry at the home, nothing of the other shards."""
    store = store_for(sharded.app)
    account = sharded.on_shard(3)[0]
    for other in accounts_by_shard(sharded):
        sharded.job.delay(other, 1)
    reader = ConsoleReader(store)
    watcher = redis_server.client(decode_responses=True)
    tags = [shard.keys.tag for shard in store.shards]
    with watcher.monitor() as monitor:
        reader.account_state(account)
        reader.live_jobs(account)
        watcher.get("monitor-done")
        seen = []
        while "monitor-done" not in (command := monitor.next_command())["command"]:
            seen.append(command["command"])
    touched = {tag for line in seen for tag in tags if tag in line}
    assert touched == {tags[3], tags[0]}, seen
    home = [line for line in seen if tags[0] in line]
    assert all(":workers" in line or ":workerinfo" in line for line in home), home
