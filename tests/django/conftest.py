"""Fixtures of the Django app's tests: the database switch, recorders running in a thread.

Tests that take the ``database`` fixture run on SQLite (the ``default`` alias, a file) and on
PostgreSQL (the ``postgres`` alias, the session's ``pg_server``). Collection marks the
PostgreSQL variants ``postgres`` and lets them use both aliases; the cluster starts only when
such a test was collected, and those variants are skipped when no PostgreSQL is installed
(outside CI, like ``pg_server`` itself). Where the ``postgres`` alias points is
``tests/django/databases.py``'s, for every test.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterator

import pytest
from celery import Celery
from django.db import connections

from celery_fairqueue.contrib.django.recording.recorder import Recorder
from celery_fairqueue.store import store_for
from tests.django.databases import PG_ALIAS, _on_postgres
from tests.django.settings import FairqueueRouter
from tests.harness import find_postgres_bindir


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    have_postgres = find_postgres_bindir() is not None or bool(os.environ.get("CI"))
    for item in items:
        if not _on_postgres(item):
            continue
        item.add_marker(pytest.mark.postgres)
        if not have_postgres:
            item.add_marker(pytest.mark.skip(reason="no PostgreSQL server binaries"))
            continue
        marker = item.get_closest_marker("django_db")
        options = dict(marker.kwargs) if marker else {}
        options["databases"] = ["default", PG_ALIAS]
        item.add_marker(pytest.mark.django_db(**options), append=False)


@pytest.fixture(params=["default", PG_ALIAS])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """The alias the fair-queue models live in for this test: SQLite, then PostgreSQL."""
    FairqueueRouter.alias = request.param
    try:
        yield request.param
    finally:
        FairqueueRouter.alias = "default"


@pytest.fixture
def db_env(database: str) -> dict[str, str]:
    """Environment that makes a worker or beat process use the test's database."""
    db = connections[database].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return {"FAIRQUEUE_TEST_SQLITE_PATH": str(db["NAME"])}
    return {"FAIRQUEUE_TEST_DATABASE_URL":
            f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}


class RunningRecorder:
    """A recorder in a thread of the test process, as the worker step runs it."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=recorder.run_forever, args=(self.stop_event,),
                                       name=f"recorder-{recorder.consumer_name}", daemon=True)

    def start(self) -> RunningRecorder:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(15)
        assert not self.thread.is_alive(), "the recorder did not stop"


def listen(app: Celery) -> None:
    """Drop the producer's 5 s "nobody records" cache: the session's apps outlive the stream,
    which every test's flush deletes, so without this their first events could go unwritten
    (each shard of a sharded store keeps its own)."""
    store_for(app).forget_recording()


@pytest.fixture
def make_recorder(redis_client: object, database: str) -> Iterator[Callable[..., Recorder]]:
    """``make_recorder(app, **options)``: a Recorder on the test's database, group created."""

    def make(app: Celery, name: str = "test", prune: bool = False, **options: object
             ) -> Recorder:
        """``prune``: the recorder prunes in its idle time, as a deployed one does. Off unless
        a test asks: the tests' events are timed in 2023 (test_recorder.Stream), past every
        retention, so an idle recorder would delete the rows a test is about to read."""
        options.setdefault("block_ms", 100)
        options.setdefault("max_backoff", 0.5)
        recorder = Recorder(app, name, **options)  # type: ignore[arg-type]
        if not prune:
            recorder.pruner = None
        recorder.reader.ensure_group()
        listen(app)
        return recorder

    yield make


@pytest.fixture
def start_recorder(
    make_recorder: Callable[..., Recorder],
) -> Iterator[Callable[..., RunningRecorder]]:
    """``start_recorder(app, **options)``: a recorder running in a thread until the test ends."""
    running: list[RunningRecorder] = []

    def start(app: Celery, **options: object) -> RunningRecorder:
        recorder = RunningRecorder(make_recorder(app, **options)).start()
        running.append(recorder)
        return recorder

    try:
        yield start
    finally:
        for recorder in running:
            recorder.stop()


@pytest.fixture
def rel(redis_server, redis_client, settings):
    """The reliable-jobs test app, configured as the Django app's Celery app."""
    settings.CELERY_FAIRQUEUE_APP = "tests.apps.reliable.app"
    return importlib.import_module("tests.apps.reliable")
