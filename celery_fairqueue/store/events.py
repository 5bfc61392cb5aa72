"""The event stream: every state transition of a fair job, for the recorder to store.

Transitions (protocol.EventType) are appended to the Redis stream ``{prefix}:events`` by the
store's scripts and by the task itself, only once a recorder has created the stream, so nothing
piles up where nobody records. The recorder reads it through a consumer group and acknowledges
what it has written, so a recorder (or database) that is down catches up where it stopped. The
field names are protocol.EVENT_FIELDS; entries are read as protocol.Event.

One recorder leads at a time, holding a Redis lock (:class:`Leadership`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from redis.exceptions import LockError

from ..errors import StoreUnavailableError
from ..protocol import Event
from .core import FairStore

RECORDER_GROUP = "fairqueue-recorder"

__all__ = ["RECORDER_GROUP", "Event", "EventReader", "Leadership"]


class EventReader:
    """A consumer of the event stream in the recorder's group."""

    def __init__(self, store: FairStore, consumer: str, group: str = RECORDER_GROUP) -> None:
        self.store = store
        self.client = store.client
        self.stream = store.keys.events
        self.group = group
        self.consumer = consumer

    def ensure_group(self) -> None:
        """Create the stream and the group; from then on transitions are recorded (this
        process's store asks again at once whether a recorder listens)."""
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except StoreUnavailableError as exc:
            if "BUSYGROUP" not in str(exc):  # the group exists already: fine
                raise
        self.store.forget_recording()

    def read(self, count: int = 500, block_ms: int = 1000) -> list[Event]:
        """Events not yet acknowledged: first this consumer's pending ones, then new ones."""
        for start in ("0", ">"):
            reply: Any = self.client.xreadgroup(self.group, self.consumer, {self.stream: start},
                                                count=count, block=None if start == "0"
                                                else block_ms)
            entries = reply[0][1] if reply else []
            events = [Event.from_entry(entry_id, fields) for entry_id, fields in entries
                      if fields]
            if events:
                return events
        return []

    def ack(self, events: list[Event]) -> None:
        """The events are in the database: drop them from the stream."""
        if events:
            ids = [event.id for event in events]
            pipe = self.client.pipeline()
            pipe.xack(self.stream, self.group, *ids)
            pipe.xdel(self.stream, *ids)
            pipe.execute()

    def adopt_pending(self) -> None:
        """Take over the entries an earlier leader read and never acknowledged."""
        start = "0-0"
        while True:
            reply = self.client.xautoclaim(
                self.stream, self.group, self.consumer, min_idle_time=0,
                start_id=start, count=1000)  # JUSTID would hide the cursor (redis-py drops it)
            start = reply[0]
            if start == "0-0":
                return

    def backlog(self) -> int:
        """Events written and not yet recorded."""
        return int(self.client.xlen(self.stream))


class Leadership:
    """The recorders' lock: whoever holds it applies events; the others stand by."""

    def __init__(self, store: FairStore, seconds: float) -> None:
        self._lock = store.client.lock(store.keys.recorder_lock, timeout=seconds,
                                       thread_local=False)

    def acquire(self) -> bool:
        """Take the lead if nobody holds it; never waits."""
        return bool(self._lock.acquire(blocking=False))

    def renew(self) -> bool:
        """Keep the lead for another term; False when it expired and someone else may lead."""
        try:
            self._lock.reacquire()
        except LockError:
            return False
        return True

    def release(self) -> None:
        """Hand the lead over at once; a lock that expired or a Redis that is gone frees
        itself."""
        with contextlib.suppress(LockError, StoreUnavailableError):
            self._lock.release()
