"""Upgrading a live store from layout format 1 to 2 (store/shards/format_upgrade.py).

The store of format 1 is written and worked by the release before format 2, its own code out of
the repository's history (tests/harness/format1.py): pending, delayed, leased (its worker gone),
deferred and dead-lettered jobs. Processes of this version run beside it during the deploy and
through the upgrade; nothing is lost, nothing runs twice, no conversion call is slow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from celery import Celery

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import StoreInspector
from celery_fairqueue.store.formats.keys import Keys
from celery_fairqueue.store.shards.format_upgrade import FormatUpgrader
from celery_fairqueue.store.shards.opening import open_store
from celery_fairqueue.store.shards.sharded import ShardedStore
from tests.harness.format1 import Format1Process, format1_tree

ROOT = Path(__file__).resolve().parents[2]
NO_LIMIT = AccountLimit().pack(0)
READY = "{fairqueue}:queue:default:ready"  # format 1's ready set
CELERY_READY = "{fairqueue}:queue:celery:ready"
SLOW_US = 50_000  # the longest a conversion call may take Redis: 50 ms


@pytest.fixture(scope="module")
def format1_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("the old release's code comes out of the repository's history")
    return format1_tree(tmp_path_factory.mktemp("format1"))


def settings(url: str) -> FairqueueSettings:
    return FairqueueSettings(redis_url=url, shards_check_interval=1.0, lease_seconds=30.0)


def put(store: ShardedStore, name: str, key: str | None = None) -> str:
    account = f"acct-{zlib.crc32(name.encode()) % 50}"
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "t", "id": name,
                                                        "fairqueue_account": account})
    return store.enqueue(queue="default", account=account, job_id=delivery_id(name, 0),
                         envelope=envelope.to_json(), job_key=key or f"newkey-{name}").job_id


def drain(store: ShardedStore, expect: int, timeout: float = 60.0) -> list[str]:
    """Claim and ack until ``expect`` jobs ran (reaping the dead worker's leases); their ids."""
    ran: list[str] = []
    give_up = time.monotonic() + timeout
    while len(ran) < expect and time.monotonic() < give_up:
        leases = store.claim(["default"], 50, "new-worker", NO_LIMIT).leases
        for lease in leases:
            assert store.ack(lease)
            ran.append(lease.job_id)
        if not leases:
            store.reap()
            time.sleep(0.05)
    return ran


def test_a_store_of_format_1_is_upgraded_live_losing_and_repeating_nothing(
        format1_code, redis_server_factory):
    server = redis_server_factory(slowlog_log_slower_than=str(SLOW_US))
    client = server.client(decode_responses=True)
    old = Format1Process(format1_code, server.url)
    left = old.run("fill", jobs=3000, accounts=200, delayed_every=10, delay=2.0, leased=30,
                   dead=5, limited=3, lease=1.0)
    stored = {delivery_id(f"old-{n}", 0) for n in range(3000)} - set(left["dead"])

    # this version beside the old one, the store still at format 1
    producer, worker = open_store(settings(server.url)), open_store(settings(server.url))
    assert worker.claim(["default"], 10, "new-worker", NO_LIMIT).leases == []
    assert worker.layout_format == "1"
    before = client.zcard(READY)
    mine = {put(producer, f"new-{n}") for n in range(100)}
    assert client.zcard(READY) == before + 100  # written as format 1 did, for the old workers
    assert not client.keys("{fairqueue}:queue:default:f:*")
    again = put(producer, "dup-of-old", key="key-7")  # held by an old pending marker
    assert again == delivery_id("old-7", 0)
    old_ran = old.run("work", seconds=1.5)["ran"]  # the old workers run old and new jobs
    assert old_ran

    # the upgrade, producers of this version enqueuing all along
    live: list[str] = []
    stop = threading.Event()

    def enqueue_live() -> None:
        while not stop.is_set():
            live.append(put(producer, f"live-{len(live)}"))
            time.sleep(0.005)

    feeder = threading.Thread(target=enqueue_live)
    feeder.start()
    client.slowlog_reset()
    try:
        lines: list[str] = []
        report = FormatUpgrader(settings(server.url), timeout=20, settle=0.3, batch=100,
                                say=lines.append).run()
    finally:
        stop.set()
        feeder.join()
    assert client.get("{fairqueue}:format") == "2" and not client.exists(READY)
    assert report.jobs > 0 and report.queues == 1
    assert client.slowlog_get(128) == []  # no call of the upgrade's took Redis 50 ms

    expected = (stored | mine | set(live)) - set(old_ran)
    ran = drain(worker, len(expected))
    assert Counter(ran).most_common(1)[0][1] == 1  # none twice
    assert set(ran) == expected  # none lost
    assert not set(ran) & set(old_ran)
    # a business key done before and after the upgrade still dedupes
    assert put(producer, "again-8", key="key-8") == delivery_id("old-8", 0)


def test_a_conversion_killed_halfway_is_finished_by_a_rerun(format1_code, redis_server_factory):
    server = redis_server_factory()
    client = server.client(decode_responses=True)
    Format1Process(format1_code, server.url).run("fill", jobs=20000, accounts=200)
    ready = client.zcard(READY)
    script = ("import sys; from celery_fairqueue.settings import FairqueueSettings; "
              "from celery_fairqueue.store.shards.format_upgrade import FormatUpgrader; "
              "FormatUpgrader(FairqueueSettings(redis_url=sys.argv[1], "
              "shards_check_interval=1.0), settle=0, batch=20).run()")
    upgrade = subprocess.Popen([sys.executable, "-c", script, server.url], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        give_up = time.monotonic() + 60
        while client.zcard(READY) > ready * 0.7 and time.monotonic() < give_up:
            time.sleep(0.01)
    finally:
        os.kill(upgrade.pid, signal.SIGKILL)
        upgrade.wait()
    assert client.get("{fairqueue}:format") == "1>2"
    assert 0 < client.zcard(READY) < ready  # killed halfway

    FormatUpgrader(settings(server.url), timeout=20, settle=0).run()
    assert client.get("{fairqueue}:format") == "2" and not client.exists(READY)
    worker = open_store(settings(server.url))
    ran = drain(worker, 20000)
    assert len(ran) == len(set(ran)) == 20000
    assert set(ran) == {delivery_id(f"old-{n}", 0) for n in range(20000)}
    assert not client.keys(Keys().queue("default").fifo("*"))


def test_a_worker_waits_for_the_upgrade_then_runs_what_waited(
        fair, fair_store, celery_worker_factory, redis_client, redis_url, ledger):
    """A worker of this version on a store at format 1 claims nothing, says why once, keeps no
    queue's time and takes no ring (the old workers need them); once upgraded, it runs every
    job the producers of this version wrote as format 1 did, meanwhile."""
    redis_client.set("{fairqueue}:format", "1")  # as a store an earlier version wrote reads
    fair_store.reading.read_now()
    try:
        results = [fair.job.delay("acme", n) for n in range(3)]
    finally:  # this producer stops: its reading goes (the next test's reads the store again)
        fair_store.reading.read_now()
        redis_client.zrem("{fairqueue}:layoutreaders", fair_store.reading.process_id)
    assert redis_client.zcard(CELERY_READY) == 3
    worker = celery_worker_factory("tests.apps.fair", concurrency=2,
                                   env={"FQ_SHARDS_CHECK_SECONDS": "1"})
    worker.wait_for_log("claims no job until", timeout=15)
    time.sleep(1.5)  # a claim every second meanwhile: none takes a job
    assert ledger.counts() == {} and redis_client.zcard(CELERY_READY) == 3
    assert not redis_client.exists("{fairqueue}:queue:celery:keeper")
    FormatUpgrader(settings(redis_url), timeout=20, settle=0.2).run()
    assert [r.get(timeout=20) for r in results] == [0, 1, 2]
    assert ledger.counts() == {f"acme:{n}": 1 for n in range(3)}
    assert worker.log_tail(10_000).count("claims no job until") == 1


def test_jobs_a_producer_of_an_earlier_version_writes_after_the_upgrade_still_run(
        format1_code, redis_server_factory):
    """One that stayed up (idle past its check interval, so the upgrade did not see it) still
    writes format 1's set: the claim takes an account's jobs from there when its FIFO is empty
    (pop_head in lib/rotation.lua), and a member whose job left meanwhile is dropped."""
    server = redis_server_factory()
    client = server.client(decode_responses=True)
    old = Format1Process(format1_code, server.url)
    old.run("fill", jobs=40, accounts=4)
    FormatUpgrader(settings(server.url), timeout=20, settle=0).run()
    old.run("fill", jobs=60, accounts=4)  # old-0 .. old-59 again: 40 stored already, 20 new
    assert client.zcard(READY) == 20
    new = open_store(settings(server.url))
    cancelled = new.cancel("old-41")  # its member stays in format 1's set
    assert cancelled == [delivery_id("old-41", 0)]
    ran = drain(new, 59)
    assert sorted(ran) == sorted({delivery_id(f"old-{n}", 0) for n in range(60)} -
                                 {delivery_id("old-41", 0)})
    assert not client.exists(READY)
    assert new.stats()["enqueued"] == 60 and "poisoned" not in new.stats()


def test_two_upgrades_at_once_never_move_the_store_back(redis_server_factory):
    server = redis_server_factory()
    client = server.client(decode_responses=True)
    store = open_store(settings(server.url))
    store.check_shards()
    assert client.get("{fairqueue}:format") == "2"  # a new store
    assert store._run("set_format", [], ["1", "1>2"]) == "2"  # an upgrade that read "1" late
    assert client.get("{fairqueue}:format") == "2"
    assert FormatUpgrader(settings(server.url)).run().done_before


def test_readers_count_show_and_purge_the_jobs_waiting_in_the_set_of_format_1(
        format1_code, redis_server_factory):
    """Until ``fairqueue upgrade`` has run, ready jobs wait in format 1's set: the totals, the
    oldest waiting job an alert reads, an account's page and its jobs, and a purge see them
    there. After it, an earlier producer may still write there: counted too, until adopted."""
    server = redis_server_factory()
    client = server.client(decode_responses=True)
    old = Format1Process(format1_code, server.url)
    old.run("fill", jobs=40, accounts=4)
    app = Celery("t", broker="redis://127.0.0.1:1/0")
    app._fairqueue_store = store = open_store(settings(server.url))
    store.check_shards()
    assert store.layout_format == "1" and client.zcard(READY) == 40
    inspector = StoreInspector(app)
    reader = inspector.console
    assert store.counts("default")["ready"] == 40
    [queue] = inspector.status(["default"]).queues
    assert (queue.ready, queue.accounts_ready) == (40, 4)
    assert queue.oldest_waiting is not None and queue.oldest_waiting <= reader.server_time()
    assert sorted(a for a, _ in reader.oldest_accounts("default", 10)) == [
        f"acct-{n}" for n in range(4)]
    assert {row.account: row.ready for row in inspector.accounts(["default"]).rows} == {
        f"acct-{n}": 10 for n in range(4)}
    [state] = reader.account_state("acct-1", ["default"])
    assert state.ready == 10 and state.oldest_waiting is not None
    assert sorted(job.job_id for job in reader.live_jobs("acct-1")) == sorted(
        delivery_id(f"old-{n}", 0) for n in range(1, 40, 4))
    assert store.purge(["default"]) == 40
    assert not client.exists(READY) and store.counts("default")["ready"] == 0

    FormatUpgrader(settings(server.url), timeout=20, settle=0).run()
    old.run("fill", jobs=10, accounts=4)  # after the upgrade: into format 1's set
    store.reading.read_now()
    store.check_shards()
    assert store.layout_format == "2" and client.zcard(READY) == 10
    assert store.counts("default")["ready"] == 10
    assert store.purge(["default"]) == 10  # a cancel at format 2 leaves the member: paged past
    store.reap()
    assert not client.exists(READY)
