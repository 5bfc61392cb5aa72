"""The example project runs its workload end to end: real worker, real Redis, real database."""

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, browser_page
from tests.harness import child_pids, pid_alive, wait_until

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


@pytest.mark.xdist_group("cpu-a")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.slow
def test_the_demo_once_runs_the_workload_and_stops_what_it_started(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    demo = subprocess.run(
        [sys.executable, str(EXAMPLE / "run_demo.py"), "--once"],
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
    assert "--once: not serving the console" in demo.stdout
    assert "nothing it started is left running" in demo.stdout
    started = [line for line in demo.stdout.splitlines() if "started redis-server pid" in line]
    redis_pid = int(started[0].split("pid ")[1].split()[0])
    assert not pid_alive(redis_pid)


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children in their own sessions included)."""
    found, frontier = [], [pid]
    while frontier:
        children = child_pids(frontier.pop())
        found += children
        frontier += children
    return found


@pytest.mark.xdist_group("cpu-b")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.slow
def test_the_demo_stays_up_without_a_terminal_until_sigterm(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    env.pop("CI", None)
    out = tmp_path / "demo.out"
    with open(out, "wb") as log:
        demo = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "run_demo.py")], env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        console = re.compile(r"console: (http://127\.0\.0\.1:\d+/\S*) \(login demo / demo\)")
        assert wait_until(lambda: console.search(out.read_text()) or demo.poll() is not None,
                          150), out.read_text()
        printed = out.read_text()
        found = console.search(printed)
        assert found and demo.poll() is None, f"the demo did not stay up:\n{printed}"
        assert "Ctrl-C" in printed and "SIGTERM" in printed, printed
        started = _descendants(demo.pid)
        redis_pid = int(re.search(r"started redis-server pid (\d+)", printed)[1])
        assert redis_pid in started, (redis_pid, started)

        # the console answers on loopback: its login page, and the accounts page (to the login)
        parts = urllib.parse.urlsplit(found[1])
        login = f"{parts.scheme}://{parts.netloc}/admin/login/"
        with urllib.request.urlopen(login, timeout=10) as page:
            assert page.status == 200 and b"csrfmiddlewaretoken" in page.read()
        with urllib.request.urlopen(found[1], timeout=10) as page:
            assert page.status == 200 and "/admin/login/" in page.url
        if CHROMIUM.exists():  # and as a person sees it: logged in, in a real Chromium
            see_the_demo_console(found[1])
        time.sleep(1.0)
        assert demo.poll() is None and all(pid_alive(pid) for pid in started), printed

        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 0, out.read_text()
        printed = out.read_text()
        assert "nothing it started is left running" in printed, printed
        assert [pid for pid in started if pid_alive(pid)] == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)
        demo.wait(10)


def see_the_demo_console(url: str) -> None:
    """Log in with the login the demo printed and see its console's accounts, in Chromium."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser_page(CHROMIUM) as page:
        page.goto(url)
        page.fill("#id_username", "demo")
        page.fill("#id_password", "demo")
        page.click("input[type=submit]")
        page.wait_for_url(re.compile(r".*/admin/celery_fairqueue/account/.*"))
        page.wait_for_selector("#result_list, .fq-console, table", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "demo-console.png"), full_page=True)
        assert "/admin/login/" not in page.url
        assert "acct" in page.content() or "account" in page.content().lower()
