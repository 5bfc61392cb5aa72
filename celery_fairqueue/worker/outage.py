"""One line when the fair store starts failing and one when it answers again.

A worker asks the store many times a second; during an outage each call fails the same way, and
a warning per call (or a traceback) buries what an operator needs: when it began, what it is,
when it ended, how long it lasted.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("celery_fairqueue.worker")


class Outage:
    """The state of one caller's view of the store (the event loop's, the maintenance
    thread's): not shared between threads."""

    def __init__(self, doing: str) -> None:
        self.doing = doing
        self.since: float | None = None
        self.failures = 0
        self.cause = ""

    def failed(self, exc: Exception) -> None:
        """A call failed: say so when the failing starts, or when its cause changes."""
        self.failures += 1
        cause = str(exc).split(" during ")[0]
        if self.since is None:
            self.since = time.monotonic()
            logger.warning("fairqueue: %s failed, retrying quietly until the fair store answers "
                           "again: %s", self.doing, exc)
        elif cause != self.cause:
            logger.warning("fairqueue: %s still failing, now: %s", self.doing, exc)
        self.cause = cause

    def answered(self) -> None:
        """A call went through: end the outage, saying how long it lasted."""
        if self.since is not None:
            logger.warning("fairqueue: %s works again after %.1f s (%d calls failed)",
                           self.doing, time.monotonic() - self.since, self.failures)
            self.since, self.failures, self.cause = None, 0, ""
