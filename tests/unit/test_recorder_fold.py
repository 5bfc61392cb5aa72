"""The recorder's fold (contrib/django/recording/fold.py) as pure logic: events built by hand,
rows in memory, no Redis and no database (pytest-django refuses any query from these tests,
which carry no ``django_db`` mark). The recorder's tests on a real Redis and database are in
tests/django/test_recorder.py."""

from datetime import UTC, datetime

import pytest

from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.contrib.django.recording.fold import (
    EVENT_TYPES,
    EXPIRED,
    HANDLERS,
    NO_OUTCOME,
    Fold,
    rows_needed,
)
from celery_fairqueue.contrib.django.recording.rows import AttemptRow, JobRow
from celery_fairqueue.contrib.django.recording.writer import prepare
from celery_fairqueue.protocol import EVENT_FIELDS, Event, EventType, encode_id

Status = Job.Status
Outcome = Attempt.Outcome
T0 = 1_700_000_000


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def event(type_: str, seq: int = 0, **fields: object) -> Event:
    """An event as the stream holds it: short field names, ids percent-encoded."""
    raw = {"type": type_, "at": T0 + seq, **fields}
    for name in ("queue", "account"):
        if name in raw:
            raw[name] = encode_id(str(raw[name]))
    return Event.from_entry(f"{T0 + seq}-0", {EVENT_FIELDS[k]: str(v) for k, v in raw.items()})


def enqueued(task_id: str = "t1", seq: int = 0, retries: int = 0, key: str = "k1",
             account: str = "acme", due: float | None = None,
             args: str = '{"n": 1}') -> Event:
    return event(EventType.ENQUEUED, seq, job=f"{task_id}:{retries}", queue="default",
                 account=account, job_key=key, task="proj.send", args=args,
                 due=due if due is not None else T0 + seq)


def fold(*events: Event, fold: Fold | None = None) -> Fold:
    fold = fold or Fold()
    fold.apply(events)
    return fold


def only_job(folded: Fold) -> JobRow:
    [job] = folded.dirty.values()
    return job


def test_every_event_type_has_one_handler():
    assert {v for k, v in vars(EventType).items() if k.isupper()} == EVENT_TYPES
    assert set(HANDLERS) == EVENT_TYPES
    assert all(callable(handler) for handler in HANDLERS.values())


def test_an_unknown_event_type_is_ignored():
    folded = fold(event("from_the_future", job="t1:0"))
    assert not folded.dirty and not folded.new_attempts


def test_rows_needed_are_the_enqueued_keys_the_task_ids_and_the_deliveries_that_ran():
    keys, tasks, deliveries = rows_needed([
        enqueued("t1", key="k1"), enqueued("t2", key="-"),
        event(EventType.RUNNING, job="t3:2", worker="w"),
        event(EventType.ACCOUNT_READY, queue="default", account="acme")])
    assert keys == {"k1", "task:t2"}
    assert tasks == {"t1", "t2", "t3"}
    assert deliveries == {"t3:2"}  # a job only enqueued has no attempt to load


def test_enqueued_job_is_ready_with_its_arguments_and_business_key():
    job = only_job(fold(enqueued()))
    assert (job.job_key, job.task_id, job.delivery_id) == ("k1", "t1", "t1:0")
    assert (job.status, job.account, job.queue, job.task) == (
        Status.READY, "acme", "default", "proj.send")
    assert job.args == {"n": 1} and job.attempts == 0
    assert job.enqueued_at == job.waiting_since == at(T0) and job.next_run_at is None


def test_job_due_later_is_deferred_until_then_and_ready_once_promoted():
    folded = fold(enqueued(due=T0 + 60))
    job = only_job(folded)
    assert (job.status, job.next_run_at, job.waiting_since) == (
        Status.DEFERRED, at(T0 + 60), at(T0 + 60))
    fold(event(EventType.PROMOTED, 60, job="t1:0"), fold=folded)
    assert (job.status, job.next_run_at) == (Status.READY, None)


def test_a_job_of_an_account_deferred_by_its_limit_waits_until_the_limit_ends():
    folded = fold(enqueued("t1", key="k1"),
                  event(EventType.ACCOUNT_DEFERRED, 1, queue="default", account="acme",
                        due=T0 + 100),
                  enqueued("t2", 2, key="k2"), enqueued("t3", 3, key="k3", account="other"))
    statuses = {key: (job.status, job.next_run_at) for key, job in folded.dirty.items()}
    assert statuses == {"k1": (Status.DEFERRED, at(T0 + 100)),
                        "k2": (Status.DEFERRED, at(T0 + 100)), "k3": (Status.READY, None)}
    assert folded.paused == {("default", "acme"): at(T0 + 100)}
    assert folded.account_updates[0][0] == "deferred"
    fold(event(EventType.ACCOUNT_READY, 100, queue="default", account="acme"), fold=folded)
    assert {job.status for job in folded.dirty.values()} == {Status.READY}
    assert folded.paused == {} and folded.account_updates[-1][0] == "ready"


def test_the_pauses_a_fold_saw_outlive_it():
    paused: dict = {}
    fold(event(EventType.ACCOUNT_DEFERRED, queue="default", account="acme", due=T0 + 100),
         fold=Fold(paused))
    job = only_job(fold(enqueued(seq=5), fold=Fold(paused)))
    assert (job.status, job.next_run_at) == (Status.DEFERRED, at(T0 + 100))


def test_retry_then_success_keeps_a_row_for_the_failed_attempt_and_the_job_tells_the_last():
    folded = fold(enqueued(),
                  event(EventType.RUNNING, 1, job="t1:0", worker="w1"),
                  event(EventType.RETRYING, 2, job="t1:0", error="Timeout: slow", due=T0 + 30),
                  event(EventType.RUNNING, 30, job="t1:1", worker="w2"),
                  event(EventType.SUCCEEDED, 31, job="t1:1", external_id="ext-9"))
    job = only_job(folded)
    assert (job.status, job.attempts, job.delivery_id) == (Status.SUCCEEDED, 2, "t1:1")
    assert (job.external_id, job.last_error, job.worker) == ("ext-9", "Timeout: slow", "w2")
    assert job.finished_at == at(T0 + 31) and job.waiting_since is None
    assert [(a.number, a.delivery_id, a.outcome, a.error) for a in folded.new_attempts] == [
        (1, "t1:0", Outcome.RETRYING, "Timeout: slow")]  # the success is the job row's


def test_failed_then_dead_keeps_the_error_and_the_reason():
    folded = fold(enqueued(), event(EventType.RUNNING, 1, job="t1:0", worker="w"),
                  event(EventType.FAILED, 2, job="t1:0", error="HTTPError: 404",
                        reason="permanent: HTTPError"),
                  event(EventType.DEAD, 3, job="t1:0", reason="permanent: HTTPError"))
    job = only_job(folded)
    assert (job.status, job.last_error, job.dead_reason) == (
        Status.DEAD, "HTTPError: 404", "permanent: HTTPError")
    assert [a.outcome for a in folded.new_attempts] == [Outcome.FAILED]


def test_a_running_job_settled_without_an_outcome_is_failed():
    folded = fold(enqueued(), event(EventType.RUNNING, 1, job="t1:0", worker="w"),
                  event(EventType.ACKED, 2, job="t1:0"))
    job = only_job(folded)
    assert (job.status, job.last_error) == (Status.FAILED, NO_OUTCOME)
    assert folded.new_attempts[0].outcome == Outcome.FAILED


@pytest.mark.parametrize(("type_", "error"), [(EventType.CANCELLED, ""),
                                               (EventType.EXPIRED, EXPIRED)])
def test_cancelled_and_expired_jobs_are_revoked_and_final(type_, error):
    folded = fold(enqueued(), event(type_, 1, job="t1:0"),
                  event(EventType.REQUEUED, 2, job="t1:0"))
    job = only_job(folded)
    assert (job.status, job.last_error, job.finished_at) == (Status.REVOKED, error, at(T0 + 1))


def test_a_requeued_job_is_ready_again_and_its_attempt_says_why():
    folded = fold(enqueued(), event(EventType.RUNNING, 1, job="t1:0", worker="w"),
                  event(EventType.REQUEUED, 2, job="t1:0", reason="lease expired"))
    job = only_job(folded)
    assert (job.status, job.waiting_since) == (Status.READY, at(T0 + 2))
    assert [(a.outcome, a.error) for a in folded.new_attempts] == [
        (Outcome.REQUEUED, "lease expired")]


def test_events_of_unknown_jobs_are_skipped():
    folded = fold(event(EventType.RUNNING, job="ghost:0", worker="w"),
                  event(EventType.SUCCEEDED, 1, job="ghost:0"))
    assert not folded.dirty and not folded.new_attempts


def test_late_news_of_an_earlier_delivery_does_not_move_the_job_back():
    folded = fold(enqueued(), event(EventType.RUNNING, 1, job="t1:1", worker="w"),
                  event(EventType.SUCCEEDED, 2, job="t1:1"),
                  event(EventType.RUNNING, 3, job="t1:0", worker="late"),
                  event(EventType.REQUEUED, 4, job="t1:0"))
    job = only_job(folded)
    assert (job.status, job.delivery_id, job.worker) == (Status.SUCCEEDED, "t1:1", "w")


def test_a_stored_job_is_moved_on_and_its_open_attempt_closed():
    stored = JobRow(job_key="k1", task_id="t1", delivery_id="t1:0", task="proj.send",
                    queue="default", account="acme", status=Status.RUNNING, attempts=1)
    running = AttemptRow(delivery_id="t1:0", number=1, worker="w", started_at=at(T0),
                         outcome=Outcome.RUNNING, stored=True)
    folded = Fold()
    folded.know([stored], [running])
    fold(event(EventType.SUCCEEDED, 5, job="t1:0"), fold=folded)
    assert only_job(folded) is stored and stored.status == Status.SUCCEEDED
    assert list(folded.closed_attempts.values()) == [running]
    assert running.outcome == Outcome.SUCCEEDED
    assert not folded.new_attempts


def test_a_batch_folded_twice_adds_no_second_attempt():
    stored = JobRow(job_key="k1", task_id="t1", delivery_id="t1:0", task="proj.send",
                    queue="default", account="acme", status=Status.RUNNING, attempts=1)
    running = AttemptRow(delivery_id="t1:0", number=1, worker="w", started_at=at(T0 + 1),
                         outcome=Outcome.RUNNING, stored=True)
    folded = Fold()
    folded.know([stored], [running])
    fold(event(EventType.RUNNING, 1, job="t1:0", worker="w"), fold=folded)
    assert not folded.new_attempts and stored.status == Status.RUNNING


def test_an_enqueue_under_a_stored_key_with_a_new_task_is_the_job_afresh():
    stored = JobRow(job_key="k1", task_id="old", delivery_id="old:3", task="proj.send",
                    queue="default", account="acme", status=Status.DEAD, attempts=4,
                    last_error="boom", dead_reason="gave up", external_id="x", worker="w",
                    finished_at=at(T0 - 10))
    folded = Fold()
    folded.know([stored])
    job = only_job(fold(enqueued("new", 1), fold=folded))
    assert job is stored and (job.task_id, job.delivery_id, job.status) == (
        "new", "new:0", Status.READY)
    assert (job.last_error, job.dead_reason, job.external_id, job.worker) == ("", "", "", "")
    assert job.finished_at is None and "old" not in folded.by_task


def test_a_due_time_past_what_a_datetime_holds_is_the_latest_one():
    job = only_job(fold(enqueued(), event(EventType.RETRYING, 1, job="t1:0", error="e",
                                          due=1e300)))
    assert job.next_run_at == datetime.max.replace(tzinfo=UTC)


def test_arguments_that_are_not_an_object_or_hold_nul_are_shown_safely():
    assert only_job(fold(enqueued(args="[1, 2]"))).args == {"args": [1, 2]}
    assert only_job(fold(enqueued(args='{"x": "n\\u0000ul"}'))).args == {"x": "nul"}
    assert only_job(fold(enqueued(args="not json"))).args == {}


def test_a_job_whose_events_share_a_batch_is_written_once_and_its_success_costs_no_attempt():
    writes = prepare(fold(enqueued(), event(EventType.RUNNING, 1, job="t1:0", worker="w"),
                          event(EventType.SUCCEEDED, 2, job="t1:0")))
    [row] = writes.new
    assert row[0] == "k1" and Status.SUCCEEDED in row and not writes.moved + writes.fresh
    assert not writes.new_attempts and not writes.closed_attempts


def test_a_failed_attempt_gets_its_row_with_what_the_job_row_knew_of_it():
    writes = prepare(fold(enqueued(), event(EventType.RUNNING, 1, job="t1:0", worker="w"),
                          event(EventType.REQUEUED, 2, job="t1:0", reason="lease expired")))
    [attempt] = writes.new_attempts
    assert attempt == ("k1", 1, "t1:0", "w", at(T0 + 1), at(T0 + 2), Outcome.REQUEUED,
                       "lease expired")


def test_a_batch_applied_again_adds_no_second_row_for_an_attempt_that_failed():
    stored = JobRow(job_key="k1", task_id="t1", delivery_id="t1:0", task="proj.send",
                    queue="default", account="acme", status=Status.READY, attempts=1,
                    started_at=at(T0 + 1), worker="w")
    requeued = AttemptRow(delivery_id="t1:0", number=1, worker="w", started_at=at(T0 + 1),
                          outcome=Outcome.REQUEUED, stored=True)
    folded = Fold()
    folded.know([stored], [requeued])
    fold(event(EventType.RUNNING, 1, job="t1:0", worker="w"),
         event(EventType.REQUEUED, 2, job="t1:0"), fold=folded)
    assert not folded.new_attempts and not folded.closed_attempts


def test_a_new_run_under_the_key_keeps_the_succeeded_run_as_an_attempt_row():
    stored = JobRow(job_key="k1", task_id="old", delivery_id="old:0", task="proj.send",
                    queue="default", account="acme", status=Status.SUCCEEDED, attempts=1,
                    started_at=at(T0 - 10), finished_at=at(T0 - 9), worker="w")
    folded = Fold()
    folded.know([stored])
    fold(enqueued("new", 1), fold=folded)
    assert [(a.delivery_id, a.outcome, a.finished_at) for a in folded.new_attempts] == [
        ("old:0", Outcome.SUCCEEDED, at(T0 - 9))]


def test_a_stored_job_moved_on_is_written_without_its_arguments():
    stored = JobRow(job_key="k1", task_id="t1", delivery_id="t1:0", task="proj.send",
                    queue="default", account="acme", status=Status.RUNNING, attempts=1)
    running = AttemptRow(delivery_id="t1:0", number=1, started_at=at(T0), stored=True)
    folded = Fold()
    folded.know([stored], [running])
    writes = prepare(fold(event(EventType.SUCCEEDED, 5, job="t1:0"), fold=folded))
    assert not writes.new + writes.fresh and len(writes.moved) == 1 and not writes.new_attempts
    assert writes.closed_attempts == [("t1:0", at(T0), Outcome.SUCCEEDED, "", at(T0 + 5))]
