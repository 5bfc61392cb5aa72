"""The thread that turns the store's wake-ups into claims: an idle worker picks up a new job
the moment it is enqueued, and asks the store nothing while nothing happens."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..errors import FairqueueError
from ..store import FairStore, WakeSubscription
from .outage import Outage

#: Longest wait on the subscription before the thread looks at its stop flag.
WAIT_SECONDS = 1.0


class Wakeups:
    """Calls ``wake`` (the dispatcher's: thread-safe, coalescing) when a queue gains work, and
    once after each (re)subscription, for what was signalled while it was away. It subscribes
    again to every shard's channels when a reshard gave the store more."""

    def __init__(self, store: FairStore, queues: Sequence[str], wake: Callable[[], None]) -> None:
        self.store = store
        self.queues = list(queues)
        self.wake = wake
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fairqueue-wakeups", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=2 * WAIT_SECONDS + 1)

    def _run(self) -> None:
        outage = Outage("waiting for wake-ups (claims fall back to polling)")
        while not self._stopping.is_set():
            subscription: WakeSubscription | None = None
            try:
                subscription = WakeSubscription(self.store, self.queues)
                outage.answered()
                self.wake()
                # again when the store has more shards than subscribed to (a reshard)
                while not self._stopping.is_set() and subscription.shards == len(
                        self.store.shards):
                    if subscription.wait(WAIT_SECONDS):
                        self.wake()
            except FairqueueError as exc:
                outage.failed(exc)
                self._stopping.wait(WAIT_SECONDS)
            finally:
                if subscription is not None:
                    subscription.close()
