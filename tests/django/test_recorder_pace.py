"""The faster recorder keeps its guarantees: batches folded while the one before is written
keep each job's order, a batch folded on one the database refused is folded again, a job
moved on keeps its stored arguments, and the reader reads on before acknowledging without
reading an event twice. Events written into the stream by hand (tests/django/test_recorder.py's
``Stream``), a real redis-server, SQLite and PostgreSQL."""

import importlib

import pytest

from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.store import EventReader, store_for
from celery_fairqueue.store.formats.keys import encode_id
from tests.django.test_recorder import Stream, drain
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
Outcome = Attempt.Outcome


@pytest.fixture
def fair(redis_server):
    return importlib.import_module("tests.apps.fair")


@pytest.fixture
def stream(fair, redis_client):
    return Stream(fair.app, redis_client)


def history(key: str) -> list[tuple[int, str]]:
    return [(a.number, a.outcome) for a in Job.objects.get(job_key=key).attempt_list()]


def test_batches_folded_while_the_last_is_written_keep_each_jobs_order(
        database, fair, stream, start_recorder):
    start_recorder(fair.app, batch=1, linger_ms=0)  # every event a batch of its own
    task_id = stream.enqueue(key="k1")
    stream.send("running", job=f"{task_id}:0", worker="w1")
    stream.send("retrying", job=f"{task_id}:0", err="TimeoutError: slow", due=1_700_000_050)
    stream.enqueue(task_id, retries=1, key="k1", due=1_700_000_050)
    stream.send("running", job=f"{task_id}:1", worker="w2")
    stream.send("succeeded", job=f"{task_id}:1", ext="x-1")
    assert wait_until(lambda: Job.objects.filter(job_key="k1",
                                                 status=Status.SUCCEEDED).exists(), 5)
    job = Job.objects.get(job_key="k1")
    assert (job.attempts, job.external_id, job.worker) == (2, "x-1", "w2")
    assert history("k1") == [(1, Outcome.RETRYING), (2, Outcome.SUCCEEDED)]


def test_a_batch_folded_on_one_the_database_refused_is_folded_again(
        database, fair, stream, start_recorder, redis_client):
    running = start_recorder(fair.app, batch=1, linger_ms=0)
    stream.send("enqueued", job="hostile:-2", q=encode_id("default"), a=encode_id("acme"),
                k="bad", t="t", args="{}")  # attempts -3: refused by the column's check
    task_id = stream.enqueue(key="good")
    stream.send("running", job=f"{task_id}:0", worker="w")
    assert wait_until(lambda: Job.objects.filter(job_key="good",
                                                 status=Status.RUNNING).exists(), 5)
    assert wait_until(lambda: running.recorder.reader.backlog() == 0, 5)
    assert list(Job.objects.values_list("job_key", flat=True)) == ["good"]
    assert running.recorder.skipped == 1 and history("good") == [(1, Outcome.RUNNING)]


def test_a_job_moved_on_in_a_later_batch_keeps_its_stored_arguments(
        database, fair, stream, make_recorder):
    recorder = make_recorder(fair.app)
    task_id = stream.enqueue(key="k1", args='{"account_id": "acme", "lead": 42}')
    drain(recorder)
    stream.send("running", job=f"{task_id}:0", worker="w")
    stream.send("succeeded", job=f"{task_id}:0")
    drain(recorder)
    job = Job.objects.get(job_key="k1")
    assert job.status == Status.SUCCEEDED
    assert job.args == {"account_id": "acme", "lead": 42}
    assert "lead=42" in job.args_text


def test_reading_on_before_acknowledging_reads_each_event_once_and_a_rewind_reads_them_again(
        fair, stream):
    reader = EventReader(store_for(fair.app), "reader")
    reader.ensure_group()
    for n in range(5):
        stream.enqueue(key=f"k{n}")
    first = reader.read(count=2, block_ms=10)
    second = reader.read(count=2, block_ms=10)  # the first two still unacknowledged
    third = reader.read(count=2, block_ms=10)
    assert [len(first), len(second), len(third)] == [2, 2, 1]
    assert len({e.id for e in first + second + third}) == 5
    reader.ack(first)
    reader.rewind()  # as after a failed write: the pending ones again, in stream order
    again = reader.read(count=10, block_ms=10)
    assert [e.id for e in again] == [e.id for e in second + third]
    reader.ack(again)
    assert reader.read(count=10, block_ms=10) == [] and reader.backlog() == 0
