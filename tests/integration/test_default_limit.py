"""The default limit lives in the fair store: the first worker sets it from its settings, an
operator changes it, every claim applies the store's, and a worker whose settings differ says
so once and uses the store's."""

import logging
from types import SimpleNamespace

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.store import ConsoleReader, StoreInspector
from celery_fairqueue.worker.dispatcher import FairDispatcher
from tests.harness.store_tools import claim_jobs

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)


class Inspector(StoreInspector):
    def __init__(self, store) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys
        self.console = ConsoleReader(store)


def test_the_first_default_set_wins_and_an_operator_changes_it(store):
    assert store.default_limit() is None
    first = AccountLimit(concurrency=1)
    assert store.set_default_limit(first, only_if_unset=True) == first
    assert store.set_default_limit(AccountLimit(rate="5/s"), only_if_unset=True) == first
    assert store.default_limit() == first
    changed = AccountLimit(rate="10/s", burst=3)
    assert store.set_default_limit(changed) == changed
    assert store.default_limit() == changed


def test_every_claim_applies_the_stores_default_not_the_workers_own(store):
    store.set_default_limit(AccountLimit(concurrency=1))
    for n in range(3):
        put(store, "acme", n)
    # the worker passes "no limit" as its own: the store's cap of one still holds
    assert [j.account for j in claim_jobs(store, ["default"], 10, "w", NO_LIMIT)] == ["acme"]
    [state] = Inspector(store).console.account_state("acme", ["default"])
    assert state.limit == AccountLimit(concurrency=1) and state.limit_is_default
    assert Inspector(store).status().default_limit == AccountLimit(concurrency=1)


def test_a_worker_whose_default_differs_warns_once_and_uses_the_stores(make_store, caplog):
    store = make_store(default_concurrency=2)
    store.set_default_limit(AccountLimit(concurrency=1))
    worker = SimpleNamespace(store=store, settings=store.settings, _default_limit_at=0.0,
                             _default_limit="")
    with caplog.at_level(logging.WARNING, "celery_fairqueue.worker.dispatcher"):
        packed = FairDispatcher.default_limit(worker)  # type: ignore[arg-type]
        worker._default_limit_at = 0.0  # an hour later: asked again, not said again
        FairDispatcher.default_limit(worker)  # type: ignore[arg-type]
    assert packed == AccountLimit(concurrency=1).pack(0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "fairqueue_default_concurrency" in warnings[0]


def test_the_first_worker_stores_its_own_default(make_store, caplog):
    store = make_store(default_rate="2/s", default_burst=4)
    worker = SimpleNamespace(store=store, settings=store.settings, _default_limit_at=0.0,
                             _default_limit="")
    with caplog.at_level(logging.WARNING, "celery_fairqueue.worker.dispatcher"):
        FairDispatcher.default_limit(worker)  # type: ignore[arg-type]
    assert store.default_limit() == AccountLimit(rate="2/s", burst=4)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_default_window_is_refreshed_with_the_accounts_windows(store):
    store.set_default_limit(AccountLimit(window="09:00-17:00", tz="Europe/Berlin"))
    store.client.hset(store.keys.limits, "*", "0 1 0 -")
    assert store.refresh_windows() == 1
    assert store.client.hget(store.keys.limits, "*") != "0 1 0 -"
