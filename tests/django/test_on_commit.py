"""Fair tasks enqueue on commit as Celery's DjangoTask does: once when the transaction commits,
never when it rolls back."""

import pytest
from django.db import transaction

from celery_fairqueue.store import store_for

pytestmark = pytest.mark.django_db(transaction=True)


def enqueued(app) -> int:
    return store_for(app).stats().get("enqueued", 0)


def test_delay_on_commit_enqueues_once_on_commit_and_never_on_rollback(fair, redis_client):
    with pytest.raises(RuntimeError), transaction.atomic():
        fair.job.delay_on_commit("acme", 1)
        raise RuntimeError("the request failed: rolled back")
    assert enqueued(fair.app) == 0
    with transaction.atomic():
        fair.job.delay_on_commit("acme", 2)
        fair.job.apply_async_on_commit(("acme", 3), countdown=60)
        assert enqueued(fair.app) == 0  # not before the commit
    assert enqueued(fair.app) == 2
    counts = store_for(fair.app).counts("celery")
    assert (counts["ready"], counts["delayed"]) == (1, 1)
