"""Issue 47 with real workers: a provider's 429 with Retry-After holds its scope (the account's
jobs in the queue, or the whole queue) until then. A real redis-server, real ``celery worker``
processes and a fake provider the test owns (tests/apps/provider.py: acme's calls in queue
"default" answer 429 with ``Retry-After: 3`` from acme's 10th call, for 3 s); its ledger of
calls, timed by Redis's clock, is what is measured."""

import importlib
import json
import time

import pytest

import celery_fairqueue
from tests.harness import wait_until

RATE = 10.0
PAUSE = 3.0
pytestmark = pytest.mark.slow


@pytest.fixture
def provider(redis_server, redis_client):
    """The app; each account's limit in each queue (its own there: one queue's jobs do not
    take the other's tokens) 10/s, burst 2, 4 at a time."""
    module = importlib.import_module("tests.apps.provider")
    for account in ("acme", "other"):
        for queue in ("default", "email"):
            celery_fairqueue.set_account_limit(module.app, account, rate=f"{RATE:g}/s",
                                               burst=2, concurrency=4, queue=queue)
    return module


def calls(redis_client) -> list[dict]:
    return [json.loads(raw) for raw in redis_client.lrange("calls", 0, -1)]


def done(redis_client) -> list[dict]:
    return [json.loads(raw) for raw in redis_client.lrange("done", 0, -1)]


def run(provider, redis_client, worker_factory, jobs: dict[tuple[str, str], int],
        task=None, env=None, first: int = 0) -> list[dict]:
    """Enqueue ``jobs`` (per account and queue; numbered from ``first``, each queue's from a
    thousand on: a job's business key is its account and number), run one worker of 16
    threads until every job succeeded; the provider's ledger of calls."""
    task = task or provider.call
    for offset, ((account, queue), count) in enumerate(jobs.items()):
        for n in range(count):
            task.apply_async(args=(account, first + 1000 * offset + n), queue=queue)
    worker = worker_factory("tests.apps.provider", queues=["default", "email"], concurrency=16,
                            env=env)
    total = sum(jobs.values())
    assert wait_until(lambda: redis_client.llen("done") >= total, timeout=90), \
        (redis_client.llen("done"), total)
    worker.stop()  # each run its own worker (a warm shutdown: its acks are settled)
    return calls(redis_client)


def first_429(ledger: list[dict]) -> dict:
    return min((c for c in ledger if c["status"] == 429), key=lambda c: c["at"])


def running_at(ledger: list[dict], trip: dict, redis_client, account: str, queue: str,
               figure=None) -> int:
    """The account's jobs in ``queue`` running at the 429 ``trip``: started before its retry
    (and the hold) was stored, calling after the 429. The worker stores the retry a few
    milliseconds after the provider's answer; a job claimed in between was running then."""
    held = min(float(t) for t in redis_client.lrange("retried", 0, -1) if float(t) >= trip["at"])
    if figure:
        figure(f"slow down: from the 429 to its retry stored (task_retry) "
               f"{1000 * (held - trip['at']):.1f} ms")
    return len([c for c in ledger if c["account"] == account and c["queue"] == queue
                and c["start"] <= held and c["at"] >= trip["at"]])


def between(ledger: list[dict], start: float, end: float, **match) -> list[dict]:
    return [c for c in ledger if start < c["at"] < end
            and all(c[k] == v for k, v in match.items())]


def throughput(ledger: list[dict], account: str, queue: str = "default") -> float:
    """Calls a second of ``account`` in ``queue``, its burst left out (from its 3rd call)."""
    times = sorted(c["at"] for c in ledger if c["account"] == account and c["queue"] == queue)
    return (len(times) - 3) / (times[-1] - times[2])


def test_after_a_429_at_most_the_running_acme_calls_reach_the_provider_until_retry_after_ends(
        provider, redis_client, celery_worker_factory, figure):
    provider.configure(redis_client, "acme", "default", trip_at=10)
    ledger = run(provider, redis_client, celery_worker_factory,
                 {("acme", "default"): 60, ("other", "default"): 60, ("acme", "email"): 40})
    trip = first_429(ledger)
    running = running_at(ledger, trip, redis_client, "acme", "default", figure)
    during = between(ledger, trip["at"], trip["at"] + PAUSE, account="acme", queue="default")
    figure(f"slow down: acme calls in the {PAUSE:g} s after its 429: {len(during)} "
           f"({running} running then; 10/s without the hold: ~{PAUSE * RATE:.0f})")
    assert len(during) <= running, (len(during), running)
    # after the pause, acme runs at its limit again: its burst, then 10/s (no burst beyond it)
    after = between(ledger, trip["at"] + PAUSE, trip["at"] + PAUSE + 2.0, account="acme",
                    queue="default")
    figure(f"slow down: acme calls in the 2 s after the pause: {len(after)} (limit: 2 + 20)")
    assert 0.7 * 2 * RATE <= len(after) <= 2 + 2 * RATE + 1, len(after)


def test_no_acme_job_is_dead_lettered_or_charged_an_attempt_it_did_not_use_while_it_waited(
        provider, redis_client, celery_worker_factory):
    provider.configure(redis_client, "acme", "default", trip_at=10)
    ledger = run(provider, redis_client, celery_worker_factory,
                 {("acme", "default"): 40, ("other", "default"): 20})
    acme = [d for d in done(redis_client) if d["account"] == "acme"]
    assert sorted(d["job"] for d in acme) == list(range(40))  # each succeeded once
    trip = first_429(ledger)
    held = min(float(t) for t in redis_client.lrange("retried", 0, -1) if float(t) >= trip["at"])
    for finished in acme:  # its retries are its 429s: one attempt a call, none more
        mine = [c for c in ledger if c["account"] == "acme" and c["job"] == finished["job"]]
        assert finished["retries"] == len([c for c in mine if c["status"] == 429]), finished
        if min(c["start"] for c in mine) > held:  # it waited out the pause: no retry burnt
            assert finished["retries"] == 0, finished
    assert celery_fairqueue.store_for(provider.app).stats().get("dead", 0) == 0


def test_another_account_keeps_its_throughput_and_acmes_other_queue_is_not_held(
        provider, redis_client, celery_worker_factory, figure):
    jobs = {("acme", "default"): 60, ("other", "default"): 60, ("acme", "email"): 60}
    baseline = run(provider, redis_client, celery_worker_factory, jobs)
    redis_client.delete("calls", "done", "provider:calls")
    provider.configure(redis_client, "acme", "default", trip_at=10)
    slowed = run(provider, redis_client, celery_worker_factory, jobs, first=100)  # new keys
    trip = first_429(slowed)
    email = between(slowed, trip["at"], trip["at"] + PAUSE, account="acme", queue="email")
    other = between(slowed, trip["at"], trip["at"] + PAUSE, account="other", queue="default")
    figure(f"slow down: other's calls/s {throughput(baseline, 'other'):.2f} without the 429, "
           f"{throughput(slowed, 'other'):.2f} with; in the pause other's calls {len(other)}, "
           f"acme's email calls {len(email)}")
    # each runs at its own limit through acme's pause (held, it would make none then); how
    # close a loaded machine's workers keep to 10/s is not the pause's to say, hence 0.7
    assert len(other) >= 0.7 * PAUSE * RATE, len(other)
    assert len(email) >= 0.7 * PAUSE * RATE, len(email)  # all of acme's limit, in its queue
    assert throughput(slowed, "other") >= 0.85 * throughput(baseline, "other")


def test_scope_queue_holds_every_accounts_jobs_in_the_queue_and_no_other_queue(
        provider, redis_client, celery_worker_factory, figure):
    provider.configure(redis_client, "acme", "default", trip_at=10)
    ledger = run(provider, redis_client, celery_worker_factory,
                 {("acme", "default"): 40, ("other", "default"): 40, ("acme", "email"): 40},
                 task=provider.call_queue_wide)
    trip = first_429(ledger)
    running = sum(running_at(ledger, trip, redis_client, a, "default", figure if a == "acme"
                             else None) for a in ("acme", "other"))
    during = between(ledger, trip["at"], trip["at"] + PAUSE, queue="default")
    figure(f"slow down, scope queue: the queue's calls in the pause {len(during)} ({running} "
           "running then)")
    assert len(during) <= running, (len(during), running)
    email = between(ledger, trip["at"], trip["at"] + PAUSE, queue="email")
    assert len(email) >= 0.7 * PAUSE * RATE, len(email)


def test_a_retry_after_of_ten_years_is_cut_to_fairqueue_max_slow_down(
        provider, redis_client, celery_worker_factory):
    provider.configure(redis_client, "acme", "default", trip_at=1,
                       retry_after=str(10 * 365 * 86400), refuses_for=0.5)
    started = time.time()
    run(provider, redis_client, celery_worker_factory, {("acme", "default"): 3},
        env={"FQ_MAX_SLOW_DOWN": "2"})
    assert time.time() - started < 30  # not ten years, nor fairqueue_max_retry_delay
    ledger = calls(redis_client)
    trip = first_429(ledger)
    retried = min(c["at"] for c in ledger if c["job"] == trip["job"] and c["at"] > trip["at"])
    assert 1.8 <= retried - trip["at"] <= 4.0


@pytest.mark.parametrize("retry_after", ["soon", "-3"])
def test_a_non_numeric_or_negative_retry_after_is_treated_as_none_with_a_warning(
        provider, redis_client, celery_worker_factory, retry_after):
    provider.configure(redis_client, "acme", "default", trip_at=1, retry_after=retry_after,
                       refuses_for=0.1)
    for n in range(5):
        provider.call.apply_async(args=("acme", n), queue="default")
    worker = celery_worker_factory("tests.apps.provider", queues=["default"], concurrency=4)
    assert wait_until(lambda: redis_client.llen("done") >= 5, timeout=30)
    assert celery_fairqueue.store_for(provider.app).slow_downs() == []
    assert "Retry-After that is neither" in worker.log_path.read_text()
