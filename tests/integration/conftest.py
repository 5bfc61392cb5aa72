"""Fixtures of the integration tests: a fair store on the session's real redis-server."""

from collections.abc import Callable
from typing import Any

import pytest

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.store import FairStore, store_for


@pytest.fixture
def store(make_store: Callable[..., FairStore]) -> FairStore:
    """A store of its own (the store tests), on the flushed session Redis."""
    return make_store(lease_seconds=30.0)


@pytest.fixture
def fair_store(fair, redis_client) -> FairStore:
    """The fair test app's own store, on the flushed session Redis."""
    return store_for(fair.app)


def put(store: FairStore, account: str, n: int, queue: str = "default", **options: Any) -> str:
    """Enqueue a minimal job; returns its job id."""
    task_id = f"{account}-{n}"
    envelope = Envelope(body='[[], {}, {}]', headers={"task": "t", "id": task_id,
                                                      "fairqueue_account": account})
    job_id = delivery_id(task_id, 0)
    store.enqueue(queue=queue, account=account, job_id=job_id, envelope=envelope.to_json(),
                  **options)
    return job_id
