"""How an idle worker waits for work, and who keeps the time.

**One ring wakes one worker.** While the worker has a free slot, a thread blocks on its queues'
doorbells (store/readers/doorbell.py): a script that leaves work nobody claims rings once, and
Redis hands the ring to one blocked worker, whose claim rings again if it leaves work (a chain,
not a broadcast); a bulk enqueue rings for as many workers as its jobs can feed. A busy worker
does not wait on the doorbells, so it takes no ring it cannot use; a ring that reaches a worker
whose slots filled meanwhile is given back (FairDispatcher.claim).

**One keeper keeps the time.** A queue's due times (delayed jobs, retries, deferred accounts'
next tokens, window openings) are acted on by one worker, the queue's time keeper: a lease
that the heartbeat takes when nobody holds it and renews while it beats (heartbeat.lua). The
keeper arms a timer for the next due time its claims report, and is called on the queue's
clock when a new due time comes first: the call carries that time, and the keeper arms its
timer for it without a claim (its heartbeat measures how far Redis's clock is from its own);
the other workers arm no timer. Until a worker's
first heartbeat says who keeps the time, it keeps the time itself. The keeper also sweeps:
every SWEEP_SECONDS it rings for work that waits with no ring pending (a ring lost with a
worker killed right after it took one, or with a Redis restart).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..errors import FairqueueError
from ..store import DoorbellWait, FairStore
from .outage import Outage

#: How long the keeper waits for a ring or a call before it sweeps.
SWEEP_SECONDS = 0.5
#: How long a worker that keeps no time waits for a ring before it asks again (its poll, as a
#: fallback, is the dispatcher's timer).
WAIT_SECONDS = 5.0
#: How often a busy worker looks at its slots again (a broker task that ends frees one, and
#: no ring says so).
BUSY_SECONDS = 0.025
#: How long a busy keeper waits for a call on its queues' clocks, every SWEEP_SECONDS.
CALL_SECONDS = 0.01
#: How long a waiting thread whose store failed waits before it tries again.
RETRY_SECONDS = 1.0


T = TypeVar("T")


def drain(items: deque[T]) -> list[T]:
    """Everything in ``items``, taken out: other threads append meanwhile, so one popleft at a
    time (each atomic), not a copy and a clear."""
    taken: list[T] = []
    with contextlib.suppress(IndexError):
        while True:
            taken.append(items.popleft())
    return taken


class Doorbell:
    """The waiting threads of one worker (one per group of doorbells one BZPOPMIN can wait on:
    DoorbellWait.groups), and whether the worker keeps its queues' time."""

    def __init__(self, store: FairStore, queues: Sequence[str], wake: Callable[[], None]) -> None:
        self.store = store
        self.queues = list(queues)
        self.wake = wake
        self.idle = threading.Event()  # the worker has a free slot: it waits on the doorbells
        self.keeps: list[str] | None = None  # None: no heartbeat said yet
        self.ticking = False  # the keeper was called: claim for the due time even with no slot
        #: Redis's clock less this process's, from the heartbeat (None: no beat yet, so a call
        #: is answered by a claim, which learns the due time in the store)
        self.clock_offset: float | None = None
        self._calls: deque[float] = deque()  # due times of calls heard, on this process's clock
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._rings: deque[str] = deque()  # doorbells that rang, not yet claimed for
        self._waits: list[DoorbellWait] = []  # each thread's, while it has one

    @property
    def keeps_time(self) -> bool:
        """Whether this worker keeps the time: it is its queues' keeper, or does not know yet
        who is (until its first heartbeat)."""
        return self.keeps is None or bool(self.keeps)

    def kept(self, queues: Sequence[str], clock_offset: float) -> None:
        """The heartbeat says whose time this worker keeps, and how far Redis's clock is from
        this process's; a new keeper claims at once, to learn when the next due time is."""
        became = bool(queues) and not self.keeps
        self.keeps = list(queues)
        self.clock_offset = clock_offset
        if became:
            self.ticking = True
            self.wake()
            for wait in list(self._waits):  # a wait on the doorbells alone: on the calls too
                wait.interrupt()

    def start(self) -> None:
        self._grow()

    def stop(self) -> None:
        self._stopping.set()
        self.idle.set()
        for wait in list(self._waits):  # a worker shutting down does not wait for a timeout
            wait.interrupt()
        for thread in list(self._threads):
            thread.join(timeout=WAIT_SECONDS + 1)

    def _grow(self) -> None:
        """One thread per group of doorbells (more after a reshard gave a cluster's store more
        shards)."""
        with self._lock:
            while len(self._threads) < self._group_count():
                thread = threading.Thread(target=self._run, args=(len(self._threads),),
                                          name=f"fairqueue-doorbell-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()

    def _group_count(self) -> int:
        return len(DoorbellWait.groups_of(self.store, self.queues, False))

    def _run(self, group: int) -> None:
        outage = Outage("waiting for the doorbell (claims fall back to polling)")
        wait: DoorbellWait | None = None
        last_sweep = time.monotonic()
        while not self._stopping.is_set():
            try:
                if wait is None:
                    wait = DoorbellWait(self.store, WAIT_SECONDS)
                    self._waits.append(wait)
                    outage.answered()
                    self.wake()  # what rang while nobody waited
                self._grow()
                keeps, idle = self.keeps_time, self.idle.is_set()
                groups = DoorbellWait.groups_of(self.store, self.queues, keeps, bells=idle)
                keys = groups[group] if group < len(groups) else []
                if idle and keys:
                    self._heard(wait.wait(keys, SWEEP_SECONDS if keeps else WAIT_SECONDS))
                else:
                    # busy: a slot a broker task frees is seen here (no ring says so); the
                    # keeper still hears its calls
                    self.idle.wait(BUSY_SECONDS)
                    self.wake()
                    if keys and time.monotonic() - last_sweep >= SWEEP_SECONDS:
                        self._heard(wait.wait(keys, CALL_SECONDS))
                if keeps and time.monotonic() - last_sweep >= SWEEP_SECONDS:
                    last_sweep = time.monotonic()
                    self._sweep(wait, group)
                outage.answered()
            except FairqueueError as exc:
                outage.failed(exc)
                if wait is not None:
                    self._waits.remove(wait)
                    wait.close()
                    wait = None
                self._stopping.wait(RETRY_SECONDS)
        if wait is not None:
            wait.close()

    def _heard(self, rang: tuple[str, float] | None) -> None:
        """A ring came: claim; a ring the worker cannot use, its slots filled meanwhile, goes
        back (take_rings, give_back). A call on a queue's clock: arm the timer for its due
        time (take_calls), or, before the first heartbeat measured the clocks, claim to learn
        it."""
        if rang is None:
            return
        key, score = rang
        if not key.endswith(":clock"):
            self._rings.append(key)
        elif self.clock_offset is None:
            self.ticking = True
        else:
            self._calls.append(score - self.clock_offset)
        self.wake()

    def take_calls(self) -> float | None:
        """The earliest due time (``time.time()``'s clock) of the calls heard since the last
        claim, or None."""
        return min(drain(self._calls), default=None)

    def take_rings(self) -> list[str]:
        """The doorbells that rang for this worker since the last claim."""
        return drain(self._rings)

    def give_back(self, rings: Sequence[str]) -> None:
        """Ring again the doorbells whose rings this worker took but cannot use."""
        shards = [shard for shard in self.store.shards
                  if any(key.startswith(shard.keys.tag) for key in rings)]
        if shards and self._waits:
            self._waits[0].sweep(shards, self.queues)

    def _sweep(self, wait: DoorbellWait, group: int) -> None:
        """The keeper rings once for each queue with work and no ring pending, on the shards
        of its group."""
        wait.sweep(DoorbellWait.shards_of(self.store)[group], self.queues)
