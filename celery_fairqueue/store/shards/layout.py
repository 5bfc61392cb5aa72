"""This process's reading of the store's layout: how many shards it has, and whether a reshard
moves it (``"S>N"``), as its home records it (``Keys.shard_count``).

The store's number is the truth: ``fairqueue_shards`` only sets the number of a new store, and
every worker and producer reads the store's every ``fairqueue_shards_check_interval`` (and at
once when a call meets an account that a reshard moved) and follows it (sharded.py). Each
reading is recorded at the home with the time until which this process may act on it without
reading it again, and who it is: a reshard moves no account until every process that may still
act on the old number has read the move, or its reading has lapsed (fleet_wait.py).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass

logger = logging.getLogger("celery_fairqueue")


@dataclass(frozen=True)
class Layout:
    """The store's shards (``count``), and while a reshard runs, its move (S, N)."""

    count: int
    move: tuple[int, int] | None = None

    @classmethod
    def parse(cls, held: str) -> Layout:
        old, _, new = held.partition(">")
        return cls(int(old), (int(old), int(new)) if new else None)

    @property
    def widest(self) -> int:
        """The shards a process claims from: the new ones as soon as a move is announced."""
        return max(self.move) if self.move else self.count


class LayoutReading:
    """When this process read the store's layout last, and how it names itself to a reshard:
    its role (its program's name, ``producer`` without one, or ``worker celery@host`` once a
    worker's dispatcher says so), host and
    pid, and a token of its own (a forked child is a process of its own)."""

    def __init__(self, interval: float, configured: int) -> None:
        self.interval = interval
        self.configured = configured  # fairqueue_shards: a new store's number
        self.role = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "producer"
        self._read_at = float("-inf")
        self._pid = 0
        self._token = ""
        self._told = False

    def due(self) -> bool:
        return self.older_than(self.interval)

    def older_than(self, seconds: float) -> bool:
        """Whether the last reading was made ``seconds`` ago or more."""
        return time.monotonic() - self._read_at >= seconds

    def read_now(self) -> None:
        """Read again at the next call: a call met an account that a reshard moved."""
        self._read_at = float("-inf")

    def started(self) -> float:
        """A reading starts: the time its interval counts from (before the call, so that the
        process reads again no later than its recorded reading allows)."""
        return time.monotonic()

    def done(self, started: float, layout: Layout) -> None:
        self._read_at = started
        if layout.count != self.configured and not self._told:
            self._told = True
            logger.warning("fairqueue: the fair store has %d shard(s) and this process says "
                           "fairqueue_shards = %d: following the store's (the setting counts "
                           "for a new store only)", layout.count, self.configured)

    @property
    def process_id(self) -> str:
        if self._pid != os.getpid():
            self._pid, self._token = os.getpid(), uuid.uuid4().hex[:12]
        return f"{socket.gethostname()}:{self._pid}:{self._token}"

    @property
    def name(self) -> str:
        return f"{self.role} on {socket.gethostname()} (pid {os.getpid()})"
