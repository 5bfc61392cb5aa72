"""Drop-in behaviour: an app made fair as a whole (``task_cls``) behaves as Celery users expect
(failure semantics, retry options, typing, revoke, builtin tasks, scheduled jobs)."""

import importlib
import os
import subprocess
import sys
import time

import pytest
from celery import states

from celery_fairqueue import DeadLetters, cancel, set_account_limit
from celery_fairqueue.protocol import is_fair
from celery_fairqueue.store import store_for
from celery_fairqueue.testing import run_fair_jobs
from tests.harness import REDIS_URL_ENV
from tests.harness.processes import wait_until


@pytest.fixture
def compat(redis_server, redis_client):
    return importlib.import_module("tests.apps.compat")


def test_celery_builtin_tasks_stay_on_the_broker_under_a_fair_task_cls(compat):
    assert is_fair(compat.add)
    builtins = [name for name in compat.app.tasks if name.startswith("celery.")]
    assert builtins and not any(is_fair(compat.app.tasks[name]) for name in builtins)


def test_a_task_with_no_account_runs_under_fairqueue_default_account(compat):
    compat.add.delay(2, 3)
    [job] = run_fair_jobs(compat.app)
    assert (job.account, job.state, job.result) == ("shared", "SUCCESS", 5)


def test_an_unclassified_exception_fails_at_once_into_the_dead_letters(compat, redis_client):
    result = compat.boom.delay(1)
    [job] = run_fair_jobs(compat.app)
    assert job.state == states.FAILURE
    assert redis_client.hget("attempts", "boom:1") == "1"  # no retries
    [letter] = DeadLetters(compat.app).list()
    assert "ValueError" in letter.reason and letter.attempts == 1
    assert result.state == states.FAILURE


def test_a_tasks_own_max_retries_is_honoured_then_it_is_dead_lettered(compat, redis_client):
    compat.flaky.delay(1)
    ran = []
    for _ in range(10):  # the retries wait their (zero) countdown in the store
        ran += run_fair_jobs(compat.app)
        if DeadLetters(compat.app).count():
            break
    assert [job.state for job in ran] == ["RETRY", "RETRY", "FAILURE"]
    assert redis_client.hget("attempts", "flaky:1") == "3"  # max_retries=2: three attempts
    [letter] = DeadLetters(compat.app).list()
    assert letter.reason.startswith("gave up after 3 attempts")


def test_typing_false_is_honoured_a_call_that_does_not_fit_is_sent(compat):
    compat.untyped.delay(1, 2, 3)  # Celery sends it; it fails in the worker, not the caller
    [job] = run_fair_jobs(compat.app)
    assert job.state == states.FAILURE and isinstance(job.result, TypeError)


def test_revoked_pending_job_leaves_the_store(compat):
    store = store_for(compat.app)
    later = compat.add.apply_async((1, 1), countdown=600)
    now = compat.add.delay(2, 2)
    assert store.counts("celery")["delayed"] == 1 and store.counts("celery")["ready"] == 1
    later.revoke()  # no worker runs: the store itself lets go of it
    assert cancel(compat.app, now.id)
    counts = store.counts("celery")
    assert (counts["delayed"], counts["ready"]) == (0, 0)
    assert later.state == now.state == states.REVOKED
    assert not cancel(compat.app, now.id)  # gone already
    assert run_fair_jobs(compat.app) == []


def test_control_purge_discards_the_waiting_fair_jobs_too(compat):
    store = store_for(compat.app)
    compat.add.delay(1, 1)
    compat.add.apply_async((2, 2), countdown=600)
    assert compat.app.control.purge() == 2  # what Celery's test manager does between tests
    counts = store.counts("celery")
    assert (counts["ready"], counts["delayed"]) == (0, 0)
    assert compat.app.control.purge() == 0
    assert run_fair_jobs(compat.app) == []


def test_expired_job_is_dropped_without_taking_a_slot_or_a_token(compat, celery_worker_factory,
                                                                 redis_client):
    # one token now, the next in a minute: had the expired job taken it, "fresh" would wait
    set_account_limit(compat.app, "shared", rate="1/m", burst=1)
    stale = compat.note.apply_async(("stale",), expires=0.2)
    fresh = compat.note.delay("fresh")
    store = store_for(compat.app)
    time.sleep(0.5)  # past its expires by the store's clock (the same host's)
    celery_worker_factory("tests.apps.compat", concurrency=2)
    assert fresh.get(timeout=20) == "fresh"
    assert wait_until(lambda: stale.state == states.REVOKED, timeout=10)
    assert redis_client.lrange("ran", 0, -1) == ["fresh"]
    assert store.stats()["expired"] == 1
    assert store.counts("celery")["ready"] == 0


def test_an_expired_job_is_recorded_revoked_by_the_inline_runner(compat):
    stale = compat.note.apply_async(("stale",), expires=0.2)
    compat.note.delay("fresh")
    time.sleep(0.5)
    ran = run_fair_jobs(compat.app)
    assert [(job.task_id, job.state) for job in ran] == [(stale.id, states.REVOKED),
                                                         (ran[1].task_id, states.SUCCESS)]
    assert stale.state == states.REVOKED


def test_fairqueue_scheduled_lists_what_waits_for_its_time(compat, redis_url):
    compat.add.apply_async((1, 2), countdown=300)
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.compat", "fairqueue", "scheduled"],
        env={**os.environ, REDIS_URL_ENV: redis_url}, capture_output=True, text=True,
        timeout=60)
    assert out.returncode == 0, out.stderr
    assert "tests.apps.compat.add" in out.stdout and "shared" in out.stdout


def test_replace_in_a_chain_runs_the_replacement(compat, celery_worker_factory):
    from celery import chain

    celery_worker_factory("tests.apps.compat", concurrency=4)
    assert compat.replaced.delay(1).get(timeout=20) == 2
    assert chain(compat.replaced.s(1), compat.add.s(10)).delay().get(timeout=20) == 12


def test_replace_in_a_group_and_a_chord_runs_the_replacements(compat, celery_worker_factory):
    from celery import chord, group

    celery_worker_factory("tests.apps.compat", concurrency=4)
    assert group(compat.replaced.s(n) for n in range(3)).delay().get(timeout=20) == [1, 2, 3]
    header = [compat.replaced.s(n) for n in range(3)]
    assert chord(header)(compat.total.s()).get(timeout=20) == 6
    assert chord([compat.add.s(1, 1), compat.add.s(2, 2)])(
        compat.replaced_total.s()).get(timeout=20) == 6


def test_priority_orders_jobs_within_an_account_and_accounts_still_rotate(fair, fair_store):
    for n in range(3):
        fair.job.apply_async(("busy", n), priority=9)
    fair.job.apply_async(("busy", 9), priority=0)  # urgent, enqueued last
    fair.job.apply_async(("calm", 1))
    ran = [(job.account, job.result) for job in run_fair_jobs(fair.app)]
    assert ran[0] == ("busy", 9)  # before its account's earlier priority-9 jobs ...
    assert ran[1] == ("calm", 1)  # ... but not before the next account's turn
    assert ran[2:] == [("busy", 0), ("busy", 1), ("busy", 2)]  # FIFO within a priority


def test_delivery_info_priority_is_set_as_the_redis_transport_sets_it(fair, fair_store):
    fair.context.apply_async(("acme",), account="acme", priority=3)
    [job] = run_fair_jobs(fair.app)
    assert job.result["delivery_info"]["priority"] == 3


def test_delivery_info_priority_is_zero_when_none_is_given_as_with_the_redis_transport(
        fair, fair_store, celery_worker_factory):
    celery_worker_factory("tests.apps.fair")
    context = fair.context.apply_async(("acme",), account="acme").get(timeout=20)
    assert context["delivery_info"]["priority"] == 0


@pytest.mark.slow
def test_a_countdown_on_a_group_chained_to_a_task_reaches_the_header_tasks(
        compat, celery_worker_factory):
    """Celery's own test_group_or_task_countdown_delays_header: the header tasks see the eta
    that the countdown gave them, although the store, not Celery, held them until then."""
    from celery import group

    celery_worker_factory("tests.apps.compat", concurrency=2)
    workflow = group(compat.request_eta.s(), compat.request_eta.s()) | compat.identity.s()
    etas = workflow.apply_async(countdown=1).get(timeout=20)
    assert len(etas) == 2 and all(eta is not None for eta in etas)
