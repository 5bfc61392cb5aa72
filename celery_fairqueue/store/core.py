"""The fair store: the one door to Redis (door.py) with each of its roles, as one object."""

from __future__ import annotations

from celery import Celery

from ..settings import settings_for
from .fleet import Fleet
from .jobs import Jobs
from .operator import Operator, paused_accounts


class FairStore(Jobs, Fleet, Operator):
    """Enqueue, claim and settle (Jobs), the worker registry (Fleet) and the operator's
    controls (Operator), over one Redis (StoreDoor)."""

    # what a queue holds now, across the roles (the metrics and the console read it)

    def counts(self, queue: str) -> dict[str, int]:
        """Ready, delayed and running job counts of one queue, its accounts deferred by their
        limit (rate, window, concurrency cap) and its accounts an operator paused."""
        qk = self.keys.queue(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(qk.ready)
        pipe.zcard(qk.delayed)
        pipe.hvals(qk.running)
        pipe.hlen(qk.deferrals)
        ready, delayed, running, deferred = pipe.execute()
        return {"ready": ready, "delayed": delayed, "running": sum(int(n) for n in running),
                "deferred_accounts": deferred,
                "paused_accounts": paused_accounts(self.pauses(), queue)}

    def stats(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(self.keys.stats).items()}


def store_for(app: Celery) -> FairStore:
    """The fair store of ``app``, created once per app (redis-py reconnects after fork)."""
    store = getattr(app, "_fairqueue_store", None)
    if store is None:
        store = FairStore.from_settings(settings_for(app))
        app._fairqueue_store = store
    return store

