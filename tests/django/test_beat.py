"""Beat: fair tasks on a django-celery-beat schedule, enqueued once per occurrence even when two
beat processes run the same schedule."""

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from celery import schedules
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from celery_fairqueue.beat import occurrence_key, occurrence_slot
from celery_fairqueue.store import store_for
from tests.harness import REDIS_URL_ENV, wait_until

SECOND = datetime(2026, 3, 1, 12, 0, 7, 250000, tzinfo=UTC).timestamp()


def test_an_interval_occurrence_is_its_time_truncated_to_the_interval():
    every_10s = schedules.schedule(timedelta(seconds=10))
    assert occurrence_slot(every_10s, SECOND) == datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert occurrence_slot(every_10s, SECOND + 2.7) == occurrence_slot(every_10s, SECOND)
    assert occurrence_slot(every_10s, SECOND + 3.0) != occurrence_slot(every_10s, SECOND)


def test_a_crontab_occurrence_is_its_minute_and_a_clocked_one_its_time():
    at_noon = schedules.crontab(minute=0, hour=12)
    assert occurrence_slot(at_noon, SECOND) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    class Clocked:
        clocked_time = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)

    assert occurrence_slot(Clocked(), SECOND) == Clocked.clocked_time


def test_the_key_names_the_schedule_and_the_slot():
    slot = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    key = occurrence_key("proj.tick", "tick-acme", slot)
    assert key == occurrence_key("proj.tick", "tick-acme", slot)
    assert key != occurrence_key("proj.tick", "tick-other", slot)
    assert key != occurrence_key("proj.tick", "tick-acme", slot + timedelta(seconds=1))


def start_beat(index, env, tmp_path, rootdir):
    log = open(tmp_path / f"beat-{index}.log", "wb")  # noqa: SIM115 (closed by the caller)
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.apps.recorded", "beat",
         "-S", "celery_fairqueue.beat:FairScheduler", "--max-interval", "1",
         "--pidfile=", "-l", "INFO"],
        env=env, cwd=rootdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def beat_sends(tmp_path, beats):
    """How many times each of beat processes 0 .. beats-1 sent tick-acme."""
    return [(tmp_path / f"beat-{i}.log").read_text().count("Sending due task tick-acme")
            for i in range(beats)]


@pytest.fixture
def env(database, db_env, redis_server, celery_worker_factory, request):
    """A tick a second for account acme on the schedule, a worker for it, and the environment
    of a beat process."""
    every_second = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="tick-acme", task="tests.apps.recorded.tick",
                                interval=every_second, args=json.dumps(["acme"]))
    celery_worker_factory("tests.apps.recorded", env=db_env)
    return {**os.environ, **db_env, REDIS_URL_ENV: redis_server.url,
            "PYTHONPATH": str(request.config.rootpath)}


@pytest.mark.parametrize("database", ["default"], indirect=True)
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_two_beats_enqueue_each_occurrence_once(env, ledger, tmp_path, request):
    recorded = importlib.import_module("tests.apps.recorded")
    started = time.monotonic()
    beats = [start_beat(i, env, tmp_path, request.config.rootpath) for i in range(2)]
    try:  # until both are up and sending (a loaded machine may start one seconds later)
        assert wait_until(lambda: min(beat_sends(tmp_path, 2)) >= 4, 40), beat_sends(tmp_path, 2)
    finally:
        for process, log in beats:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            log.close()
    elapsed = time.monotonic() - started
    sends = beat_sends(tmp_path, 2)
    enqueued = store_for(recorded.app).stats().get("enqueued", 0)
    assert wait_until(lambda: len(ledger.counts()) == enqueued, 10)
    runs = ledger.counts()
    assert set(runs.values()) == {1}, "an occurrence ran twice"
    assert 4 <= len(runs) <= elapsed + 2, f"beats sent {sends}, {enqueued} jobs"  # a tick a second
    # The beat that started later sent only occurrences the other one sent too (both ran to
    # the end): each but its first and last was absorbed by the occurrence's key.
    assert sum(sends) - len(runs) >= min(sends) - 2, f"beats sent {sends} for {len(runs)} runs"


@pytest.mark.reliability
@pytest.mark.parametrize("database", ["default"], indirect=True)
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_beat_killed_and_restarted_sends_each_occurrence_once(env, redis_client, ledger,
                                                              tmp_path, request, figure):
    """A beat SIGKILLed and started again goes on with the schedule, none of it twice.

    django-celery-beat saves ``last_run_at`` on its first send and then every few minutes, so a
    beat killed just after a later send has not saved it: started again, it sends that
    occurrence once more. The schedule here ticks every 5 s from a slot boundary, the kill
    follows the second send at once, and the restarted beat's re-send lands in the same slot,
    where the occurrence key makes it the job that already ran."""
    period = 5
    now = store_for(importlib.import_module("tests.apps.recorded").app).server_time()
    first_due = now - now % period + 2 * period  # a boundary at least 5 s away: beat is up
    PeriodicTask.objects.filter(name="tick-acme").update(
        interval=IntervalSchedule.objects.create(every=period, period=IntervalSchedule.SECONDS),
        last_run_at=datetime.fromtimestamp(first_due - period + 0.2, UTC))
    lives = []
    try:
        lives.append(start_beat(0, env, tmp_path, request.config.rootpath))
        assert wait_until(lambda: beat_sends(tmp_path, 1)[0] >= 2, 4 * period, 0.02), (
            (tmp_path / "beat-0.log").read_text()[-2000:])
        os.killpg(lives[0][0].pid, signal.SIGKILL)  # just after a send, no shutdown
        lives.append(start_beat(1, env, tmp_path, request.config.rootpath))
        assert wait_until(lambda: redis_client.llen("ticks") >= 3, 4 * period), (
            (tmp_path / "beat-1.log").read_text()[-2000:])
    finally:
        for process, log in lives:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            log.close()
    assert wait_until(lambda: len(ledger.counts()) == redis_client.llen("ticks"), 10)
    runs = ledger.counts()
    sent = beat_sends(tmp_path, 2)
    figure(f"beat SIGKILL: {sum(sent)} sends ({sent[0]} before the kill, {sent[1]} after), "
           f"{len(runs)} occurrences run, {sum(sent) - len(runs)} re-sent occurrence absorbed "
           f"by its key, {sum(runs.values()) - len(runs)} duplicates")
    assert set(runs.values()) == {1}, "an occurrence ran twice"
    assert len(runs) >= 3 and sent[1] >= 2, "the restarted beat goes on with the schedule"
    assert sum(sent) == len(runs) + 1, "the restarted beat re-sends the unsaved occurrence"
