"""``fairqueue reshard``: a store of S shards moved to N > S while producers and workers run;
killed part-way, a rerun finishes it; no job is lost, run twice, or run while half-moved."""

import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from celery_fairqueue.errors import EnqueueError
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import open_store
from celery_fairqueue.store.formats.keys import Keys, encode_id
from celery_fairqueue.store.formats.records import member_job_id
from celery_fairqueue.store.shards.placement import account_shard
from celery_fairqueue.store.shards.reshard import Resharder, ReshardError
from tests.harness import REDIS_URL_ENV, wait_until

APP = "tests.apps.resharding"
ROOT = Path(__file__).resolve().parents[2]


def reshard(redis_url: str, to: int, *, kill: str = "", settle: float = 1.5,
            ) -> subprocess.CompletedProcess[str]:
    """``celery -A tests.apps.resharding fairqueue reshard --to N``, as an operator runs it."""
    env = {**os.environ, REDIS_URL_ENV: redis_url, "PYTHONPATH": str(ROOT), "FQ_SHARDS": "4"}
    if kill:
        env["FAIRQUEUE_RESHARD_KILL"] = kill
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", APP, "fairqueue", "reshard", "--to", str(to),
         "--settle", str(settle)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120)


def settings(redis_url: str, shards: int) -> FairqueueSettings:
    return FairqueueSettings(redis_url=redis_url, shards=shards, shards_check_interval=0.05)


def placed(redis_client, shards: int) -> dict[str, int]:
    """Every stored job id -> the shard holding it; each account's jobs on its own shard."""
    where: dict[str, int] = {}
    for n in range(shards):
        for job_id, record in redis_client.hgetall(Keys("fairqueue", n).records).items():
            account = record.partition("\n")[0].split(" ")[1]
            assert account_shard(account, shards) == n, (job_id, account, n)
            assert job_id not in where, f"{job_id} on shards {where[job_id]} and {n}"
            where[job_id] = n
    return where


class Producer(threading.Thread):
    """``work.delay(account, n)`` steadily until told to stop; an enqueue refused is kept."""

    def __init__(self, task, accounts: int, first: int) -> None:
        super().__init__(daemon=True)
        self.task, self.accounts, self.n = task, accounts, first
        self.sent: list[str] = []
        self.refused: list[EnqueueError] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            account = f"acct{self.n % self.accounts}"
            try:
                self.task.delay(account, self.n)
            except EnqueueError as exc:
                self.refused.append(exc)
            else:
                self.sent.append(f"{account}:{self.n}")
            self.n += 1
            time.sleep(0.005)

    def stop(self) -> list[str]:
        self.stopping.set()
        self.join(timeout=30)
        return self.sent


@pytest.fixture
def start_producer():
    """``start_producer(task, accounts, first)``: a started Producer, stopped at the end of the
    test even when it fails (else it would go on enqueueing into the next test's Redis)."""
    producers: list[Producer] = []

    def start(task, accounts: int, first: int) -> Producer:
        producer = Producer(task, accounts, first)
        producers.append(producer)
        producer.start()
        return producer

    yield start
    for producer in producers:
        producer.stop()


def layouts_read(redis_client) -> dict[str, str]:
    """Each live process's name -> the layout it read last (read_layout.lua)."""
    return {seen.partition(" ")[2].partition(" ")[2]: seen.partition(" ")[0]
            for seen in redis_client.hvals("{fairqueue}:layoutseen")}


def producing_app(shards: int):
    """The reshard tests' app in this process, as a producer configured with ``shards``."""
    mod = importlib.import_module(APP)
    mod.app.conf.fairqueue_shards = shards
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        mod.app.__dict__.pop(cached, None)
    return mod


@pytest.mark.xdist_group("cpu-a")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.slow
def test_a_reshard_under_load_killed_midway_is_finished_by_a_rerun(
        redis_server, redis_client, celery_worker_factory, ledger, start_producer):
    mod = producing_app(4)
    accounts, preload = 120, 1200
    for n in range(preload):
        mod.work.delay(f"acct{n % accounts}", n)
    expected = [f"acct{n % accounts}:{n}" for n in range(preload)]
    for _ in range(2):
        celery_worker_factory(APP, concurrency=2, env={"FQ_SHARDS": "4"})
    producer = start_producer(mod.work, accounts, preload)
    assert wait_until(lambda: len(ledger) > 100, timeout=20)

    killed = reshard(redis_server.url, 16, kill="40:in")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert redis_client.get("{fairqueue}:shards") == "4>16"
    finished = reshard(redis_server.url, 16)
    assert finished.returncode == 0, finished.stderr
    print(killed.stdout, finished.stdout, len(ledger))
    assert re.search(r"from 4 to 16 shards: \d+ accounts and [1-9]\d* waiting jobs",
                     finished.stdout), finished.stdout
    assert redis_client.get("{fairqueue}:shards") == "16"
    again = reshard(redis_server.url, 16)
    assert again.returncode == 0 and "nothing to move" in again.stdout, again.stderr

    # the producer and the workers, all saying 4 shards, follow the store's 16: no restart
    time.sleep(1.0)  # two of their check intervals
    expected += producer.stop()
    assert producer.refused == []
    counts = ledger.wait_for(len(expected), timeout=90)
    assert ledger.missing(expected) == set()
    assert {key: n for key, n in counts.items() if n > 1} == {}
    assert redis_client.lrange("half_moved", 0, -1) == []
    assert wait_until(lambda: placed(redis_client, 16) == {}, timeout=20)
    # each delivery counted once, on whichever shard it ran (shard.py's stats)
    assert open_store(settings(redis_server.url, 16)).stats()["enqueued"] == len(expected)


@pytest.mark.xdist_group("cpu-b")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.slow
def test_a_store_of_one_shard_moved_to_8_then_16_under_load_with_no_restart(
        redis_server, redis_client, celery_worker_factory, ledger, start_producer):
    """The first reshard every growing store meets: producers and workers configured with one
    shard, nothing restarted, each move SIGKILLed halfway and run again."""
    mod = producing_app(1)
    accounts, preload = 120, 1200
    # a backlog before the workers start, as in the test above: each move meets waiting jobs
    # even where the workers outrun the producers (a busy machine starves the producers' thread)
    for n in range(preload):
        mod.work.delay(f"acct{n % accounts}", n)
    workers = [celery_worker_factory(APP, concurrency=2, env={"FQ_SHARDS": "1"})
               for _ in range(2)]
    producers = [start_producer(mod.work, accounts, first) for first in (preload, 10_000_000)]
    assert wait_until(lambda: len(ledger) > 100, timeout=20)
    for to, kill in ((8, "40:in"), (16, "30:out")):
        killed = reshard(redis_server.url, to, kill=kill)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        finished = reshard(redis_server.url, to)
        assert finished.returncode == 0, finished.stderr
        assert redis_client.get("{fairqueue}:shards") == str(to)
        # within one check interval (0.5 s) every process has read the store's new number
        assert wait_until(lambda to=to: set(layouts_read(redis_client).values()) == {str(to)},
                          timeout=1.5), layouts_read(redis_client)
    names = layouts_read(redis_client)
    assert sum(name.startswith("worker ") for name in names) == 2, names
    expected = [f"acct{n % accounts}:{n}" for n in range(preload)]
    expected += [sent for producer in producers for sent in producer.stop()]
    assert [producer.refused for producer in producers] == [[], []]
    counts = ledger.wait_for(len(expected), timeout=120)
    assert ledger.missing(expected) == set()
    assert {key: n for key, n in counts.items() if n > 1} == {}
    assert redis_client.lrange("half_moved", 0, -1) == []
    assert wait_until(lambda: placed(redis_client, 16) == {}, timeout=20)
    assert all(worker.is_alive() for worker in workers)


@pytest.mark.slow
def test_a_reshard_killed_after_an_account_left_its_old_shard_is_finished(
        redis_server, redis_client):
    store = open_store(settings(redis_server.url, 4))
    jobs = []
    for n in range(60):
        account = f"acct{n % 12}"
        result = store.enqueue(queue="celery", account=account, job_id=f"t{n}:0",
                               envelope="{}", job_key=f"k{n}" if n % 2 else None,
                               due=time.time() + 3600 if n % 3 == 0 else None)
        jobs.append(result.job_id)
    store.set_limit("acct1", AccountLimit(rate=5.0, burst=2.0))
    store.pause("acct2", None, by="ops", reason="audit")
    killed = reshard(redis_server.url, 16, kill="3:out", settle=0)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert reshard(redis_server.url, 16, settle=0).returncode == 0
    shrink = reshard(redis_server.url, 8, settle=0)
    assert shrink.returncode != 0 and "only adds shards" in shrink.stderr, shrink.stderr
    where = placed(redis_client, 16)
    assert sorted(where) == sorted(jobs)
    moved = open_store(settings(redis_server.url, 16))
    assert moved.get_limit("acct1") == AccountLimit(rate=5.0, burst=2.0)
    assert [(p.account, p.by, p.reason) for p in moved.pauses()] == [("acct2", "ops", "audit")]
    for n in range(1, 60, 2):
        marker = moved.shard_for(f"acct{n % 12}").marker(f"k{n}")
        assert marker is not None and marker.job_id == f"t{n}:0"


def test_a_rerun_of_a_finished_reshard_does_nothing_and_shrinking_is_refused(redis_server,
                                                                            redis_client):
    store = open_store(settings(redis_server.url, 4))
    store.enqueue(queue="celery", account="acme", job_id="t1:0", envelope="{}")
    first = Resharder(settings(redis_server.url, 4), 8, settle=0).run()
    assert (first.old, first.new, first.done_before) == (4, 8, False)
    assert Resharder(settings(redis_server.url, 8), 8, settle=0).run().done_before
    with pytest.raises(ReshardError, match="only adds shards"):
        Resharder(settings(redis_server.url, 8), 4, settle=0).run()
    redis_client.set("{fairqueue}:shards", "8>16")
    with pytest.raises(ReshardError, match="from 8 to 16 shards is under way"):
        Resharder(settings(redis_server.url, 8), 32, settle=0).run()


def test_while_a_move_runs_both_numbers_are_accepted_and_moved_accounts_are_forwarded(
        redis_server, redis_client):
    old = open_store(settings(redis_server.url, 4))
    moving = [f"acct{n}" for n in range(40) if account_shard(f"acct{n}", 4) !=
              account_shard(f"acct{n}", 16)]
    for n, account in enumerate(moving):
        old.enqueue(queue="celery", account=account, job_id=f"before{n}:0", envelope="{}")
    Resharder(settings(redis_server.url, 4), 16, settle=0).run()
    redis_client.set("{fairqueue}:shards", "4>16")  # as while its last accounts moved
    time.sleep(0.1)
    for n, account in enumerate(moving):  # a process of 4 shards, forwarded
        old.enqueue(queue="celery", account=account, job_id=f"after{n}:0", envelope="{}")
    new = open_store(settings(redis_server.url, 16))
    new.check_shards()
    one = open_store(settings(redis_server.url, 1))
    one.check_shards()  # a process of one shard follows the move too
    assert (one.shard_move, len(one.shards), one.sharded) == ((4, 16), 16, True)
    redis_client.set("{fairqueue}:shards", "16")
    time.sleep(0.1)
    old.enqueue(queue="celery", account="acme", job_id="after:0", envelope="{}")
    assert (old.shard_move, len(old.shards)) == (None, 16)
    assert len(placed(redis_client, 16)) == 2 * len(moving) + 1


def test_a_marker_names_its_account_for_a_reshard(redis_server, redis_client):
    store = open_store(settings(redis_server.url, 4))
    shard = store.shard_for("a b")
    shard.enqueue(queue="celery", account="a b", job_id="t1:0", envelope="{}", job_key="k1")
    raw = redis_client.get(shard.keys.job_key("k1"))
    assert raw == "p a%20b|t1:0"  # pending: short (records.Marker)
    shard.mark_started("k1", "t1:0")
    assert '"account":"a%20b"' in redis_client.get(shard.keys.job_key("k1"))


def test_a_marker_of_a_store_of_one_shard_names_no_account(redis_server, redis_client):
    store = open_store(settings(redis_server.url, 1))
    store.enqueue(queue="celery", account="a b", job_id="t1:0", envelope="{}", job_key="k1")
    assert '"account"' not in redis_client.get(Keys("fairqueue").job_key("k1"))


@pytest.mark.slow
def test_a_job_promoted_on_its_old_shard_between_a_copy_and_a_rerun_waits_in_one_place(
        redis_server, redis_client):
    store = open_store(settings(redis_server.url, 4))
    store.check_shards()
    account = next(f"acct{n}" for n in range(100)
                   if account_shard(f"acct{n}", 4) != account_shard(f"acct{n}", 16))
    old, new = account_shard(account, 4), account_shard(account, 16)
    store.enqueue(queue="celery", account=account, job_id="j:0", envelope="{}",
                  due=time.time() + 1.0)
    killed = reshard(redis_server.url, 16, kill="1:in", settle=0)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    qk = Keys("fairqueue", new).queue("celery")
    ready, delayed = qk.fifo(encode_id(account)), qk.delayed
    assert redis_client.zrange(delayed, 0, -1) == ["j:0"]  # copied as it was: delayed
    time.sleep(1.1)
    # its old shard's claim promotes it to ready there (frozen: it does not run)
    assert store.shards[old].claim(["celery"], 1, "w", "0 1 0 - 1").leases == []
    assert reshard(redis_server.url, 16, settle=0).returncode == 0
    assert placed(redis_client, 16) == {"j:0": new}
    assert redis_client.zrange(delayed, 0, -1) == []
    assert [member_job_id(member) for member in redis_client.zrange(ready, 0, -1)] == ["j:0"]
    assert redis_client.hgetall(Keys("fairqueue", new).queue("celery").ndelayed) == {}


def test_while_a_move_runs_an_account_is_frozen_where_its_jobs_wait_else_sent_on(
        redis_server, redis_client):
    store = open_store(settings(redis_server.url, 4))
    store.check_shards()
    waiting, fresh = [f"acct{n}" for n in range(100)
                      if account_shard(f"acct{n}", 4) != account_shard(f"acct{n}", 16)][:2]
    store.enqueue(queue="celery", account=waiting, job_id="w1:0", envelope="{}")
    redis_client.set("{fairqueue}:shards", "4>16")  # announced
    time.sleep(0.1)
    old, new = account_shard(waiting, 4), account_shard(waiting, 16)
    store.enqueue(queue="other", account=waiting, job_id="w2:0", envelope="{}")
    assert redis_client.hget(Keys("fairqueue", old).moved, waiting) == f"f {new}"
    assert placed(redis_client, 4) == {"w1:0": old, "w2:0": old}  # frozen there, both
    [pause] = store.pauses()
    assert (pause.account, pause.by) == (waiting, "fairqueue reshard")
    store.enqueue(queue="celery", account=fresh, job_id="f1:0", envelope="{}")
    fresh_old, fresh_new = account_shard(fresh, 4), account_shard(fresh, 16)
    assert redis_client.hget(Keys("fairqueue", fresh_old).moved, fresh) == f"m {fresh_new}"
    assert redis_client.hexists(Keys("fairqueue", fresh_new).records, "f1:0")
    Resharder(settings(redis_server.url, 4), 16, settle=0).run()
    assert placed(redis_client, 16) == {"w1:0": new, "w2:0": new, "f1:0": fresh_new}
    assert open_store(settings(redis_server.url, 16)).pauses() == []


def test_a_bulk_enqueue_while_a_move_runs_freezes_or_sends_on_each_account_as_one_enqueue_does(
        redis_server, redis_client):
    store = open_store(settings(redis_server.url, 4))
    store.check_shards()
    waiting, fresh = [f"acct{n}" for n in range(100)
                      if account_shard(f"acct{n}", 4) != account_shard(f"acct{n}", 16)][:2]
    store.enqueue(queue="celery", account=waiting, job_id="held:0", envelope="{}")
    redis_client.set("{fairqueue}:shards", "4>16")  # announced
    time.sleep(0.1)
    jobs = [{"queue": "celery", "account": account, "job_id": f"{name}{n}:0", "envelope": "{}"}
            for n in range(3) for account, name in ((waiting, "w"), (fresh, "f"))]
    outcomes = store.enqueue_many(jobs)
    assert [outcome.job_id for outcome in outcomes] == [job["job_id"] for job in jobs]
    old, new = account_shard(waiting, 4), account_shard(waiting, 16)
    fresh_old, fresh_new = account_shard(fresh, 4), account_shard(fresh, 16)
    assert redis_client.hget(Keys("fairqueue", old).moved, waiting) == f"f {new}"
    assert redis_client.hget(Keys("fairqueue", fresh_old).moved, fresh) == f"m {fresh_new}"
    assert set(placed(redis_client, 4)) == {"held:0", "w0:0", "w1:0", "w2:0"}  # frozen there
    assert redis_client.hkeys(Keys("fairqueue", fresh_new).records) == ["f0:0", "f1:0", "f2:0"]
    Resharder(settings(redis_server.url, 4), 16, settle=0).run()
    assert placed(redis_client, 16) == {"held:0": new, **{f"w{n}:0": new for n in range(3)},
                                        **{f"f{n}:0": fresh_new for n in range(3)}}


def test_the_reshard_moves_nothing_while_a_process_has_not_read_the_move_and_names_it(
        redis_server, redis_client):
    late = open_store(FairqueueSettings(redis_url=redis_server.url, shards_check_interval=3600))
    late.reading.role = "worker celery@late"
    late.enqueue(queue="celery", account="acme", job_id="a:0", envelope="{}")
    gone = open_store(FairqueueSettings(redis_url=redis_server.url, shards_check_interval=0.2))
    gone.enqueue(queue="celery", account="acme", job_id="b:0", envelope="{}")  # then stops
    with pytest.raises(ReshardError, match=(
            r"^1 worker\(s\) or producer\(s\) did not read the move within 1 s, so no account "
            r"moved: worker celery@late on \S+ \(pid \d+\) \(read '1'; reads again within "
            r"3\d\d\d s\)")):
        Resharder(settings(redis_server.url, 1), 4, settle=0, timeout=1).run()
    assert redis_client.get("{fairqueue}:shards") == "1>4"
    assert redis_client.hlen("{fairqueue}:records") == 2 and not redis_client.keys("*moved")
    late.reading.read_now()
    late.check_shards()  # it reads the move: the reshard goes on, not waiting for the other
    started = time.monotonic()
    assert Resharder(settings(redis_server.url, 1), 4, settle=0, timeout=1).run().new == 4
    assert time.monotonic() - started < 1
    assert placed(redis_client, 4).keys() == {"a:0", "b:0"}


def test_a_store_of_one_shard_that_a_move_makes_sharded_counts_its_runnable_weight(
        redis_server, redis_client):
    store = open_store(settings(redis_server.url, 1))
    for account in ("a", "b", "c"):
        for n in range(2):
            store.enqueue(queue="celery", account=account, job_id=f"{account}{n}:0",
                          envelope="{}")
    assert redis_client.get("{fairqueue}:queue:celery:weight") is None  # none kept at S = 1
    redis_client.set("{fairqueue}:shards", "1>2")
    store.reading.read_now()
    claim = store.claim(["celery"], 1, "w", AccountLimit().pack(0))
    assert store.sharded and len(claim.leases) == 1
    assert redis_client.get("{fairqueue}:queue:celery:weight") == "3"
