"""The harness's pytest fixtures and report hook, registered by ``tests/conftest.py``
(``pytest_plugins``): ``redis_server``, ``redis_server_factory``, ``redis_url``,
``redis_client``, ``ledger``, ``celery_worker_factory`` and ``pg_server``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.harness.postgres import PostgresServer, find_postgres_bindir
from tests.harness.processes import xdist_worker_number
from tests.harness.redis_server import (
    REDIS_PORT_ENV,
    REDIS_URL_ENV,
    Ledger,
    RedisServer,
    drop_result_subscriptions,
)
from tests.harness.workers import WorkerProcess


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's Redis, on a free port (or ``$FAIRQUEUE_TEST_REDIS_PORT``, plus n - 1 in
    pytest-xdist's worker ``gw<n-1>``). Each xdist worker is a session of its own, so each has
    its own server.

    Its URL is also exported as ``$FAIRQUEUE_TEST_REDIS_URL`` in the test process, so test apps
    that read it at import time can be imported by the tests themselves.
    """
    port = None
    if os.environ.get(REDIS_PORT_ENV):
        port = int(os.environ[REDIS_PORT_ENV]) + max(xdist_worker_number() - 1, 0)
    server = RedisServer(tmp_path_factory.mktemp("redis"), port=port)
    with pytest.MonkeyPatch.context() as mp:
        try:
            server.start()
            mp.setenv(REDIS_URL_ENV, server.url)
            yield server
        finally:
            server.stop()


@pytest.fixture
def redis_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., RedisServer]]:
    """Start extra Redis servers with their own config: ``redis_server_factory(appendonly="yes",
    appendfsync="everysec")``. Each gets a free port and its own directory; all are stopped at
    the end of the test."""
    servers: list[RedisServer] = []

    def start(**config: str) -> RedisServer:
        server = RedisServer(tmp_path_factory.mktemp("redis"), config=config)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session Redis (database 0)."""
    return redis_server.url


_STARTS_SEEN = pytest.StashKey[int]()


@pytest.fixture
def redis_client(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> Iterator[redis.Redis]:
    """A client (``decode_responses=True``) on an empty session Redis.

    A server that an earlier test paused or killed is brought back first, so one crash test
    cannot break the tests after it; after a restart, the test process's apps also drop their
    result connections to the old server (``drop_result_subscriptions``).
    """
    if redis_server.paused:
        redis_server.resume()
    redis_server.start()
    if request.config.stash.get(_STARTS_SEEN, 1) != redis_server.starts:
        drop_result_subscriptions()
    request.config.stash[_STARTS_SEEN] = redis_server.starts
    client = redis_server.client(decode_responses=True)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def ledger(redis_client: redis.Redis) -> Ledger:
    """An empty ledger on the session Redis (the database is flushed before the test)."""
    return Ledger(redis_client)


_WORKERS = pytest.StashKey[list[WorkerProcess]]()


@pytest.fixture
def celery_worker_factory(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real Celery workers against the session Redis (flushed before the test).

    ``celery_worker_factory(app="tests.apps.plain", pool="threads", concurrency=2, queues=(),
    hostname=None, args=(), env=None, cwd=None, timeout=30.0)`` returns a started
    ``WorkerProcess``. ``cwd`` (default: the pytest rootdir) is also put on ``PYTHONPATH``.
    Every worker is SIGKILLed at teardown; the log tails of a failed test's workers are added to
    its report.
    """
    workers = request.node.stash.setdefault(_WORKERS, [])

    def start(
        app: str = "tests.apps.plain",
        *,
        cwd: Path | str | None = None,
        timeout: float = 30.0,
        **options: Any,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            app,
            redis_url=redis_server.url,
            log_path=tmp_path / f"worker-{len(workers) + 1}.log",
            cwd=Path(cwd) if cwd is not None else request.config.rootpath,
            **options,
        )
        workers.append(worker)
        return worker.start(timeout)

    try:
        yield start
    finally:
        for worker in workers:
            worker.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the log tail of each worker a failed test started to its report."""
    report: pytest.TestReport = yield
    if report.failed:
        for worker in item.stash.get(_WORKERS, []):
            report.sections.append((f"worker {worker.hostname} log", worker.log_tail()))
    return report


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster for the session (use it from tests marked ``postgres``):
    one per pytest-xdist worker, each on its own port and directory.

    Skipped when no server binaries exist; under CI (``$CI`` set) that is an error instead, so a
    missing install step cannot pass as green.
    """
    bindir = find_postgres_bindir()
    if bindir is None:
        message = "PostgreSQL server binaries (initdb, postgres) not found; run `make services`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    directory = Path(tempfile.mkdtemp(prefix="fairqueue-pg-"))
    server = PostgresServer(bindir, directory)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
