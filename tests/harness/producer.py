"""A steady producer for failover tests: ``.delay()`` at a fixed rate from a thread."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery_fairqueue.errors import StoreUnavailableError


class Producer(threading.Thread):
    """``task.delay(account, n)`` at ``rate`` jobs a second over ``accounts`` accounts; a call
    that raises StoreUnavailableError (the producer's one EnqueueError) is counted and made
    again with the same arguments (the same business key: never a second job)."""

    def __init__(self, task: Any, rate: float, accounts: int) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.task, self.rate, self.accounts = task, rate, accounts
        self.acked: dict[str, float] = {}  # ledger key -> monotonic time of the acknowledgement
        self.errors: list[str] = []
        self.slow = 0.0  # longest .delay(), a failing one included
        self.latencies: list[float] = []  # of the .delay() calls that succeeded
        self.stopping = threading.Event()
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            start, n, retrying = time.monotonic(), 0, False
            # a job that may be stored already is settled before stopping
            while retrying or not self.stopping.is_set():
                account = f"acct{n % self.accounts}"
                began = time.monotonic()
                try:
                    self.task.delay(account, n)
                except StoreUnavailableError as exc:
                    self.errors.append(str(exc))
                    self.slow = max(self.slow, time.monotonic() - began)
                    retrying = True
                    time.sleep(0.05)
                    continue
                retrying = False
                now = time.monotonic()
                self.slow = max(self.slow, now - began)
                self.latencies.append(now - began)
                self.acked[f"{account}:{n}"] = now
                n += 1
                time.sleep(max(0.0, start + n / self.rate - time.monotonic()))
        except BaseException as exc:  # reported by the test
            self.crashed = exc

    def acked_after(self, moment: float) -> int:
        return sum(1 for at in list(self.acked.values()) if at > moment)

    def finish(self) -> None:
        self.stopping.set()
        self.join(20)
        assert self.crashed is None, repr(self.crashed)
        assert not self.is_alive()
