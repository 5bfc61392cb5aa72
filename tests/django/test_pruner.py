"""The pruner: recorded jobs past their retention go, in batches; younger ones and those the
store still holds stay. Rows are written as the recorder writes them, on SQLite and on
PostgreSQL; the store is a real redis-server."""

import importlib
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.contrib.django.recording.pruner import Pruner
from celery_fairqueue.contrib.django.tasks import prune_records
from celery_fairqueue.limits import AccountLimit
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
    start_recorder(fair.app, prune=True)
    assert wait_until(lambda: not Job.objects.filter(job_key="old").exists(), 5)
    assert Job.objects.filter(job_key="young").exists()


def dead_letter_of(fair, account: str, n: int) -> tuple[str, str]:
    """A real dead letter: ``fair.job(account, n)`` enqueued, claimed and dead-lettered, as a
    worker does; returns its letter id and business key."""
    store = store_for(fair.app)
    fair.job.delay(account, n)
    [lease] = store.claim(["celery"], 1, "w1", AccountLimit().pack(0)).leases
    lease.dead_letter("permanent: lead was deleted")
    [letter] = DeadLetters(fair.app).named(lease.job_id)
    assert letter.job_key
    return lease.job_id, letter.job_key


def dead_row(letter_id: str, key: str, finished_ago: float) -> Job:
    """The row the recorder wrote for the dead letter, ``finished_ago`` seconds ago."""
    finished = datetime.fromtimestamp(time.time() - finished_ago, UTC)
    job = Job.objects.create(job_key=key, task_id=letter_id.split(":")[0], delivery_id=letter_id,
                             task="tests.apps.fair.job", queue="celery", account="acme",
                             status=Status.DEAD, attempts=1, finished_at=finished,
                             dead_reason="permanent: lead was deleted")
    Attempt.objects.create(job=job, number=1, delivery_id=letter_id, outcome="dead",
                           started_at=finished, finished_at=finished)
    return job


def test_a_replay_waiting_in_the_store_keeps_its_dead_row_through_a_prune(database, fair,
                                                                          capsys):
    """A dead letter 31 days old is replayed while the recorder is stopped: its row still names
    the dead delivery, the replay has a new task id; the row keeps its attempts and reason."""
    letter_id, key = dead_letter_of(fair, "acme", 1)
    row = dead_row(letter_id, key, 31 * DAY)
    replay = DeadLetters(fair.app).replay(letter_id)  # no recorder: the row still says dead
    assert replay.id != row.task_id
    call_command("fairqueue", "prune")
    assert "Deleted 0 recorded jobs" in capsys.readouterr().out
    kept = Job.objects.get(job_key=key)
    assert (kept.status, kept.dead_reason) == (Status.DEAD, "permanent: lead was deleted")
    assert list(kept.attempt_history.values_list("outcome", flat=True)) == ["dead"]


def test_a_replay_running_or_dead_again_keeps_the_row_and_one_that_finished_lets_it_go(
        database, fair):
    store = store_for(fair.app)
    letters = {n: dead_letter_of(fair, "acme", n) for n in (1, 2, 3)}
    rows = {n: dead_row(letter_id, key, 31 * DAY) for n, (letter_id, key) in letters.items()}
    replays = {DeadLetters(fair.app).replay(letter_id).id: n
               for n, (letter_id, _) in letters.items()}
    leases = {replays[lease.job_id.split(":")[0]]: lease
              for lease in store.claim(["celery"], 3, "w2", AccountLimit().pack(0)).leases}
    leases[2].dead_letter("permanent: still deleted")  # a dead letter of the replay's own
    leases[3].succeeded()
    leases[3].ack()  # finished: its key holds a done marker, and the store nothing else
    assert Pruner(fair.app).prune() == 1  # the running replay (1) and the dead one (2) hold
    assert set(Job.objects.values_list("job_key", flat=True)) == {rows[1].job_key,
                                                                  rows[2].job_key}
