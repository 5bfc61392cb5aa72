"""Where the Django tests' ``postgres`` alias points: the session's throwaway cluster.

A plugin of the whole suite (``tests/conftest.py``'s ``pytest_plugins``), not a fixture of
``tests/django/conftest.py``: pytest-django sets the test databases up once a session, with the
``django_db_modify_db_settings`` that the first test to need a database sees. A fixture of the
django folder alone was skipped when that test was elsewhere (a browser test, as a parallel run
can order them), and every PostgreSQL test after it met the dummy alias. A connection to the
dummy alias made before (the browser tests' live server opens one to every alias) is dropped.
"""

from __future__ import annotations

import contextlib

import pytest
from django.conf import settings
from django.db import connections

from tests.harness import PostgresServer

PG_ALIAS = "postgres"
PG_TEST_DATABASE = "fairqueue_test"


def _on_postgres(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("database") == PG_ALIAS


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None,
                                 request: pytest.FixtureRequest) -> None:
    """Point the ``postgres`` alias at the session's cluster when a test will use it."""
    if not any(_on_postgres(item) and not item.get_closest_marker("skip")
               for item in request.session.items):
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    alias = settings.DATABASES[PG_ALIAS]
    alias.update(ENGINE="django.db.backends.postgresql", NAME="postgres", USER="postgres",
                 HOST="127.0.0.1", PORT=server.port)
    alias["TEST"]["NAME"] = PG_TEST_DATABASE
    with contextlib.suppress(AttributeError):  # none made yet
        del connections[PG_ALIAS]
