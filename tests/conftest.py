"""Shared fixtures. The process harness's fixtures (``tests.harness.fixtures``), the order of a
parallel run (``tests.harness.parallel``) and the session's PostgreSQL alias
(``tests.django.databases``) are registered here through ``pytest_plugins``."""

import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from celery_fairqueue import DeadLetters
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore
from celery_fairqueue.store.connection.connect import make_client
from celery_fairqueue.store.formats.keys import Keys
from celery_fairqueue.store.shards.sharded import ShardedStore

pytest_plugins = ["tests.harness.fixtures", "tests.harness.parallel", "tests.django.databases"]

#: A test whose body runs longer than this is marked ``slow``, so ``make check`` leaves it out.
SLOW_SECONDS = 2.0
#: The folders ``make check`` runs (with ``-m "not slow"``).
CHECKED = ("tests/unit/", "tests/integration/", "tests/django/")


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``figure("kill storm: ...")``: a measured result, listed at the end of the run.

    The line travels in the test's report (``user_properties``), so the figures of a test that
    a pytest-xdist worker ran reach the summary, which the controller prints."""

    def record(line: str) -> None:
        request.node.user_properties.append(("figure", line))

    return record


def _reports(terminalreporter: Any) -> list[pytest.TestReport]:
    """Every test report of the run (from whichever process ran the test), in finishing order."""
    reports = [report for reports in terminalreporter.stats.values() for report in reports
               if isinstance(report, pytest.TestReport)]
    return sorted(reports, key=lambda report: report.stop)


def _crowding(config: pytest.Config) -> float:
    """How much longer a test takes beside its neighbours of a pytest-xdist run than alone: as
    many times as there are workers per core (1 in a serial run)."""
    workers = getattr(config.option, "numprocesses", None) or 0
    return max(1.0, workers / (os.cpu_count() or 1))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reports = _reports(terminalreporter)
    # the teardown report holds every line the test recorded, its fixtures' included
    figures = [str(value) for report in reports if report.when == "teardown"
               for name, value in report.user_properties if name == "figure"]
    if figures:
        terminalreporter.section("figures")
        for line in figures:
            terminalreporter.write_line(line)
    # the call alone: a session server's start lands in the setup of whichever test comes first;
    # times swing with the machine's load, so mark a test that keeps showing up here
    limit = SLOW_SECONDS * _crowding(config)
    unmarked = sorted((report.duration, report.nodeid) for report in reports
                      if report.when == "call" and report.passed and report.duration > limit
                      and "slow" not in report.keywords and report.nodeid.startswith(CHECKED))
    if unmarked:
        alone = f" in a parallel run ({SLOW_SECONDS:g} s alone)" if limit > SLOW_SECONDS else ""
        terminalreporter.section(f"over {limit:g} s{alone}, not marked slow (make check runs them)")
        for seconds, nodeid in reversed(unmarked):
            terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")


@pytest.fixture
def make_store(redis_client: redis.Redis, redis_url: str) -> Iterator[Callable[..., FairStore]]:
    """``make_store(**settings)``: a FairStore on the (flushed) session Redis."""
    clients = []

    def make(**settings: Any) -> FairStore:
        config = FairqueueSettings(redis_url=redis_url, **settings)
        config.validate()
        client = make_client(redis_url)
        clients.append(client)
        kind = ShardedStore if config.shards > 1 else FairStore
        return kind(client, Keys(config.key_prefix), config)

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def fair(redis_server):
    """The fair test app module, imported once the session Redis it points at is up."""
    return importlib.import_module("tests.apps.fair")


@pytest.fixture
def rel(redis_server):
    """The reliable-jobs test app module."""
    return importlib.import_module("tests.apps.reliable")


@pytest.fixture
def dlq(rel, redis_client):
    """The reliable app's dead letters, on the flushed session Redis."""
    return DeadLetters(rel.app)
