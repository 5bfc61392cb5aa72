"""Upgrading a store from the layout before job records (issue 24, store/writers/upgrade.py):
a worker does not start while that layout holds jobs (the previous version's workers drain
them), and the idempotency of business keys carries over, so a key done before the upgrade still
dedupes.

The old layout is written here by hand, as the previous version's scripts wrote it (see
``git show 423730e:celery_fairqueue/store/scripts/enqueue.lua``)."""

import json
from pathlib import Path

import pytest
import redis

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.errors import StoreLayoutError
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.store import EnqueueResult, FairStore, Lease
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.writers.upgrade import (
    adopt_legacy_idempotency,
    legacy_jobs,
    require_current_layout,
)
from tests.harness import wait_until
from tests.harness.store_tools import claim_jobs
from tests.harness.workers import WorkerProcess

from .conftest import put

TAG = "{fairqueue}"
RETENTION = 3600.0
OLD_KEYS = ("markers", "done", "jobkeys", "seq", "pending", "deliveries", "owners")


def old_job(client: redis.Redis, job_id: str = "t-1:0", account: str = "acme",
            job_key: str = "-") -> None:
    """A ready job of the old layout: envelope, meta, ready member and the counters."""
    envelope = json.dumps({"body": "W1tdLCB7fSwge31d", "headers": {"task": "t", "id": "t-1"}})
    client.hset(f"{TAG}:jobs", job_id, envelope)
    client.hset(f"{TAG}:meta", job_id, f"default {account} 0000000000000001 {job_key}")
    client.zadd(f"{TAG}:q:default:ready", {f"{account}|0000000000000001|{job_id}": 0})
    client.hincrby(f"{TAG}:pending", account, 1)
    client.incr(f"{TAG}:seq")
    client.sadd(f"{TAG}:queues", "default")


def old_marker(state: str, job_id: str, at: float, external_id: str | None = None) -> str:
    """A marker as the old write_marker made it."""
    tail = f',"external_id":{json.dumps(external_id)}' if external_id else ""
    return f'{{"state":"{state}","job_id":{json.dumps(job_id)},"at":{at:.6f}{tail}}}'


def old_done_key(client: redis.Redis, job_key: str, job_id: str, ago: float,
                 marker: str | None = "done", external_id: str | None = None) -> float:
    """A business key whose job finished ``ago`` seconds ago (Redis time), as the old ack left
    it: in the done set, with its marker (``marker`` None: none) and the job holding it."""
    seconds, micros = client.time()
    at = seconds + micros / 1e6 - ago
    stored = encode_id(job_key)
    client.zadd(f"{TAG}:done", {stored: at})
    client.hset(f"{TAG}:jobkeys", stored, job_id)
    if marker:
        client.hset(f"{TAG}:markers", stored, old_marker(marker, job_id, at, external_id))
    return at


def old_started_key(client: redis.Redis, job_key: str, job_id: str) -> None:
    """A key whose job started and left without finishing (a dead letter): only its marker."""
    client.hset(f"{TAG}:markers", encode_id(job_key), old_marker("started", job_id, 1.0))


def enqueue_key(store: FairStore, job_key: str, n: int = 1) -> EnqueueResult:
    """Enqueue a new job of account acme with the business key."""
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "t", "id": f"acme-{n}",
                                                      "fairqueue_account": "acme"})
    return store.enqueue(queue="default", account="acme", job_id=delivery_id(f"acme-{n}", 0),
                         envelope=envelope.to_json(), job_key=job_key)


def claim(store: FairStore, want: int) -> list[Lease]:
    return claim_jobs(store, ["default"], want, "w", AccountLimit().pack(0))


@pytest.fixture
def upgraded(make_store) -> FairStore:
    return make_store(job_retention=RETENTION)


def test_a_key_done_before_the_upgrade_still_dedupes_a_new_enqueue(upgraded, redis_client):
    old_done_key(redis_client, "order-1", "old-1:0", ago=60, external_id="ch_1")
    assert adopt_legacy_idempotency(upgraded) == 1
    marker = upgraded.marker("order-1")
    assert marker is not None and marker.done
    assert (marker.job_id, marker.external_id) == ("old-1:0", "ch_1")
    ttl = redis_client.pttl(upgraded.keys.job_key("order-1")) / 1000
    assert RETENTION - 70 < ttl <= RETENTION - 60  # the rest of its retention
    result = enqueue_key(upgraded, "order-1")
    assert not result.created and result.job_id == "old-1:0"


def test_a_key_done_longer_ago_than_the_retention_is_free_again(upgraded, redis_client):
    old_done_key(redis_client, "order-1", "old-1:0", ago=RETENTION + 60)
    assert adopt_legacy_idempotency(upgraded) == 0
    assert upgraded.marker("order-1") is None
    assert enqueue_key(upgraded, "order-1").created


def test_a_done_key_without_its_marker_gets_a_done_marker_from_when_it_finished(
        upgraded, redis_client):
    at = old_done_key(redis_client, "order-1", "old-1:0", ago=30, marker=None)
    adopt_legacy_idempotency(upgraded)
    marker = upgraded.marker("order-1")
    assert marker is not None and marker.done and marker.job_id == "old-1:0"
    assert marker.at == pytest.approx(at, abs=1e-5)
    assert not enqueue_key(upgraded, "order-1").created


def test_a_failed_jobs_key_stays_started_for_the_rest_of_its_retention(upgraded, redis_client):
    """The old ack put a failed job's key in the done set with its started marker: the side
    effect may have begun, so it is not made done; it dedupes as a done one does."""
    old_done_key(redis_client, "order-1", "old-1:0", ago=30, marker="started")
    adopt_legacy_idempotency(upgraded)
    marker = upgraded.marker("order-1")
    assert marker is not None and marker.state == "started"
    assert redis_client.pttl(upgraded.keys.job_key("order-1")) > 0
    assert not enqueue_key(upgraded, "order-1").created


def test_an_old_started_marker_is_seen_started_and_asks_the_next_job_to_reconcile(
        upgraded, redis_client):
    old_started_key(redis_client, "order-1", "old-1:0")
    assert adopt_legacy_idempotency(upgraded) == 1
    marker = upgraded.marker("order-1")
    assert marker is not None and marker.state == "started" and marker.job_id == "old-1:0"
    assert redis_client.pttl(upgraded.keys.job_key("order-1")) == -1  # as a dead letter's key
    assert enqueue_key(upgraded, "order-1").created  # no job holds it
    [lease] = claim(upgraded, 1)
    assert json.loads(lease.marker)["state"] == "started"


def test_a_job_enqueued_during_the_drain_does_not_run_a_key_done_before_again(
        upgraded, redis_client):
    """Producers of this version may enqueue while old workers drain the old layout: a key
    done there is unknown to the new layout then, so the job is stored; once adopted, its
    claim finds the key done and the task does not run it."""
    old_done_key(redis_client, "order-1", "old-1:0", ago=30, external_id="ch_1")
    old_started_key(redis_client, "order-2", "old-2:0")
    assert enqueue_key(upgraded, "order-1").created
    assert enqueue_key(upgraded, "order-2", n=2).created
    assert adopt_legacy_idempotency(upgraded) == 2
    leases = {lease.stored_key: lease for lease in claim(upgraded, 2)}
    done = json.loads(leases["order-1"].marker)
    assert (done["state"], done["external_id"]) == ("done", "ch_1")
    started = json.loads(leases["order-2"].marker)  # the task asks whether it happened
    assert (started["state"], started["job_id"]) == ("started", "acme-2:0")


def test_a_key_string_this_version_wrote_is_not_overwritten(upgraded, redis_client):
    upgraded.mark_done("order-1", "new-1:0", "ch_new")
    old_done_key(redis_client, "order-1", "old-1:0", ago=30, external_id="ch_old")
    adopt_legacy_idempotency(upgraded)
    marker = upgraded.marker("order-1")
    assert marker is not None and (marker.job_id, marker.external_id) == ("new-1:0", "ch_new")


def test_the_old_records_are_gone_afterwards_and_a_second_adoption_finds_nothing(
        upgraded, redis_client):
    old_done_key(redis_client, "order-1", "old-1:0", ago=30)
    old_done_key(redis_client, "order-2", "old-2:0", ago=RETENTION + 1)
    old_started_key(redis_client, "order-3", "old-3:0")
    redis_client.hset(f"{TAG}:markers", "orphan", old_marker("done", "old-4:0", 1.0))
    redis_client.incr(f"{TAG}:seq")
    redis_client.hset(f"{TAG}:deliveries", "gone:0", 1)
    assert adopt_legacy_idempotency(upgraded) == 2
    assert redis_client.exists(*(f"{TAG}:{name}" for name in OLD_KEYS)) == 0
    assert upgraded.marker("orphan") is None  # outside the done set: the old layout forgot it
    assert adopt_legacy_idempotency(upgraded) == 0
    assert upgraded.marker("order-1") is not None


def test_adoption_works_through_many_batches(upgraded, redis_client):
    for n in range(25):
        old_done_key(redis_client, f"done-{n}", f"old-{n}:0", ago=30)
        old_started_key(redis_client, f"started-{n}", f"old-s{n}:0")
    assert adopt_legacy_idempotency(upgraded, batch=4) == 50
    assert all(upgraded.marker(f"done-{n}").done for n in range(25))
    assert all(upgraded.marker(f"started-{n}").state == "started" for n in range(25))
    assert redis_client.exists(*(f"{TAG}:{name}" for name in OLD_KEYS)) == 0


def test_nothing_is_adopted_while_the_old_layout_holds_jobs(upgraded, redis_client):
    old_job(redis_client, job_key=encode_id("order-1"))
    old_done_key(redis_client, "order-2", "old-2:0", ago=30)
    assert legacy_jobs(upgraded) == 1
    with pytest.raises(StoreLayoutError, match="1 job in the layout of the previous"):
        require_current_layout(upgraded)
    with pytest.raises(StoreLayoutError):
        adopt_legacy_idempotency(upgraded)
    assert upgraded.marker("order-2") is None
    assert redis_client.zcard(f"{TAG}:done") == 1 and redis_client.hlen(f"{TAG}:markers") == 1


def test_a_store_of_this_version_passes_the_check_with_one_exists(upgraded, redis_client):
    put(upgraded, "acme", 1, job_key="order-1")
    assert require_current_layout(upgraded) == 0
    assert legacy_jobs(upgraded) == 0


def worker_of(app: str, request: pytest.FixtureRequest, tmp_path: Path, redis_url: str,
              **env: str) -> WorkerProcess:
    """A real worker, not started: the harness's factory starts one and wants it ready."""
    return WorkerProcess(app, redis_url=redis_url, cwd=request.config.rootpath,
                         log_path=tmp_path / "worker.log", env=env)


def test_a_worker_refuses_to_start_while_the_store_holds_jobs_of_the_previous_layout(
        request, tmp_path, fair, redis_client, redis_url):
    old_job(redis_client)
    old_job(redis_client, job_id="t-2:0")
    worker = worker_of("tests.apps.fair", request, tmp_path, redis_url)
    log = worker.refused_start()
    assert "StoreLayoutError" in log and "2 jobs in the layout of the previous" in log
    assert "celery -A proj fairqueue status" in log and "Upgrading the store layout" in log
    assert redis_client.hlen(f"{TAG}:meta") == 2  # left for the previous version's workers


def test_a_worker_started_on_a_drained_store_adopts_its_keys_and_runs_none_again(
        fair, redis_client, celery_worker_factory):
    key = fair.job.business_key("acme", ("acme", 1), {})
    old_done_key(redis_client, key, "old-1:0", ago=30)
    redis_client.incr(f"{TAG}:seq")
    celery_worker_factory("tests.apps.fair")
    assert redis_client.exists(*(f"{TAG}:{name}" for name in OLD_KEYS)) == 0
    fair.job.delay("acme", 1)
    fair.job.delay("acme", 2)
    assert wait_until(lambda: redis_client.hget("starts", "acme:2") == "1", timeout=20)
    assert redis_client.hget("starts", "acme:1") is None  # done before the upgrade


@pytest.mark.slow
def test_a_worker_that_could_not_check_at_start_stops_once_it_finds_old_jobs(
        request, tmp_path, redis_url, redis_client, redis_server_factory):
    """The store is out of reach when the worker starts: it asks again before its first claim,
    and stops then (exit code 1) instead of claiming beside jobs it cannot read."""
    store_server = redis_server_factory()
    with store_server.client(decode_responses=True) as client:
        old_job(client)
        client.save()  # loaded again when it starts
    store_server.stop()
    worker = worker_of("tests.apps.chaos", request, tmp_path, redis_url,
                       FQ_STORE_REDIS_URL=store_server.url)
    try:
        worker.start()
        store_server.start()
        assert wait_until(lambda: not worker.is_alive(), timeout=30), worker.log_tail()
        assert worker.process is not None and worker.process.returncode == 1
    finally:
        worker.kill()
    log = worker.log_path.read_text()
    assert "this worker stops" in log and "1 job in the layout of the previous" in log
