"""A fleet of idle workers costs a job no more than one worker does: one ring wakes one worker,
one keeper keeps a queue's time (worker/doorbell.py). Real workers on the session Redis, each
polling once a minute, so what runs was rung for; Redis's own counters say who claimed."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from celery import group

from celery_fairqueue import set_account_limit
from tests.harness import wait_until

APP = "tests.apps.fair"
NO_POLL = {"FQ_POLL_INTERVAL": "60"}
pytestmark = pytest.mark.slow


def calls(redis_client, command: str) -> int:
    return int(redis_client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def blocked(redis_client) -> int:
    return sum(1 for c in redis_client.client_list() if c.get("cmd") == "bzpopmin")


def quiet(redis_client, seconds: float = 1.0, timeout: float = 20.0) -> bool:
    """Until no claim has popped a rotation for ``seconds`` (False: not within ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = calls(redis_client, "zpopmin"), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = calls(redis_client, "zpopmin")
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return True
    return False


def idle_fleet(celery_worker_factory, redis_client, count: int, env=None) -> list:
    fleet = [celery_worker_factory(APP, concurrency=1, env={**NO_POLL, **(env or {})})
             for _ in range(count)]
    assert wait_until(lambda: blocked(redis_client) >= count, timeout=20)
    # every worker's first claims are over (on a loaded machine a worker may block on its
    # doorbell before its first claim comes), and the keeper's first heartbeat with them
    assert quiet(redis_client)
    return fleet


def starts(redis_client) -> list[dict]:
    return [json.loads(r) for r in redis_client.lrange("runs", 0, -1)]


def test_a_new_job_wakes_one_idle_worker_of_eight(fair, celery_worker_factory, fair_store,
                                                  redis_client):
    idle_fleet(celery_worker_factory, redis_client, 8)
    claims = calls(redis_client, "zpopmin")  # each claim of a queue pops its rotation
    assert fair.job.delay("acme", 1).get(timeout=15) == 1
    time.sleep(0.5)  # any other worker woken would have claimed by now
    # the one worker's claim: it pops the account (and its job off the account's FIFO), then
    # finds the rotation empty; should the keeper's sweep (every 0.5 s) fall between that
    # worker's wake and its claim, it rings once more and one more worker finds nothing
    # (rings to all eight would pop 10 or more)
    assert calls(redis_client, "zpopmin") - claims <= 4


def test_a_group_of_100_jobs_wakes_all_eight_idle_workers(fair, celery_worker_factory,
                                                          fair_store, redis_client):
    idle_fleet(celery_worker_factory, redis_client, 8)
    result = group(fair.job.s(f"a{n % 10}", n, 0.5) for n in range(100)).apply_async()
    assert sorted(result.get(timeout=60)) == list(range(100))
    first = sorted(starts(redis_client), key=lambda run: run["start"])[:8]
    # every worker took one of the first eight: none waited for a job of 0.5 s to end
    assert len({run["pid"] for run in first}) == 8


def test_a_due_job_is_promoted_by_one_worker(fair, celery_worker_factory, fair_store,
                                             redis_client):
    idle_fleet(celery_worker_factory, redis_client, 8)
    claims = calls(redis_client, "zpopmin")
    job = fair.job.apply_async(("acme", 2), countdown=1)
    assert job.get(timeout=15) == 2
    time.sleep(0.5)
    # the keeper's claim when called (the rotation is empty), and its claim when the job is
    # due (it takes the job, popping it off its account's FIFO, then finds the rotation
    # empty); no other worker claims
    assert calls(redis_client, "zpopmin") - claims <= 4


def test_a_keeper_called_for_a_due_job_claims_only_when_it_is_due(fair, celery_worker_factory,
                                                                 fair_store, redis_client):
    """The call on the queue's clock carries the due time: the keeper arms its timer for it
    without a claim to read it from the store (that claim cost a delayed job a tenth of its
    commands). Its claim at the due time takes the job and leaves the rotation empty: one pop
    of the rotation, one of the account's FIFO; one more if its timer fires a fraction of a
    millisecond before Redis's clock says the job is due (the clocks are compared at each
    heartbeat)."""
    idle_fleet(celery_worker_factory, redis_client, 4)
    claims = calls(redis_client, "zpopmin")
    sent = time.time()
    job = fair.job.apply_async(("acme", 3), countdown=1)
    assert job.get(timeout=15) == 3
    assert starts(redis_client)[-1]["start"] >= sent + 1
    time.sleep(0.5)
    assert calls(redis_client, "zpopmin") - claims <= 3


def test_a_worker_killed_right_after_it_took_a_ring_strands_no_job(fair, celery_worker_factory,
                                                                   fair_store, redis_client,
                                                                   redis_server):
    """A client that blocks on the doorbell before any worker, takes the first ring and never
    claims (a worker killed right after its BZPOPMIN): the keeper's sweep rings again, and
    another worker runs the job within a second."""
    taken: list = []
    dead = redis_server.client(socket_timeout=60)
    bell = fair_store.keys.queue("celery").bell
    waiter = threading.Thread(target=lambda: taken.append(dead.bzpopmin([bell], timeout=30)))
    waiter.start()
    assert wait_until(lambda: blocked(redis_client) >= 1, timeout=5)
    idle_fleet(celery_worker_factory, redis_client, 2)
    sent = time.time()
    job = fair.job.delay("acme", 3)
    waiter.join(timeout=10)
    assert taken and taken[0] is not None  # the first ring went to the dead one
    assert job.get(timeout=15) == 3
    # the sweep comes within SWEEP_SECONDS (0.5 s), then one claim: about half a second, and
    # far less than a poll (60 s here), with room for a loaded machine
    assert starts(redis_client)[0]["start"] - sent < 4.0


def test_a_new_keeper_takes_over_when_the_keeper_dies(fair, celery_worker_factory, fair_store,
                                                      redis_client):
    fast = {"FQ_HEARTBEAT_SECONDS": "0.5"}  # a keeper's lease: two beats, 1 s
    fleet = idle_fleet(celery_worker_factory, redis_client, 2, env=fast)
    keeper = fair_store.keys.queue("celery").keeper
    assert wait_until(lambda: redis_client.get(keeper), timeout=5)
    first = redis_client.get(keeper)
    dying = next(w for w in fleet if f"/{w.pid}/" in first)
    os.kill(dying.pid, signal.SIGKILL)
    assert wait_until(lambda: redis_client.get(keeper) not in (None, first), timeout=5)
    job = fair.job.apply_async(("acme", 4), countdown=1)
    due = time.time() + 1
    assert job.get(timeout=15) == 4
    # the new keeper's timer, not a poll (60 s here), with room for a loaded machine
    assert starts(redis_client)[0]["start"] - due < 3.0


def test_a_limited_account_keeps_its_rate_before_the_first_heartbeat(fair, celery_worker_factory,
                                                                     fair_store, redis_client):
    """A worker keeps the time itself until a heartbeat says who keeps it: its first beat is
    30 s away here, and a 10/s account still runs at 10/s, not once a poll."""
    set_account_limit(fair.app, "acme", rate="10/s", burst=1)
    for n in range(10):
        fair.job.delay("acme", n)
    celery_worker_factory(APP, concurrency=2, env={**NO_POLL, "FQ_HEARTBEAT_SECONDS": "30",
                                                   "FQ_LEASE_SECONDS": "60"})
    assert wait_until(lambda: redis_client.llen("runs") >= 10, timeout=10)
    times = sorted(run["start"] for run in starts(redis_client))
    # eight tokens at 10/s after the second job's: not faster, and not a poll or a heartbeat
    # (30 s) later (from the second job's start: the first task of a new worker may start late)
    assert 0.75 <= times[-1] - times[1] < 2.0


def test_a_busy_keeper_still_promotes_a_due_job_for_an_idle_worker(fair, celery_worker_factory,
                                                                   fair_store, redis_client):
    """The keeper's slot is taken by a long job of a queue only it serves; a delayed job of
    the queue it shares with an idle worker is promoted when due, and the idle worker runs it
    then, not when the keeper's slot frees."""
    keeper = celery_worker_factory(APP, concurrency=1, queues=("celery", "critical"),
                                   env=NO_POLL)
    key = fair_store.keys.queue("celery").keeper
    assert wait_until(lambda: f"/{keeper.pid}/" in (redis_client.get(key) or ""), timeout=10)
    idle = celery_worker_factory(APP, concurrency=1, queues=("celery",), env=NO_POLL)
    time.sleep(1.5)  # its first heartbeat (1 s here) said it keeps no time
    fair.job.apply_async(("busy", 1, 6.0), queue="critical")
    assert wait_until(lambda: redis_client.hget("starts", "busy:1"), timeout=10)
    job = fair.job.apply_async(("acme", 2), countdown=1)
    due = time.time() + 1
    assert job.get(timeout=15) == 2
    run = next(run for run in starts(redis_client) if run["key"] == "acme:2")
    assert run["pid"] == idle.pid
    # promoted when due, not about 5 s later when the keeper is free
    assert run["start"] - due < 3.0
