"""The project's process harness: real redis-server, Celery worker and PostgreSQL processes.

Project-internal (not part of the installed package). Nothing is mocked: every fixture starts
the real program as a subprocess and stops it at teardown, failures included. The fixtures
(``redis_server``, ``redis_server_factory``, ``redis_url``, ``redis_client``,
``celery_worker_factory``, ``pg_server``, ``ledger``) live in ``tests.harness.fixtures``, which
``tests/conftest.py`` registers through ``pytest_plugins``; this package re-exports the helpers
that tests, bench scripts and the example project import.

Why not pytest-celery: its workers run in Docker containers (the smoke-test setup) or as a
thread inside the test process (the ``celery_worker`` fixture); neither is a ``celery worker``
process with its own bootsteps that a test can SIGKILL, which is what crash tests need.

Django is never imported here; the core package must work without it.
"""

from tests.harness.postgres import PostgresServer, find_postgres_bindir
from tests.harness.processes import (
    child_pids,
    free_port,
    pid_alive,
    process_group,
    tail,
    wait_until,
)
from tests.harness.redis_server import (
    LEDGER_KEY,
    REDIS_PORT_ENV,
    REDIS_URL_ENV,
    IdempotentAPI,
    Ledger,
    RedisServer,
    drop_result_subscriptions,
    record_side_effect,
)
from tests.harness.workers import WorkerProcess

__all__ = [
    "LEDGER_KEY",
    "REDIS_PORT_ENV",
    "REDIS_URL_ENV",
    "IdempotentAPI",
    "Ledger",
    "PostgresServer",
    "RedisServer",
    "WorkerProcess",
    "child_pids",
    "drop_result_subscriptions",
    "find_postgres_bindir",
    "free_port",
    "pid_alive",
    "process_group",
    "record_side_effect",
    "tail",
    "wait_until",
]
