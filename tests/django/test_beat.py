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
from celery_fairqueue.publish import get_store
from celery_fairqueue.testing import REDIS_URL_ENV, wait_until

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
def test_two_beats_enqueue_each_occurrence_once(env, ledger, tmp_path, request):
    recorded = importlib.import_module("tests.apps.recorded")
    beats = [start_beat(i, env, tmp_path, request.config.rootpath) for i in range(2)]
    try:
        time.sleep(6)
    finally:
        for process, log in beats:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            log.close()
    sent = sum((tmp_path / f"beat-{i}.log").read_text().count("Sending due task tick-acme")
               for i in range(2))
    enqueued = get_store(recorded.app).stats().get("enqueued", 0)
    assert wait_until(lambda: len(ledger.counts()) == enqueued, 10)
    runs = ledger.counts()
    assert len(runs) >= 3, f"beats sent {sent} times, {enqueued} jobs"
    assert set(runs.values()) == {1}, "an occurrence ran twice"
    assert sent >= len(runs) + 3, "both beats must have sent the occurrences they share"


@pytest.mark.reliability
@pytest.mark.parametrize("database", ["default"], indirect=True)
@pytest.mark.django_db(transaction=True)
def test_beat_killed_and_restarted_sends_each_occurrence_once(env, redis_client, ledger,
                                                              tmp_path, request, figure):
    """A beat SIGKILLed and started again goes on with the schedule, none of it twice.

    django-celery-beat saves ``last_run_at`` now and then, so a beat killed after sending may
    send the same occurrence again when restarted; its occurrence key makes that one job."""
    before = 0  # occurrences run before the kill
    for life in range(2):
        process, log = start_beat(life, env, tmp_path, request.config.rootpath)
        try:
            assert wait_until(lambda n=3 * (life + 1): redis_client.llen("ticks") >= n, 20), (
                (tmp_path / f"beat-{life}.log").read_text()[-2000:])
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # mid-schedule, no shutdown of any kind
            process.wait()
            log.close()
        before = before or redis_client.llen("ticks")
    assert wait_until(lambda: len(ledger.counts()) == redis_client.llen("ticks"), 10)
    runs = ledger.counts()
    after = len(runs) - before
    sent = sum((tmp_path / f"beat-{i}.log").read_text().count("Sending due task tick-acme")
               for i in range(2))
    figure(f"beat SIGKILL: {sent} sends by a beat killed and restarted, {len(runs)} "
           f"occurrences run ({before} before the kill, {after} after), "
           f"{sum(runs.values()) - len(runs)} duplicates")
    assert set(runs.values()) == {1}, "an occurrence ran twice"
    assert before >= 3 and after >= 3
