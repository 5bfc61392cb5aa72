"""The example project runs its workload end to end: real worker, real Redis, real database."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import pid_alive

EXAMPLE = Path(__file__).resolve().parent.parent / "example_project"


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_workload_sends_one_message_per_business_key(
    celery_worker_factory, redis_url, tmp_path
):
    db = tmp_path / "example.sqlite3"
    env = {
        "DJANGO_SETTINGS_MODULE": "proj.settings",
        "REDIS_URL": redis_url,
        "DATABASE_URL": f"sqlite:///{db}",
    }
    migrated = _manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stderr
    celery_worker_factory("proj", cwd=EXAMPLE, env=env, pool="prefork", concurrency=2)

    run = _manage("run_demo_workload", "--timeout", "30", env=env)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "deduplicated at enqueue by its business key" in run.stdout
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select account_id, count(*), sum(deliveries) from automations_outboundmessage"
            " group by account_id order by account_id"
        ).fetchall()
    # acme's first lead was enqueued twice: one job (FairTask dedupes), one delivery, one message.
    assert rows == [("acme", 6, 6), ("globex", 3, 3), ("initech", 1, 1)]


@pytest.mark.slow
def test_run_demo_script_runs_and_stops_what_it_started(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    demo = subprocess.run(
        [sys.executable, str(EXAMPLE / "run_demo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert demo.returncode == 0, demo.stdout + demo.stderr
    # 314 workload and burst tasks; the console demo: 1 throttled send that ran, 2 permanent
    # failures, 2 jobs of 3 failed attempts each (the others wait: throttled, windowed, paused)
    assert "323 tasks received, 315 succeeded" in demo.stdout
    assert "rate limit: next token in" in demo.stdout
    assert "window closed until" in demo.stdout and "paused by demo" in demo.stdout
    assert "2 permanent failures and 2 that gave up after retries" in demo.stdout
    assert "plot written to" in demo.stdout
    assert "login demo / demo" in demo.stdout
    assert "nothing it started is left running" in demo.stdout
    started = [line for line in demo.stdout.splitlines() if "started redis-server pid" in line]
    redis_pid = int(started[0].split("pid ")[1].split()[0])
    assert not pid_alive(redis_pid)
