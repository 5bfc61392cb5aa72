"""Reliable jobs on real workers: markers, reconciliation, classified retries, dead letters."""

import itertools
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from celery_fairqueue import PermanentError
from celery_fairqueue.store import store_for
from tests.harness import wait_until

APP = "tests.apps.reliable"
CRASH_ENV = {"FQ_LEASE_SECONDS": "2", "FQ_HEARTBEAT_SECONDS": "0.5"}


def attempts(redis_client, lead):
    return int(redis_client.hget("attempts", str(lead)) or 0)


def test_permanent_failure_is_attempted_once_and_dead_lettered(rel, celery_worker_factory,
                                                               redis_client, dlq, ledger):
    redis_client.set("fail:1", "permanent")
    celery_worker_factory(APP)
    result = rel.send_message.delay("acme", 1)
    with pytest.raises(PermanentError, match="lead 1 was deleted"):
        result.get(timeout=20)
    assert wait_until(lambda: dlq.count() == 1, timeout=10)
    [letter] = dlq.list()
    assert attempts(redis_client, 1) == 1
    assert letter.task == "tests.apps.reliable.send_message"
    assert letter.account == "acme" and letter.args == ["acme", 1] and letter.attempts == 1
    assert letter.reason == "permanent: lead 1 was deleted"
    assert "PermanentError" in letter.error and "fail_as_told" in letter.traceback
    assert letter.job_key == rel.send_message.business_key("acme", ("acme", 1), {})
    assert ledger.counts() == {}


def test_a_permanent_error_is_logged_once_as_a_warning_and_a_fault_as_an_error(
        rel, celery_worker_factory, redis_client, dlq):
    redis_client.set("fail:11", "permanent")  # the task's own verdict
    redis_client.set("fail:12", "http:404:5")  # a failure classified permanent
    worker = celery_worker_factory(APP)
    verdict, fault = rel.send_message.delay("acme", 11), rel.send_message.delay("acme", 12)
    assert wait_until(lambda: dlq.count() == 2, timeout=20)
    # Celery logs each failure after the dead letter: wait for both of its lines
    assert wait_until(lambda: "raised expected" in worker.log_tail(100_000)
                      and "Traceback" in worker.log_tail(100_000), timeout=10)
    loud = [line for line in worker.log_tail(100_000).splitlines()
            if re.search(r": (WARNING|ERROR|CRITICAL)/", line)]
    [about_verdict] = [line for line in loud if verdict.id in line]
    assert "WARNING" in about_verdict and "dead-lettered after 1 attempt(s): permanent" in (
        about_verdict)
    assert "PermanentError: lead 11 was deleted" not in worker.log_tail(100_000)  # no traceback
    about_fault = [line for line in loud if fault.id in line]
    assert about_fault and all("ERROR" in line for line in about_fault)


@pytest.mark.parametrize("mode", ["retry:2", "http:503:2", "http:429:1"])
def test_retryable_failure_is_retried_then_succeeds(rel, celery_worker_factory, redis_client,
                                                    ledger, dlq, mode):
    redis_client.set("fail:2", mode)
    celery_worker_factory(APP)
    assert rel.send_message.delay("acme", 2).get(timeout=20).startswith("msg-")
    assert attempts(redis_client, 2) == int(mode.split(":")[-1]) + 1
    assert ledger.counts() == {"acme:2": 1}
    assert dlq.count() == 0


def test_client_error_is_permanent(rel, celery_worker_factory, redis_client, dlq):
    redis_client.set("fail:3", "http:404:5")
    celery_worker_factory(APP)
    with pytest.raises(rel.HTTPError):
        rel.send_message.delay("acme", 3).get(timeout=20)
    assert attempts(redis_client, 3) == 1
    assert wait_until(lambda: dlq.count() == 1, timeout=10)
    assert dlq.list()[0].reason.startswith("HTTP 404")


def test_exhausted_retries_land_in_the_dlq_with_attempts_and_reason(
        rel, celery_worker_factory, redis_client, dlq):
    redis_client.set("fail:4", "retry:99")
    celery_worker_factory(APP)
    with pytest.raises(TimeoutError):
        rel.send_message.delay("acme", 4).get(timeout=30)
    assert attempts(redis_client, 4) == 4  # FAST.max_attempts
    assert wait_until(lambda: dlq.count() == 1, timeout=10)
    [letter] = dlq.list(account="acme", reason="gave up")
    assert letter.attempts == 4
    assert letter.reason == "gave up after 4 attempts: TimeoutError (timeout or connection error)"
    assert letter.first_failure <= letter.at
    times = [float(t) for t in redis_client.lrange("attempt_times:4", 0, -1)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap < 2.0 for gap in gaps)  # full jitter under the 0.2 s cap, plus dispatch


def test_retry_after_wins_over_backoff(rel, celery_worker_factory, redis_client):
    redis_client.set("fail:5", "retry_after:1.0:1")
    celery_worker_factory(APP)
    rel.send_message.delay("acme", 5).get(timeout=20)
    first, second = (float(t) for t in redis_client.lrange("attempt_times:5", 0, -1))
    assert second - first >= 0.95  # the backoff alone would be at most 0.2 s


def test_replaying_a_fixed_job_runs_it_once(rel, celery_worker_factory, redis_client, dlq,
                                            ledger):
    redis_client.set("fail:6", "permanent")
    celery_worker_factory(APP)
    with pytest.raises(PermanentError):
        rel.send_message.delay("acme", 6).get(timeout=20)
    assert wait_until(lambda: dlq.count() == 1, timeout=10)
    [letter] = dlq.list(task="tests.apps.reliable.send_message")
    redis_client.delete("fail:6")  # the lead is back: the job can succeed now
    replayed = dlq.replay(letter.job_id)
    assert replayed.get(timeout=20).startswith("msg-")
    with pytest.raises(KeyError):
        dlq.replay(letter.job_id)  # a second replay finds nothing
    time.sleep(0.5)
    assert ledger.counts() == {"acme:6": 1}
    assert dlq.count() == 0
    assert rel.send_message.delay("acme", 6).id == replayed.id  # same business key, done


def test_purge_and_filters(rel, celery_worker_factory, redis_client, dlq):
    for lead in (7, 8):
        redis_client.set(f"fail:{lead}", "permanent")
    celery_worker_factory(APP)
    for account, lead in (("acme", 7), ("beta", 8)):
        with pytest.raises(PermanentError):
            rel.send_message.delay(account, lead).get(timeout=20)
    assert wait_until(lambda: dlq.count() == 2, timeout=10)
    assert [d.account for d in dlq.list(account="beta")] == ["beta"]
    assert dlq.list(since=time.time() + 60) == []
    assert dlq.purge([dlq.list(account="acme")[0].job_id]) == 1
    assert dlq.purge(older_than=time.time() + 1) == 1
    assert dlq.count() == 0


@pytest.mark.slow
def test_sigkill_after_the_api_call_ends_with_one_side_effect_by_idempotency_key(
        rel, celery_worker_factory, redis_client, ledger):
    doomed = celery_worker_factory(APP, env=CRASH_ENV)
    result = rel.send_then_linger.delay("acme", 10, 2.0)
    assert wait_until(lambda: redis_client.hget("calls", "acme:10") == "1", timeout=20)
    doomed.kill()
    celery_worker_factory(APP, env=CRASH_ENV)
    assert result.get(timeout=30).startswith("msg-")
    assert redis_client.hget("starts", "acme:10") == "2"  # it really ran again
    assert redis_client.hget("calls", "acme:10") == "2"  # and called the API again
    assert ledger.counts() == {"acme:10": 1}  # which applied it once


@pytest.mark.slow
def test_sigkill_before_the_done_marker_is_reconciled_not_rerun(
        rel, celery_worker_factory, redis_client, ledger):
    doomed = celery_worker_factory(APP, env=CRASH_ENV)
    result = rel.send_reconciled.delay("acme", 11, 2.0)
    assert wait_until(lambda: ledger.counts() == {"acme:11": 1}, timeout=20)
    doomed.kill()
    celery_worker_factory(APP, env=CRASH_ENV)
    assert result.get(timeout=30) == "ext-11"
    assert redis_client.hget("starts", "acme:11") == "1"  # not run a second time
    assert redis_client.hget("reconciled", "acme:11") == "1"
    assert ledger.counts() == {"acme:11": 1}
    marker = store_for(rel.app).marker(rel.send_reconciled.business_key("acme",
                                                                        ("acme", 11), {}))
    assert marker.state == "done" and marker.external_id == "ext-11"


def test_duplicate_delivery_of_a_done_job_does_not_run_it_again(
        rel, celery_worker_factory, redis_client, ledger):
    celery_worker_factory(APP)
    first = rel.plain_send.delay("acme", 12)  # a plain Celery task: no enqueue dedupe
    first.get(timeout=20)
    second = rel.plain_send.delay("acme", 12)  # a second message for the same business job
    assert second.id != first.id
    assert second.get(timeout=20) is None  # the done marker answers; the body is not run
    assert redis_client.hget("plain_runs", "12") == "1"
    assert ledger.counts() == {"plain:12": 1}


def test_plain_reliable_task_retries_and_dead_letters_too(rel, celery_worker_factory,
                                                          redis_client, dlq):
    redis_client.set("fail:13", "retry:99")
    celery_worker_factory(APP)
    with pytest.raises(TimeoutError):
        rel.plain_send.delay("acme", 13, email="lead@example.com").get(timeout=30)
    assert attempts(redis_client, 13) == 4
    assert wait_until(lambda: dlq.count() == 1, timeout=10)
    [letter] = dlq.list()
    assert letter.kwargs == {"email": "lead@example.com"}  # kept for the replay
    assert letter.redacted(rel.plain_send.redact)["kwargs"] == {"email": "***"}
    assert letter.queue == "celery"


@pytest.mark.xdist_group("cpu-b")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.reliability
@pytest.mark.slow
def test_kill_storm_loses_nothing_and_duplicates_nothing(figure, rel, celery_worker_factory,
                                                         redis_client, ledger, dlq):
    """20 SIGKILLs of a whole worker while 10,000 jobs are enqueued and run: a kill each time
    another twenty-first of the jobs has finished, so every kill lands mid-run."""
    jobs, kills = 10_000, 20
    workers = [celery_worker_factory(APP, concurrency=4, env=CRASH_ENV) for _ in range(2)]
    store = store_for(rel.app)

    def finished() -> int:
        return len(ledger) + dlq.count()

    def produce() -> None:
        for lead in range(jobs):
            rel.storm_job.delay(f"acct{lead % 20}", lead, 0.02)

    def leases_of(worker) -> int:
        owners = [job.owner or "" for _, job in store.leased()]
        return sum(token.startswith(f"{worker.hostname}/") for token in owners)

    rng = random.Random(7)
    held = []  # leases each victim held when it was killed
    with ThreadPoolExecutor(1) as pool:
        producing = pool.submit(produce)
        for kill in range(1, kills + 1):
            due = kill * jobs // (kills + 1)
            assert wait_until(lambda due=due: finished() >= due, timeout=120, interval=0.05)
            victim = rng.randrange(len(workers))
            held.append(leases_of(workers[victim]))
            workers[victim].kill()
            workers[victim] = celery_worker_factory(APP, concurrency=4, env=CRASH_ENV)
        producing.result()
    expected_dead = {lead for lead in range(jobs) if lead % 100 == 99}
    assert wait_until(lambda: finished() >= jobs, timeout=120, interval=0.5)
    counts = ledger.counts()
    letters = dlq.list(limit=2 * jobs)
    dead = {int(d.args[1]) for d in letters}
    succeeded = {int(key.split(":")[1]) for key in counts}
    lost = set(range(jobs)) - succeeded - dead
    duplicates = {k: v for k, v in counts.items() if v > 1}
    # The API absorbs a repeated call by its idempotency key, so the ledger cannot show one;
    # its call counts can: only a job whose lease died with its worker may be called again.
    reruns = sum(int(v) - 1 for v in redis_client.hgetall("calls").values())
    reaped = store.stats().get("reaped", 0)
    figure(f"kill storm: {jobs} jobs, {kills} kills of a worker holding {sum(held)} leases "
           f"({sum(1 for n in held if n)} kills mid-job), {len(lost)} lost, {len(duplicates)} "
           f"duplicate side effects, {len(letters)} dead-lettered with a reason, {reaped} "
           f"leases of killed workers reaped, {reruns} API calls repeated after a kill and "
           f"absorbed by the idempotency key")
    assert not lost and not duplicates
    assert dead == expected_dead and len(letters) == len(expected_dead)
    assert all(d.reason.startswith("permanent: lead") for d in letters)
    assert sum(1 for n in held if n) > kills // 2, held  # the kills hit running jobs
    assert reruns <= reaped


def test_listing_pages_through_a_large_dlq_newest_first(rel, dlq):
    store = store_for(rel.app)
    for n in range(1200):
        store.bury(f"job-{n}:0", f"r{n}", record={"task": "t", "account": f"a{n % 3}"})
    letters = dlq.list(limit=5000)
    assert len(letters) == 1200
    assert [d.at for d in letters] == sorted((d.at for d in letters), reverse=True)
    assert len(dlq.list(account="a1", limit=5000)) == 400
    assert len(dlq.list(account="a2", limit=10)) == 10
