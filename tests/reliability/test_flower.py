"""Flower, installed from PyPI and pointed at real workers, lists fair tasks with their states:
fair jobs reach Celery's own Request, so its events (received, started, succeeded, failed,
retried) are sent as for any task."""

import importlib
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.harness import REDIS_URL_ENV, free_port, wait_until

APP = "tests.apps.compat"

pytestmark = pytest.mark.reliability


@pytest.fixture
def flower(redis_url, tmp_path):
    port = free_port()
    with open(tmp_path / "flower.log", "wb") as log:  # the process keeps its own copy
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", APP, "flower", f"--port={port}",
             "--address=127.0.0.1", "--persistent=False"],
            env={**os.environ, REDIS_URL_ENV: redis_url, "FLOWER_UNAUTHENTICATED_API": "true"},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _answers(url + "/healthcheck"), timeout=30), \
            (tmp_path / "flower.log").read_text()
        yield url
    finally:
        process.kill()
        process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def tasks(url: str) -> dict:
    with urllib.request.urlopen(url + "/api/tasks", timeout=5) as reply:
        return json.loads(reply.read())


def test_flower_lists_fair_tasks_with_their_states(flower, redis_server, redis_client,
                                                   celery_worker_factory):
    compat = importlib.import_module(APP)
    # task events, as Flower needs; one thread, so that a retry's task-retried event is sent
    # before its next attempt runs: with two, flaky's last attempt (retried with no delay) can
    # fail on the other thread first, and Flower shows the state of the event it got last
    celery_worker_factory(APP, concurrency=1, args=("-E",))
    ok = compat.add.delay(2, 3)
    bad = compat.boom.delay(1)
    flaky = compat.flaky.delay(1)  # retried twice by its autoretry_for, then fails
    assert ok.get(timeout=20) == 5

    def seen() -> dict:
        found = tasks(flower)
        return {task_id: found[task_id] for task_id in (ok.id, bad.id, flaky.id)
                if task_id in found}

    assert wait_until(lambda: len(seen()) == 3 and seen()[flaky.id]["state"] == "FAILURE",
                      timeout=30), seen()
    shown = seen()
    assert shown[ok.id]["state"] == "SUCCESS" and shown[ok.id]["result"] == "5"
    assert shown[bad.id]["state"] == "FAILURE" and "ValueError" in shown[bad.id]["exception"]
    assert shown[flaky.id]["retries"] == 2  # its retried deliveries reached Flower too
    for task in shown.values():
        assert task["received"] and task["started"] and task["name"].startswith(APP)
