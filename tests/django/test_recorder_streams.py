"""Recorders that scale out: several ``manage.py fairqueue_recorder`` processes share a sharded
store's event streams (one per shard), each stream led by one of them, and take over the
streams of one that dies. Real recorder processes, a real redis-server and PostgreSQL."""

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.contrib.django.recording.recorder import Recorder
from celery_fairqueue.store import RECORDER_GROUP, store_for
from tests.harness import REDIS_URL_ENV, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LOCK_SECONDS = 3.0


@pytest.fixture
def streams(redis_server, redis_client):
    module = importlib.import_module("tests.apps.streams")
    module.fresh()
    return module


def leaders(store, client) -> Counter:
    """How many streams each recorder leads (a stream's lease holds its leader's name)."""
    return Counter(client.get(shard.keys.recorder_lock) or "" for shard in store.shards)


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_two_recorders_lead_half_the_streams_each_and_one_takes_all_when_the_other_is_killed(
        database, db_env, streams, redis_server, redis_client, request, figure):
    env = {**os.environ, **db_env, REDIS_URL_ENV: redis_server.url,
           "PYTHONPATH": str(request.config.rootpath),
           "FAIRQUEUE_TEST_APP": "tests.apps.streams.app"}

    def recorder(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "django", "fairqueue_recorder", "--consumer", name,
             "--block-ms", "100", "--lock-seconds", str(LOCK_SECONDS),
             "--settings", "tests.django.settings"],
            env=env, cwd=request.config.rootpath, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    store = store_for(streams.app)
    processes = [recorder("one"), recorder("two")]
    try:
        assert wait_until(lambda: leaders(store, redis_client) == {"one": 8, "two": 8}, 20), \
            leaders(store, redis_client)
        streams.fresh()  # producers ask again whether a recorder listens
        first = [streams.job.delay(f"acct-{n}", n).id for n in range(300)]
        taken: list[float] = []  # when "two" led all 16, seen while the jobs below are sent

        def watch() -> None:
            if wait_until(lambda: leaders(store, redis_client) == {"two": 16}, 4 * LOCK_SECONDS):
                taken.append(time.monotonic())

        watcher = threading.Thread(target=watch)
        processes[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        watcher.start()
        more = [streams.job.delay(f"acct-{n}", n).id for n in range(300, 600)]
        watcher.join()
        assert taken, leaders(store, redis_client)
        took_over = taken[0] - killed  # within two thirds of lock_seconds, by design
        assert took_over <= LOCK_SECONDS, f"took {took_over:.1f} s"
        figure(f"recorders over 16 streams: 8 + 8, one SIGKILLed, the other led all 16 "
               f"{took_over:.2f} s later (lock_seconds {LOCK_SECONDS:.0f})")
        assert wait_until(lambda: Job.objects.count() >= 600, 20), Job.objects.count()
        assert wait_until(lambda: sum(redis_client.xlen(s.keys.events)
                                      for s in store.shards) == 0, 10)
    finally:
        for process in processes:
            process.kill()
            process.wait(10)
    rows = Counter(Job.objects.values_list("task_id", flat=True))
    assert set(rows) == set(first + more) and set(rows.values()) == {1}
    for shard in store.shards:  # every event acknowledged: none left pending to anyone
        assert redis_client.xpending(shard.keys.events, RECORDER_GROUP)["pending"] == 0


def test_one_recorder_alone_leads_every_stream_of_a_sharded_store(
        database, streams, make_recorder, redis_client):
    recorder: Recorder = make_recorder(streams.app, "alone")
    streams.fresh()
    ids = [streams.job.delay(f"acct-{n}", n).id for n in range(64)]
    while recorder.run_once():
        pass
    assert leaders(store_for(streams.app), redis_client) == {"alone": 16}
    assert set(Job.objects.values_list("task_id", flat=True)) == set(ids)
