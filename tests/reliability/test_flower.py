"""Flower, installed from PyPI and pointed at real workers, shows fair tasks as a user reads
them there: fair jobs reach Celery's own Request, so its events (received, started, succeeded,
failed, retried) are sent as for any task; a waiting job revoked through Flower shows REVOKED;
a delayed job keeps its ETA; and a ``redact`` value shows nowhere (error, traceback, return
value, the worker page's scheduled list)."""

import contextlib
import importlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from celery import signals, states

from celery_fairqueue.store import store_for
from tests.harness import REDIS_URL_ENV, free_port, wait_until

APP = "tests.apps.compat"
RELIABLE = "tests.apps.reliable"  # its notify task redacts email and phone, and quotes both
EMAIL, PHONE = "jane.doe@example.com", "+1-555-0100"

pytestmark = pytest.mark.reliability


@contextlib.contextmanager
def running_flower(app: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A real Flower (``celery -A app flower``) on a free port; yields its URL."""
    port = free_port()
    with open(tmp_path / "flower.log", "wb") as log:  # the process keeps its own copy
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "flower", f"--port={port}",
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


@pytest.fixture
def flower(redis_url, tmp_path):
    with running_flower(APP, redis_url, tmp_path) as url:
        yield url


@pytest.fixture
def reliable_flower(redis_url, tmp_path):
    with running_flower(RELIABLE, redis_url, tmp_path) as url:
        yield url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def tasks(url: str) -> dict:
    with urllib.request.urlopen(url + "/api/tasks", timeout=5) as reply:
        return json.loads(reply.read())


def page(url: str, method: str = "GET") -> str:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.read().decode()


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


def test_flower_shows_fair_jobs_as_a_user_reads_them_without_their_redacted_values(
        reliable_flower, rel, redis_client, celery_worker_factory):
    etas: dict[str, str] = {}

    def remember_eta(headers, **_):
        etas[headers["id"]] = headers.get("eta")

    worker = celery_worker_factory(RELIABLE, args=("-E",))
    signals.before_task_publish.connect(remember_eta, weak=False)
    try:
        failing = rel.notify.delay("acme", 1, EMAIL, profile={"phone": PHONE})
        ok = rel.notify.delay("acme", 2, EMAIL, profile={"phone": PHONE})
        delayed = rel.notify.apply_async(("acme", 4, EMAIL), {"profile": {"phone": PHONE}},
                                         countdown=2)
        waiting = rel.notify.apply_async(("acme", 6, EMAIL), {"profile": {"phone": PHONE}},
                                         countdown=600)
    finally:
        signals.before_task_publish.disconnect(remember_eta)
    assert ok.get(timeout=20) == f"sent to {EMAIL}"  # the caller's own value, as it is

    # the worker page: its scheduled list (celery inspect scheduled) holds the waiting job
    listed = json.loads(page(f"{reliable_flower}/api/workers?refresh=1&workername="
                             f"{worker.hostname}"))[worker.hostname]["scheduled"]
    assert waiting.id in [entry["request"]["id"] for entry in listed]
    assert "***" in json.dumps(listed)
    worker_page = page(f"{reliable_flower}/worker/{worker.hostname}")
    assert waiting.id in worker_page

    # revoked through Flower's API while it waits: out of the store, REVOKED everywhere
    page(f"{reliable_flower}/api/task/revoke/{waiting.id}", method="POST")
    assert wait_until(lambda: tasks(reliable_flower).get(waiting.id, {}).get("state")
                      == "REVOKED", timeout=20), tasks(reliable_flower).get(waiting.id)
    assert waiting.state == states.REVOKED
    assert list(store_for(rel.app).deliveries_of(waiting.id)) == []

    def shown() -> dict:
        found = tasks(reliable_flower)
        return {job.id: found.get(job.id, {}) for job in (failing, ok, delayed)}

    assert wait_until(lambda: [t.get("state") for t in shown().values()]
                      == ["FAILURE", "SUCCESS", "SUCCESS"], timeout=30), shown()
    seen = shown()
    failed = seen[failing.id]
    assert failed["exception"] == "ValueError('mailbox *** rejected the message (phone ***)')"
    assert "mailbox *** rejected" in failed["traceback"]
    assert seen[ok.id]["result"] == "'sent to ***'"
    # the delayed job keeps the ETA it waited for, after it ran
    assert datetime.fromisoformat(seen[delayed.id]["eta"]) == \
        datetime.fromisoformat(etas[delayed.id])
    assert "mailbox *** rejected" in str(failing.result)  # the result backend's error too
    assert "mailbox *** rejected" in failing.traceback
    task_pages = [page(f"{reliable_flower}/task/{job.id}") for job in (failing, ok, delayed)]
    everything = [json.dumps(seen), json.dumps(listed), worker_page, *task_pages,
                  str(failing.result), failing.traceback]
    assert [text for text in everything if EMAIL in text or PHONE in text] == []
