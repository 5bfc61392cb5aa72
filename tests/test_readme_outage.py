"""The README's app (Redis broker, Redis result backend and the fair store on one Redis) through
a Redis outage: every ``.delay()`` is one ``StoreUnavailableError`` within
``fairqueue_enqueue_timeout`` (+ 1 s), the first call or the tenth, in a fresh process or a warm
one; with Redis up, results come back, a job's that finished at once included.

The README's ``proj.py`` is copied as printed (only the Redis URL swapped) and driven by a small
script that reads commands on stdin and prints one JSON line per call, so a process stays warm
(its connections and result subscriptions made) across the outage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.workers import WorkerProcess
from tests.test_readme import README_REDIS_URL, ROOT, clean_env, quickstart_blocks

ENQUEUE_TIMEOUT = 5.0  # fairqueue_enqueue_timeout's default: the README's app leaves it
CALLS = 10

DRIVER = '''
import json, sys, time
from proj import send_step
from celery_fairqueue import EnqueueError

print("ready", flush=True)
for line in sys.stdin:
    command, count = line.split()
    for n in range(int(count)):
        started = time.monotonic()
        try:
            result = send_step.delay("acme", 42, f"{command}-{time.time_ns()}-{n}", 3)
            out = {"value": result.get(timeout=30) if command == "get" else None}
        except Exception as exc:
            out = {"error": type(exc).__name__, "enqueue_error": isinstance(exc, EnqueueError),
                   "message": str(exc)[:300]}
        out["seconds"] = time.monotonic() - started
        print(json.dumps(out), flush=True)
'''


class Driver:
    """``python driver.py`` in the README's project folder, run from this checkout."""

    def __init__(self, project: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "driver.py"], cwd=project, text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**clean_env(), "PYTHONPATH": str(ROOT)})
        assert self.line() == "ready"

    def line(self) -> str:
        assert self.process.stdout is not None
        text = self.process.stdout.readline().strip()
        assert text, f"the driver exited (code {self.process.poll()})"
        return text

    def run(self, command: str, count: int) -> list[dict]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command} {count}\n")
        self.process.stdin.flush()
        replies = []
        for _ in range(count):
            text = self.line()
            try:
                replies.append(json.loads(text))
            except ValueError:
                pytest.fail(f"the driver printed {text!r}")
        return replies

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)


def assert_each_is_one_store_error_in_time(replies: list[dict], where: str) -> None:
    for n, reply in enumerate(replies, 1):
        assert reply.get("error") == "StoreUnavailableError" and reply["enqueue_error"], (
            f"{where}, call {n}: {reply}")
        assert reply["seconds"] < ENQUEUE_TIMEOUT + 1.0, f"{where}, call {n}: {reply}"


@pytest.mark.slow
def test_the_readme_app_raises_one_store_error_within_the_enqueue_timeout_while_redis_is_down(
        redis_server_factory, tmp_path):
    server = redis_server_factory()
    project = tmp_path / "quickstart"
    project.mkdir()
    (project / "proj.py").write_text(
        quickstart_blocks()["proj.py"].replace(README_REDIS_URL, server.url))
    (project / "driver.py").write_text(DRIVER)
    worker = WorkerProcess("proj", redis_url=server.url, log_path=tmp_path / "worker.log",
                           cwd=project, pool="prefork", concurrency=2,
                           env={"PYTHONPATH": os.pathsep.join([str(project), str(ROOT)])})
    warm = Driver(project)
    drivers = [warm]
    try:
        worker.start()
        # up: results come back, those of jobs that finish as soon as they are claimed too
        for reply in warm.run("get", 20):
            assert str(reply.get("value", "")).startswith("msg-"), reply
        worker.kill()

        server.stop()
        assert_each_is_one_store_error_in_time(warm.run("delay", CALLS), "warm process")
        fresh = Driver(project)
        drivers.append(fresh)
        assert_each_is_one_store_error_in_time(fresh.run("delay", CALLS), "fresh process")

        # up again: the warm process enqueues and gets results as before
        server.start()
        worker.start()
        for reply in warm.run("get", 3):
            assert str(reply.get("value", "")).startswith("msg-"), reply
    finally:
        for driver in drivers:
            driver.close()
        worker.kill()
