"""The console's store capabilities through real ``celery worker`` processes, measured on the
ledger: an operator's pause, run now, and the registry of live workers."""

import pytest

import celery_fairqueue
from celery_fairqueue.reasons import reason_text
from celery_fairqueue.store import StoreInspector
from celery_fairqueue.store.formats.records import JobRecord
from tests.harness import wait_until

APP = "tests.apps.fair"


def test_paused_account_keeps_its_jobs_ready_and_others_run(fair, celery_worker_factory,
                                                            ledger, fair_store):
    celery_fairqueue.pause(fair.app, "paused", by="alice", reason="invoice dispute")
    held = []
    for n in range(4):
        held.append(f"{fair.job.delay('paused', n).id}:0")
        fair.job.delay("other", n)
    celery_worker_factory(APP, concurrency=2)
    assert ledger.wait_for(4) == {f"other:{n}": 1 for n in range(4)}
    inspector = StoreInspector(fair.app)
    [state] = inspector.console.account_state("paused", ["celery"])
    assert (state.reason, state.ready, state.deferred, state.paused_by) == (
        "paused", 4, 0, "alice")
    assert reason_text(state).startswith("paused by alice at ")
    assert fair_store.stats().get("deferred", 0) == 0  # held, not deferred
    # no attempt charged: never handed out
    records = fair_store.client.hmget(fair_store.keys.records, held)
    assert [JobRecord.parse(r).deliveries for r in records] == [0] * 4
    assert len(ledger) == 4  # none of the paused account's jobs ran


def test_resume_lets_the_account_rotate_again(fair, celery_worker_factory, ledger):
    celery_fairqueue.pause(fair.app, "acme", "celery")
    for n in range(3):
        fair.job.delay("acme", n)
    fair.job.delay("other", 0)
    celery_worker_factory(APP, concurrency=2)
    assert ledger.wait_for(1) == {"other:0": 1}
    assert celery_fairqueue.resume(fair.app, "acme", "celery") is True
    counts = ledger.wait_for(4)
    assert counts == {"other:0": 1, **{f"acme:{n}": 1 for n in range(3)}}


def test_a_paused_queue_runs_nothing_while_other_queues_run(fair, celery_worker_factory,
                                                            ledger):
    celery_fairqueue.pause(fair.app, queue="celery", by="ops")
    fair.job.delay("acme", 1)
    fair.urgent.delay("acme", 2)  # routed to the critical queue
    celery_worker_factory(APP, queues=("celery", "critical"))
    assert ledger.wait_for(1) == {"urgent:acme:2": 1}
    [state] = StoreInspector(fair.app).console.account_state("acme", ["celery"])
    assert (state.reason, state.pause_scope, state.ready) == ("paused", "queue", 1)
    assert reason_text(state).startswith("queue paused by ops at ")
    celery_fairqueue.resume(fair.app, queue="celery")
    assert ledger.wait_for(2) == {"urgent:acme:2": 1, "acme:1": 1}


def test_run_now_runs_a_countdown_job_through_a_real_worker(fair, celery_worker_factory,
                                                            ledger):
    later = fair.job.apply_async(args=("acme", 1), countdown=3600)
    celery_worker_factory(APP)
    [job] = StoreInspector(fair.app).console.live_jobs("acme")
    assert job.state == "delayed"
    assert celery_fairqueue.run_now(fair.app, later.id) is True
    assert later.get(timeout=20) == 1
    assert ledger.counts() == {"acme:1": 1}
    assert celery_fairqueue.run_now(fair.app, later.id) is False  # done: nothing delayed


@pytest.mark.slow
def test_workers_register_their_queues_and_slots(fair, celery_worker_factory):
    first = celery_worker_factory(APP, concurrency=3, queues=("celery", "critical"))
    second = celery_worker_factory(APP, concurrency=1, queues=("critical",))
    inspector = StoreInspector(fair.app)
    assert wait_until(lambda: len(inspector.console.workers()) == 2, timeout=30)
    seen = {w.name: (w.queues, w.slots) for w in inspector.console.workers()}
    assert seen == {first.hostname: (("celery", "critical"), 3),
                    second.hostname: (("critical",), 1)}
    assert inspector.console.consumers() == {"celery": 1, "critical": 2}
    before = {w.name: w.heartbeat for w in inspector.console.workers()}
    # the heartbeat renews the registration
    assert wait_until(lambda: all(w.heartbeat > before[w.name]
                                  for w in inspector.console.workers()), timeout=30)
    second.stop()  # a warm shutdown leaves the registry at once
    assert [w.name for w in inspector.console.workers()] == [first.hostname]


@pytest.mark.slow
def test_dead_worker_leaves_the_registry(fair, celery_worker_factory):
    worker = celery_worker_factory(APP)
    inspector = StoreInspector(fair.app)
    assert wait_until(lambda: [w.name for w in inspector.console.workers()] == [worker.hostname],
                      timeout=30)
    worker.kill()  # SIGKILL: no goodbye
    assert wait_until(lambda: inspector.console.workers() == [], timeout=30)
    fair.job.delay("acme", 1)
    [state] = inspector.console.account_state("acme", ["celery"])
    assert state.reason == "no_worker"


@pytest.mark.slow
def test_the_registry_shows_each_workers_running_jobs_counts_and_uptime(
        fair, celery_worker_factory, ledger):
    """The console's workers table, as Flower and Sidekiq's Busy page: what each worker runs
    now, how many it ran (succeeded, failed) and since when it is up."""
    worker = celery_worker_factory(APP, concurrency=2)
    fair.job.delay("acme", 1)
    fair.flaky.delay("acme", 2, 1)  # one failed attempt (a retry), then success
    fair.job.delay("slow", 3, 30)
    inspector = StoreInspector(fair.app)

    def shown():
        [w] = inspector.console.workers() or [None]
        return w is not None and w.succeeded == 2 and w.failed == 1 and len(w.running) == 1

    assert wait_until(shown, timeout=30), inspector.console.workers()
    [w] = inspector.console.workers()
    assert w.name == worker.hostname
    assert w.running[0].endswith(":0")  # the slow job's delivery id
    assert w.started is not None and 0 <= inspector.console.server_time() - w.started < 120
