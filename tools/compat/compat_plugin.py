"""pytest plugin for ``make compat``: runs Celery's own integration tests unchanged, either as
plain Celery or with every task of the test apps a FairTask (``task_cls``).

Loaded with ``-p celery.contrib.pytest -p compat_plugin`` (in that order, so that this module's
``celery_parameters`` overrides Celery's). Options:

- ``--compat-mode=plain|fair``: ``fair`` makes the apps of Celery's ``celery_app`` and
  ``celery_session_app`` fixtures fair as a user would: ``task_cls`` a FairTask subclass, the
  settings of ``FAIR_CONFIG`` and ``celery_fairqueue.install(app)``.
- ``--compat-timeout=SECONDS``: the most any one test may take; Celery's own ``timeout``
  markers (up to 300 s) are cut to it, and a test past it stops at its next subtest (pytest's
  subtests catch pytest-timeout's interruption and would go on with the next one).
- ``--compat-shard=I/N``: run every N-th test, starting with the I-th (0-based), so that
  several runs, each with its own worker and redis-server, share the work.
- ``--compat-stats=PATH``: where to write how many task messages the test process sent through
  the fair store and through the broker, so the runner can tell that the fair run was fair.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, signals

import celery_fairqueue
from celery_fairqueue import FairTask
from celery_fairqueue.protocol import ACCOUNT_HEADER

#: What a user sets to make a whole existing app fair: the account of jobs that name none
#: (Celery's test tasks pass no account). The default fairqueue_max_payload_bytes (4 MiB) holds
#: Celery's largest message, test_chain_to_a_chord_with_large_header's 271 KB chain.
FAIR_CONFIG = {
    "fairqueue_default_account": "shared",
}
#: The Celery fixtures that build the apps: the per-test one (producers) and the session one
#: (the embedded worker).
APP_FIXTURES = frozenset({"celery_app", "celery_session_app"})

published: Counter[str] = Counter()
#: When each test started, and the test whose call is running with the time it must end by
#: (see ``pytest_runtest_logreport``).
started: dict[str, float] = {}
running: dict[str, float] = {}
#: pytest-timeout's alarm and the deadline here start a moment apart: a subtest reported this
#: close to the deadline is the one the alarm interrupted.
SLACK = 1.0


class CompatFairTask(FairTask):
    """The base class of every task of Celery's test apps in the fair run, as a user who makes
    a whole existing app fair would write it: a FairTask subclass given as ``task_cls``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "celery-fairqueue compatibility run")
    group.addoption("--compat-mode", choices=("plain", "fair"), default="plain",
                    help="plain Celery, or every task a FairTask (task_cls)")
    group.addoption("--compat-timeout", type=float, default=60.0,
                    help="most seconds one test may take (Celery's timeout markers are cut)")
    group.addoption("--compat-shard", default="0/1",
                    help="I/N: run every N-th test starting with the I-th (0-based)")
    group.addoption("--compat-stats", default=None,
                    help="JSON file for the count of messages sent through the fair store")


def fair_mode(config: pytest.Config) -> bool:
    return bool(config.getoption("--compat-mode") == "fair")


def pytest_configure(config: pytest.Config) -> None:
    signals.after_task_publish.connect(count_publish, weak=False)


def count_publish(sender: Any = None, headers: Mapping[str, Any] | None = None,
                  **_: Any) -> None:
    """Count messages by where they went: fair messages carry the account header."""
    published["fair" if (headers or {}).get(ACCOUNT_HEADER) else "broker"] += 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this shard's tests, and cut every test's timeout (pytest-timeout) to
    ``--compat-timeout``."""
    index, count = (int(part) for part in config.getoption("--compat-shard").split("/"))
    if count > 1:
        config.hook.pytest_deselected(items=[t for i, t in enumerate(items) if i % count != index])
        items[:] = [t for i, t in enumerate(items) if i % count == index]
    cap = float(config.getoption("--compat-timeout"))
    for item in items:
        marker = item.get_closest_marker("timeout")
        own = None
        if marker is not None:
            own = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        limit = min(float(own), cap) if own else cap
        item.add_marker(pytest.mark.timeout(limit), append=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    # pytest-timeout's timer starts here too (setup, call and teardown share it)
    started[item.nodeid] = time.monotonic()
    try:
        return (yield)
    finally:
        started.pop(item.nodeid, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    start = started.get(item.nodeid, time.monotonic())
    running[item.nodeid] = start + float(item.config.getoption("--compat-timeout"))
    try:
        return (yield)
    finally:
        running.pop(item.nodeid, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> Generator[None, None, None]:
    """A report while its test still runs is a subtest's: once the test is past its time, end
    the test here (raised out of the subtest's ``with``) instead of starting the next one."""
    result = yield
    deadline = running.get(report.nodeid)
    if deadline is not None and time.monotonic() > deadline - SLACK:
        running.pop(report.nodeid, None)
        pytest.fail("compat: over --compat-timeout; the remaining subtests were not run",
                    pytrace=False)
    return result


@pytest.fixture(scope="session")
def celery_parameters(request: pytest.FixtureRequest) -> Mapping[str, Any]:
    """Celery's fixture of ``Celery(...)`` arguments: in the fair run, ``task_cls``."""
    if fair_mode(request.config):
        return {"task_cls": CompatFairTask}
    return {}


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any],
                         request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
    """Install the fair path in each app Celery's fixtures build, before any test uses it."""
    app = yield
    if fixturedef.argname in APP_FIXTURES and fair_mode(request.config):
        make_fair(app)
    return app


def make_fair(app: Celery) -> None:
    """What a user does to make an existing app fair, checked: a plugin that silently did
    nothing would compare plain Celery with itself."""
    if not issubclass(app.Task, FairTask):
        raise pytest.UsageError(
            f"compat: the app's Task is {app.Task!r}, not a FairTask: celery_parameters of "
            "compat_plugin was not used (load it with -p after celery.contrib.pytest)")
    app.conf.update(FAIR_CONFIG)
    celery_fairqueue.install(app)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--compat-stats")
    if path:
        Path(path).write_text(json.dumps({"mode": session.config.getoption("--compat-mode"),
                                          "published": dict(published)}))
