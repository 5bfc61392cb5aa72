"""A worker counts its free slots in its event loop while the threads pool's threads take
their finished requests out of Celery's set of reserved ones (celery.worker.state)."""

import threading
import weakref
from types import SimpleNamespace

from celery.worker import state as worker_state

from celery_fairqueue.worker.dispatcher import FairDispatcher


class Request:
    """What free_slots reads of a Celery request: its message's channel (a broker task's)."""

    message = SimpleNamespace(channel=None)


def test_counting_free_slots_survives_requests_leaving_from_other_threads(monkeypatch):
    """Iterating the set as it changed raised "Set changed size during iteration" in the
    event loop, and the worker died (a busy worker counts every 25 ms). Celery's set is a
    WeakSet, whose ``copy()`` iterates in Python code too: the first fix copied it, and a
    worker still died so in a full run."""
    assert isinstance(worker_state.reserved_requests, weakref.WeakSet)
    requests = {Request() for _ in range(2000)}
    monkeypatch.setattr(worker_state, "reserved_requests", weakref.WeakSet(requests))
    dispatcher = SimpleNamespace(consumer=SimpleNamespace(pool=SimpleNamespace(
        num_processes=8)), held={})
    stop = threading.Event()

    def churn() -> None:  # a pool thread's requests come and go
        spare = list(requests)
        while not stop.is_set():
            for request in spare[:50]:
                worker_state.reserved_requests.discard(request)
            for request in spare[:50]:
                worker_state.reserved_requests.add(request)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(2000):
            assert FairDispatcher.free_slots(dispatcher) <= 8  # type: ignore[arg-type]
    finally:
        stop.set()
        thread.join()
