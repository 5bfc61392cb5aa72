"""A fair store on Redis Cluster (``redis+cluster://``): jobs run, MOVED/ASK/TRYAGAIN are
followed, and a primary's failover loses nothing acknowledged.

On loopback: three primaries with one replica each (``redis-cli --cluster create``). Every key
of one store shares the hash tag ``{fairqueue}``, so the store lives in one slot of one shard.
Redis Cluster replicates asynchronously, so an enqueue acknowledged in the last moment before
its primary dies may never reach the replica that takes over; ``fairqueue_wait_replicas=1``
(WAIT after each enqueue) is what makes "nothing acknowledged is lost" a guarantee, and that is
what the failover test asserts; without it the losses are measured and bounded. Each test runs
again with the store in 16 shards (``fairqueue_shards``): the shards' tags spread them over the
three primaries, so a failover or a slot's move takes some shards away, not all, and the
workers wait on each shard's doorbell (a BZPOPMIN per shard, at the shard's node).
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from urllib.parse import quote

import pytest
import redis
from redis.cluster import key_slot

from celery_fairqueue import ConfigurationError, StoreUnavailableError
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore, open_store
from celery_fairqueue.store.connection.cluster import (
    MIN_REDIS_PY,
    StoreClusterClient,
    parse_cluster_url,
)
from celery_fairqueue.store.formats.keys import Keys
from celery_fairqueue.store.shards.placement import account_shard
from tests.harness import wait_until
from tests.harness.producer import Producer
from tests.harness.redis_cluster import ClusterGroup
from tests.integration.conftest import put

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in redis.__version__.split(".")[:2]) < MIN_REDIS_PY,
    reason=f"redis+cluster:// needs redis-py {MIN_REDIS_PY} or later (Celery 5.5's kombu pins "
           "redis-py <= 5.2.1)")

APP = "tests.apps.cluster"
RATE = 25.0  # jobs a second
ACCOUNTS = 4
SHARDS = 16  # the sharded runs: about five shards a primary
PASSWORD = "s3cret/with:odd@chars"


def test_cluster_settings_are_read_and_checked_without_connecting():
    """The URL names startup nodes (``;``-separated, as Celery's sentinel form), TLS with
    ``rediss+cluster://``; nothing connects until the first command, and a cluster that does
    not answer is a StoreUnavailableError naming the store without its password."""
    nodes, options = parse_cluster_url(
        f"rediss+cluster://:{quote(PASSWORD, safe='')}@10.0.0.1:7000;"
        "rediss+cluster://10.0.0.2?ssl_cert_reqs=required")
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 6379)]
    assert options == {"password": PASSWORD, "ssl": True, "ssl_cert_reqs": "required"}
    with pytest.raises(ConfigurationError, match="only database 0"):
        parse_cluster_url("redis+cluster://h:7000/2")
    with pytest.raises(ConfigurationError, match="not a redis\\+cluster:// part"):
        parse_cluster_url("redis+cluster://h:7000;redis://h:7001")
    dead = f"redis+cluster://:{quote(PASSWORD, safe='')}@127.0.0.1:1"
    settings = FairqueueSettings(redis_url=dead)
    with pytest.raises(ConfigurationError, match="'master_name' is not used by a redis"):
        FairStore.from_settings(FairqueueSettings(
            redis_url=dead, redis_transport_options={"master_name": "mymaster"}))
    store = FairStore.from_settings(settings)  # no server: not an error yet
    assert isinstance(store.client, StoreClusterClient)
    with pytest.raises(StoreUnavailableError, match="cannot be connected") as raised:
        put(store, "acme", 1)
    assert PASSWORD not in str(raised.value) and quote(PASSWORD, safe="") not in str(raised.value)
    # the key names are those of a single Redis: one hash tag, so one slot
    keys = store._keys_for("claim", [store.keys.queue("q")])
    assert len({key_slot(k.encode()) for k in keys}) == 1


@pytest.fixture
def cluster(tmp_path):
    group = ClusterGroup(tmp_path / "cluster")
    yield group
    group.stop()


@pytest.fixture
def cluster_app(monkeypatch, redis_server):
    """``cluster_app(url, wait_replicas, shards=1)``: the test app module, imported for this
    store."""
    def load(url: str, wait_replicas: int, shards: int = 1):
        monkeypatch.setenv("FQ_CLUSTER_URL", url)
        monkeypatch.setenv("FQ_WAIT_REPLICAS", str(wait_replicas))
        monkeypatch.setenv("FQ_SHARDS", str(shards))
        sys.modules.pop(APP, None)  # the settings are read at import
        return importlib.import_module(APP)

    yield load
    sys.modules.pop(APP, None)


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_every_store_operation_runs_on_a_cluster(shards, cluster):
    """Beyond enqueue and claim: chunks of scripts, limits (a MULTI/EXEC), the operator's views
    (pipelines, HSCAN), dead letters, cancel, the event stream and the recorders' lock, TIME,
    PING and SCAN at the store's own primary, and the WAIT of fairqueue_wait_replicas."""
    from celery import Celery

    from celery_fairqueue import DeadLetters
    from celery_fairqueue.limits import AccountLimit
    from celery_fairqueue.store import EventReader, Leadership, StoreInspector
    from tests.harness.store_tools import ack_many, claim_jobs, enqueue_many

    app = Celery("t", broker="redis://127.0.0.1:1/0")
    app.conf.update(fairqueue_redis_url=cluster.url, fairqueue_wait_replicas=1,
                    fairqueue_shards=shards)
    store = open_store(FairqueueSettings(redis_url=cluster.url, wait_replicas=1, shards=shards))
    app._fairqueue_store = store
    store.ping()
    assert abs(store.server_time() - time.time()) < 5
    store.set_limit("acme", AccountLimit(rate="100/s", concurrency=5))
    assert dict(store.limits())["acme"].concurrency == 5
    assert put(store, "acme", 1) == "acme-1:0"  # WAIT 1: the replica confirmed it
    results = enqueue_many(store, [dict(queue="default", account=f"a{n % 3}", job_id=f"m{n}:0",
                                        envelope="{}") for n in range(10)], chunk=4)
    assert all(r.created for r in results)
    status = StoreInspector(app).status()
    assert status.queues[0].ready == 11
    assert StoreInspector(app).accounts().rows
    claimed = claim_jobs(store, ["default"], 20, "w1", AccountLimit().pack(0))
    assert len(claimed) == 11 and all(ack_many(store, claimed))
    store.bury("x-1:0", "poison", record={"task": "t", "account": "acme"})
    assert DeadLetters(app, store).count() == 1 and DeadLetters(app, store).list()
    put(store, "acme", 2, due=time.time() + 3600)
    assert store.cancel("acme-2") == ["acme-2:0"]
    reader = EventReader(store, "c1")
    reader.ensure_group()
    store.emit("succeeded", job="acme-1:0")
    events = reader.read(block_ms=10)
    assert events and reader.ack(events) is None and reader.backlog() == 0
    lead = Leadership(store, 5)
    assert lead.acquire() and lead.renew()
    lead.release()
    assert store.clear() > 0 and store.clear() == 0
    store.client.close()


def test_a_queues_shared_limit_holds_across_a_clusters_16_shards(cluster):
    """A queue spans the shards, which live on three primaries: its rate and its concurrency
    hold as one, each granted at the store's home (store/shards/quota.py)."""
    from celery_fairqueue.limits import AccountLimit

    store = open_store(FairqueueSettings(redis_url=cluster.url, shards=SHARDS))
    store.set_queue_limit("linkedin", AccountLimit(rate="1/h", burst=7))
    store.set_queue_limit("email", AccountLimit(concurrency=3))
    for n in range(40):
        put(store, f"a{n % 20}", n, queue="linkedin")
        put(store, f"a{n % 20}", 100 + n, queue="email")
    assert len({account_shard(f"a{n}", SHARDS) for n in range(20)}) > 8

    def claim(queue: str) -> list:
        held = []
        for _ in range(20):  # as a worker: again at once while the store says so
            got = store.claim([queue], 4, "w1", AccountLimit().pack(0))
            held += got.leases
            if not got.leases and got.next_due != 0:
                return held
        return held

    rated = claim("linkedin")
    assert len(rated) == 7
    capped = claim("email")
    assert len(capped) == 3
    capped[0].ack()
    assert len(claim("email")) == 1
    store.client.close()


def errorstats(server) -> dict[str, int]:
    """How often a node replied each error code (INFO errorstats)."""
    with server.client(decode_responses=True) as client:
        stats = client.info("errorstats")
    return {name.removeprefix("errorstat_"): int(value["count"]) for name, value in stats.items()}


def migrate_slot(cluster: ClusterGroup, slot: int, source, target, ask_window: float) -> None:
    """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster reshard`` does:
    IMPORTING/MIGRATING, MIGRATE of its keys, then the new owner announced to every primary;
    ``ask_window`` seconds pass between the last key moved and the announcement, during which
    the source answers ASK for the slot's keys."""
    source_id, target_id = cluster.node_id(source), cluster.node_id(target)
    with cluster.node(source) as src, cluster.node(target) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        time.sleep(ask_window)
        for server in cluster.primaries():
            with cluster.node(server) as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)


def drained(cluster: ClusterGroup, shards: int = 1) -> bool:
    """No job left in any of the store's ``shards`` shards."""
    with cluster.client() as client:
        return all(int(client.hlen(Keys(shard=n).records)) == 0 for n in range(shards))


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_jobs_run_while_the_store_slot_moves_to_another_primary(
        figure, shards, cluster, cluster_app, celery_worker_factory, ledger):
    """Real workers and a producer on a cluster store; mid-stream the store's slot moves to
    another primary. While its keys are split between the two, scripts get TRYAGAIN (their
    keys must be on one node) and single-key commands ASK; afterwards every client's slot map
    is stale and the old primary answers MOVED. All are followed: every acknowledged job runs
    exactly once, and jobs keep coming after the move. In 16 shards the slot that moves is
    that of the shard of the producer's first account."""
    app = cluster_app(cluster.url, 0, shards)
    env = {"FQ_CLUSTER_URL": cluster.url, "FQ_WAIT_REPLICAS": "0", "FQ_SHARDS": str(shards)}
    workers = [celery_worker_factory(APP, env=env) for _ in range(2)]
    keys = Keys(shard=account_shard("acct0", shards))
    slot = key_slot(keys.records.encode())
    source = cluster.owner(keys.records)
    target = next(s for s in cluster.primaries() if s is not source)
    before = errorstats(source)

    producer = Producer(app.job, RATE, ACCOUNTS)
    producer.start()
    assert wait_until(lambda: len(ledger) >= 40, 20), "jobs do not run before the move"
    began = time.monotonic()
    migrate_slot(cluster, slot, source, target, ask_window=0.5)
    moved = time.monotonic()
    assert cluster.owner(keys.records) is target
    assert wait_until(lambda: producer.acked_after(moved) >= 2 * RATE, 20), producer.errors[-3:]
    producer.finish()
    assert wait_until(lambda: drained(cluster, shards), 30), "jobs left in the store"
    time.sleep(0.5)  # a job acked in the store has written its side effect before

    replies = {code: n - before.get(code, 0) for code, n in errorstats(source).items()}
    counts = ledger.counts()
    lost = sorted(set(producer.acked) - set(counts))
    duplicates = {key: n for key, n in counts.items() if n > 1}
    figure(f"cluster slot migration, {shards} shard(s): {len(producer.acked)} enqueued, "
           f"{sum(1 for k in producer.acked if k in counts)} run, {len(lost)} lost, "
           f"{len(duplicates)} run twice; the move took {moved - began:.1f} s; the old primary "
           f"answered MOVED {replies.get('MOVED', 0)}, ASK {replies.get('ASK', 0)}, TRYAGAIN "
           f"{replies.get('TRYAGAIN', 0)} times; {len(producer.errors)} enqueues retried")
    assert all(worker.is_alive() for worker in workers)
    assert not lost, f"acknowledged jobs lost: {lost}"
    assert not duplicates, f"jobs that ran twice: {duplicates}"
    assert not set(counts) - set(producer.acked), "side effects of jobs never acknowledged"
    assert replies.get("MOVED", 0) > 0, f"no client met the moved slot: {replies}"


@pytest.mark.parametrize(("wait_replicas", "shards"), [(0, 1), (1, 1), (1, SHARDS)],
                         ids=["async", "wait1", f"wait1-{SHARDS}shards"])
def test_a_primary_failover_loses_no_acknowledged_job(
        figure, wait_replicas, shards, cluster, cluster_app, celery_worker_factory, ledger):
    """SIGKILL the primary holding the store's slot under a steady stream of jobs; its replica
    takes over (``cluster-node-timeout`` 1.5 s) and the killed node, restarted, comes back as
    the new primary's replica. Producers and workers follow. With
    ``fairqueue_wait_replicas=1`` no acknowledged job is lost (an enqueue that no replica
    confirmed raised instead, and the producer made it again); without it, only jobs
    acknowledged in the last moment before the kill may be. In 16 shards, the killed primary
    is the home shard's (the worker registry) and holds about a third of the shards."""
    app = cluster_app(cluster.url, wait_replicas, shards)
    env = {"FQ_CLUSTER_URL": cluster.url, "FQ_WAIT_REPLICAS": str(wait_replicas),
           "FQ_SHARDS": str(shards)}
    workers = [celery_worker_factory(APP, env=env) for _ in range(2)]
    keys = Keys()
    primary = cluster.owner(keys.records)

    producer = Producer(app.job, RATE, ACCOUNTS)
    producer.start()
    assert wait_until(lambda: len(ledger) >= 40, 20), "jobs do not run before the failover"
    killed_at = time.monotonic()
    primary.kill()
    killed = time.monotonic()

    def promoted() -> bool:
        try:
            return cluster.owner(keys.records) is not primary and cluster.state_ok()
        except RuntimeError:
            return False

    assert wait_until(promoted, 20, 0.1), cluster.log_tail()
    switched = time.monotonic()
    primary.start()  # rejoins as the new primary's replica (its nodes.conf says so)
    assert wait_until(lambda: producer.acked_after(switched) >= 3 * RATE, 30), (
        f"{producer.acked_after(switched)} jobs enqueued after the failover; last errors: "
        f"{producer.errors[-3:]}\n{cluster.log_tail()}")
    producer.finish()
    first_after = min(at for at in producer.acked.values() if at > killed)
    assert wait_until(lambda: drained(cluster, shards), 30), (
        "jobs left in the store\n" + "\n".join(w.log_tail(15) for w in workers))
    time.sleep(0.5)  # a job acked in the store has written its side effect before

    counts = ledger.counts()
    acked = producer.acked
    lost = {key: at for key, at in acked.items() if key not in counts}
    duplicates = {key: n for key, n in counts.items() if n > 1}
    figure(f"cluster failover, {shards} shard(s): {len(acked)} enqueued, "
           f"{sum(1 for k in acked if k in counts)} run, {len(lost)} lost, enqueues acknowledged "
           f"again {first_after - killed_at:.1f} s after the kill (replica "
           f"promoted after {switched - killed_at:.1f} s); fairqueue_wait_replicas="
           f"{wait_replicas}, .delay() median {statistics.median(producer.latencies) * 1000:.1f}"
           f" ms, {len(producer.errors)} enqueues retried, {len(duplicates)} run twice")

    assert all(worker.is_alive() for worker in workers)
    logs = "\n".join(worker.log_path.read_text() for worker in workers)
    # the workers warned once that the store failed, and once that it answers again
    assert "retrying quietly until the fair store answers" in logs and "works again" in logs
    assert not set(counts) - set(acked), "side effects of jobs never acknowledged"
    late = {key: round(at - killed, 3) for key, at in lost.items() if at > killed + 0.05}
    assert not late, f"jobs acknowledged after the kill were lost: {late}"
    early = {key: round(killed_at - at, 3) for key, at in lost.items() if at < killed_at - 1.0}
    assert not early, f"jobs acknowledged long before the kill were lost: {early}"
    if wait_replicas:
        assert not lost, f"acknowledged jobs lost although a replica confirmed each: {lost}"
    assert producer.acked_after(killed) >= 3 * RATE  # jobs kept coming and running
    with cluster.client() as client:
        assert sum(int(client.hget(Keys(shard=n).stats, "acked") or 0)
                   for n in range(shards)) > 0


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_the_console_operations_run_on_a_cluster(shards, cluster):
    """Pause and resume, run now, the worker registry and its heartbeat, and every console view
    (pipelines at the store's slot, the store's clock from its own primary)."""
    from celery import Celery

    from celery_fairqueue.limits import AccountLimit
    from celery_fairqueue.store import StoreInspector, WorkerRegistration
    from tests.harness.store_tools import claim_jobs

    app = Celery("t", broker="redis://127.0.0.1:1/0")
    app.conf.update(fairqueue_redis_url=cluster.url, fairqueue_shards=shards)
    store = open_store(FairqueueSettings(redis_url=cluster.url, shards=shards))
    app._fairqueue_store = store
    inspector = StoreInspector(app)
    no_limit = AccountLimit().pack(0)
    put(store, "acme", 1)
    put(store, "acme", 2, due=time.time() + 3600)
    put(store, "other", 1)
    store.pause("acme", by="ops", reason="x")
    assert [j.account for j in claim_jobs(store, ["default"], 5, "w1", no_limit)] == ["other"]
    store.register_worker("w1", WorkerRegistration("celery@a", ("default",), 2))
    assert store.heartbeat("w1", WorkerRegistration("celery@a", ("default",), 2),
                           ["other-1:0"]) == []
    assert [w.name for w in inspector.console.workers()] == ["celery@a"]
    [state] = inspector.console.account_state("acme", ["default"])
    assert (state.reason, state.paused_by, state.ready, state.delayed_future) == (
        "paused", "ops", 1, 1)
    assert inspector.console.queue_oldest_waiting()["default"] is not None
    assert [j.state for j in inspector.console.live_jobs("acme")] == ["ready", "delayed"]
    assert inspector.console.oldest_accounts("default", 5)[0][0] == "acme"
    assert store.run_now("acme-2") == ["acme-2:0"]
    assert store.resume("acme") is True
    assert len(claim_jobs(store, ["default"], 5, "w1", no_limit)) == 2
    assert inspector.status().workers
    store.unregister_worker("w1")
    assert inspector.console.workers() == []
    assert store.clear() > 0
    store.client.close()


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_an_idle_worker_on_a_cluster_store_is_woken_not_polled(shards, cluster, cluster_app,
                                                                 celery_worker_factory, ledger):
    """The scripts ring the queue's doorbell of their shard, at the shard's node; the worker
    waits on each shard's doorbells with a BZPOPMIN of its own (a blocking pop waits on one
    slot), so it hears the ring on whichever primary the account's shard lives."""
    app = cluster_app(cluster.url, 0, shards)
    celery_worker_factory(APP, env={"FQ_CLUSTER_URL": cluster.url, "FQ_WAIT_REPLICAS": "0",
                                    "FQ_POLL_INTERVAL": "60", "FQ_SHARDS": str(shards)})
    time.sleep(1)  # its first claims found nothing: it waits
    accounts = ["acme", "umbrella", "vandelay"]  # in 16 shards: one on each primary
    for account in accounts:
        app.job.delay(account, 1)
    assert wait_until(lambda: ledger.counts() == {f"{a}:1": 1 for a in accounts}, 15)
