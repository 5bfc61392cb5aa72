"""Celery's task events as a monitor (Flower) receives them: a Receiver on the app's broker, in a
thread of the test process."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from celery import Celery

from tests.harness import wait_until

PROBE = "fairqueue-probe"


class TaskEvents:
    """``with TaskEvents(app) as events:`` every event sent on ``app``'s broker meanwhile, in
    order; the block starts once the receiver is subscribed (a probe event came back)."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._receiver: Any = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TaskEvents:
        self._thread = threading.Thread(target=self._capture, daemon=True)
        self._thread.start()
        probe = uuid.uuid4().hex
        deadline = time.monotonic() + 15
        with self.app.events.default_dispatcher() as dispatcher:
            while not any(e.get("uuid") == probe for e in list(self.events)):
                assert time.monotonic() < deadline, "the event receiver never subscribed"
                dispatcher.send(PROBE, uuid=probe)
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _capture(self) -> None:
        with self.app.connection_for_read() as connection:
            self._receiver = self.app.events.Receiver(
                connection, handlers={"*": self.events.append})
            # Receiver.capture, with a shorter wait between checks of should_stop
            for _ in self._receiver.consume(limit=None, timeout=None, safety_interval=0.1,
                                            wakeup=False):
                pass

    def of(self, task_id: str) -> list[dict[str, Any]]:
        """The task events of one task, in the order they came."""
        return [e for e in list(self.events) if e.get("uuid") == task_id
                and e.get("type", "").startswith("task-")]

    def types(self, task_id: str) -> list[str]:
        return [e["type"] for e in self.of(task_id)]

    def wait_for(self, task_id: str, kind: str, timeout: float = 20) -> dict[str, Any]:
        """The first ``kind`` event (``task-failed``) of a task, waiting for it."""
        assert wait_until(lambda: kind in self.types(task_id), timeout), self.types(task_id)
        return next(e for e in self.of(task_id) if e["type"] == kind)
