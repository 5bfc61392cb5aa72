"""Fixtures of the integration tests: a fair store on the session's real redis-server."""

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.keys import Keys
from celery_fairqueue.publish import get_store
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore, delivery_id, make_client


@pytest.fixture
def make_store(redis_client: redis.Redis, redis_url: str) -> Iterator[Callable[..., FairStore]]:
    """``make_store(**settings)``: a FairStore on the (flushed) session Redis."""
    clients = []

    def make(**settings: Any) -> FairStore:
        config = FairqueueSettings(redis_url=redis_url, **settings)
        config.validate()
        client = make_client(redis_url)
        clients.append(client)
        return FairStore(client, Keys(config.key_prefix), config)

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def store(make_store: Callable[..., FairStore]) -> FairStore:
    """A store of its own (the store tests), on the flushed session Redis."""
    return make_store(lease_seconds=30.0)


@pytest.fixture
def fair(redis_server):
    """The fair test app module, imported once the session Redis it points at is up."""
    return importlib.import_module("tests.apps.fair")


@pytest.fixture
def fair_store(fair, redis_client) -> FairStore:
    """The fair test app's own store, on the flushed session Redis."""
    return get_store(fair.app)


def put(store: FairStore, account: str, n: int, queue: str = "default", **options: Any) -> str:
    """Enqueue a minimal job; returns its job id."""
    task_id = f"{account}-{n}"
    envelope = Envelope(body='[[], {}, {}]', headers={"task": "t", "id": task_id,
                                                      "fairqueue_account": account})
    job_id = delivery_id(task_id, 0)
    store.enqueue(queue=queue, account=account, job_id=job_id, envelope=envelope.to_json(),
                  **options)
    return job_id
