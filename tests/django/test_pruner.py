"""The pruner: recorded jobs past their retention go, in batches; younger ones and those the
store still holds stay. Rows are written as the recorder writes them, on SQLite and on
PostgreSQL; the store is a real redis-server."""

import importlib
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.contrib.django.recording.pruner import Pruner
from celery_fairqueue.contrib.django.tasks import prune_records
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import store_for
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
NOW = 1_800_000_000.0
DAY = 86400


@pytest.fixture
def fair(redis_server, redis_client, settings):
    settings.CELERY_FAIRQUEUE_APP = "tests.apps.fair.app"
    return importlib.import_module("tests.apps.fair")


def recorded(key: str, status: str, finished_ago: float | None, now: float = NOW,
             attempts: int = 1) -> Job:
    """A recorded job that finished ``finished_ago`` seconds before ``now``, with attempts."""
    finished = (None if finished_ago is None
                else datetime.fromtimestamp(now - finished_ago, UTC))
    job = Job.objects.create(job_key=key, task_id=f"t-{key}", delivery_id=f"t-{key}:0",
                             task="tests.apps.fair.job", queue="default", account="acme",
                             status=status, finished_at=finished)
    for number in range(1, attempts + 1):
        Attempt.objects.create(job=job, number=number, delivery_id=job.delivery_id,
                               outcome="succeeded", started_at=finished, finished_at=finished)
    return job


def test_the_pruner_keeps_every_row_younger_than_its_retention_and_deletes_the_older(
        database, fair):
    retention = settings_for(fair.app).record_retention
    for status, kept in retention.items():
        recorded(f"{status}-young", status, kept - 60)
        recorded(f"{status}-old", status, kept + 60, attempts=2)
    for status in (Status.READY, Status.DEFERRED, Status.RUNNING):  # not finished: kept
        recorded(f"{status}-waiting", status, 400 * DAY)
    assert Pruner(fair.app, clock=lambda: NOW).prune() == len(retention)
    kept = set(Job.objects.values_list("job_key", flat=True))
    assert kept == {f"{status}-young" for status in retention} | {
        "ready-waiting", "deferred-waiting", "running-waiting"}
    assert not Attempt.objects.filter(job__job_key__endswith="-old").exists()
    assert Attempt.objects.count() == len(kept)
    assert store_for(fair.app).stats()["pruned"] == len(retention)


def test_the_pruner_keeps_a_job_the_store_still_holds(database, fair, redis_client):
    store = store_for(fair.app)
    waiting = recorded("again", Status.SUCCEEDED, 60 * DAY)  # enqueued again meanwhile
    letter = recorded("letter", Status.DEAD, 60 * DAY)  # its dead letter is not purged
    recorded("gone", Status.DEAD, 60 * DAY)
    redis_client.hset(store.keys.records, waiting.delivery_id, "held")
    redis_client.hset(store.keys.dead, letter.delivery_id, "{}")
    assert Pruner(fair.app, clock=lambda: NOW).prune() == 1
    assert set(Job.objects.values_list("job_key", flat=True)) == {"again", "letter"}


def test_the_pruner_walks_past_held_rows_in_small_batches(database, fair, redis_client):
    store = store_for(fair.app)
    for n in range(4):  # the oldest four are dead letters still held
        job = recorded(f"held{n}", Status.DEAD, (90 - n) * DAY)
        redis_client.hset(store.keys.dead, job.delivery_id, "{}")
    for n in range(5):
        recorded(f"old{n}", Status.DEAD, (60 - n) * DAY)
    pruner = Pruner(fair.app, clock=lambda: NOW)
    pruner.batch = 2
    assert pruner.prune() == 5
    assert Job.objects.filter(job_key__startswith="old").count() == 0
    assert Job.objects.filter(job_key__startswith="held").count() == 4


def test_a_pruner_given_a_moment_stops_and_carries_on_where_it_stopped(database, fair):
    for n in range(6):
        recorded(f"old{n}", Status.SUCCEEDED, (30 + n) * DAY)
    pruner = Pruner(fair.app, clock=lambda: NOW)
    pruner.batch = 1
    assert pruner.prune(seconds=0) == 0 and pruner.unfinished
    assert pruner.prune() == 6 and not pruner.unfinished


def test_manage_py_fairqueue_prune_and_the_periodic_task_delete_what_is_past_retention(
        database, fair, capsys):
    now = time.time()
    recorded("old", Status.SUCCEEDED, 8 * DAY, now=now)
    recorded("young", Status.SUCCEEDED, 6 * DAY, now=now)
    call_command("fairqueue", "prune")
    assert "Deleted 1 recorded jobs" in capsys.readouterr().out
    recorded("older", Status.REVOKED, 9 * DAY, now=now)
    assert prune_records() == 1
    assert list(Job.objects.values_list("job_key", flat=True)) == ["young"]


def test_the_leading_recorder_prunes_in_its_idle_time(database, fair, start_recorder):
    now = time.time()
    recorded("old", Status.SUCCEEDED, 8 * DAY, now=now)
    recorded("young", Status.SUCCEEDED, timedelta(hours=1).total_seconds(), now=now)
    start_recorder(fair.app)
    assert wait_until(lambda: not Job.objects.filter(job_key="old").exists(), 5)
    assert Job.objects.filter(job_key="young").exists()
