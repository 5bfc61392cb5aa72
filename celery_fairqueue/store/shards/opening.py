"""Opening the fair store of an app: of as many shards as the store has (sharded.py)."""

from __future__ import annotations

from celery import Celery

from ...settings import FairqueueSettings, settings_for
from .shard import FairStore
from .sharded import ShardedStore


def open_store(settings: FairqueueSettings, *, fail_fast: bool = False) -> ShardedStore:
    """The fair store of ``settings``, following the store's number of shards (sharded.py)."""
    return ShardedStore.from_settings(settings, fail_fast=fail_fast)


def store_for(app: Celery) -> FairStore:
    """The fair store of ``app``, created once per app (redis-py reconnects after fork)."""
    store = getattr(app, "_fairqueue_store", None)
    if store is None:
        store = open_store(settings_for(app))
        app._fairqueue_store = store
    return store

