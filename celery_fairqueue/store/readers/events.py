"""The event stream: every state transition of a fair job, for the recorder to store.

Transitions (protocol.EventType) are appended to the Redis stream ``{prefix}:events`` (in a
store of shards, to each shard's, ``{tag}:events``, by the jobs of its accounts) by the
store's scripts and by the task itself, only once a recorder has created the stream, so nothing
piles up where nobody records. The recorder reads it through a consumer group and acknowledges
what it has written, so a recorder (or database) that is down catches up where it stopped. The
field names are protocol.EVENT_FIELDS; entries are read as protocol.Event.

One recorder leads at a time, holding a Redis lock (:class:`Leadership`).
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass
from typing import Any

from redis.exceptions import LockError

from ...errors import StoreUnavailableError
from ...protocol import Event
from ..shards.merged import per_shard
from ..shards.shard import FairStore

RECORDER_GROUP = "fairqueue-recorder"

__all__ = ["RECORDER_GROUP", "Event", "EventReader", "Leadership", "StreamLag", "StreamLeases"]


class EventReader:
    """A consumer of the event streams in the recorder's group: one stream per shard, each
    written by the scripts and tasks of its accounts' jobs, so a job's events are in order in
    its account's stream, which is all that applying them needs (the recorder)."""

    def __init__(self, store: FairStore, consumer: str, group: str = RECORDER_GROUP) -> None:
        self.store = store
        self.client = store.client
        self.streams = [shard.keys.events for shard in store.shards]
        self.group = group
        self.consumer = consumer
        self.reading = list(self.streams)  # those this consumer reads (its recorder leads)
        self._pending_after: dict[str, str] = {}  # stream -> the last pending entry read
        self.rewind()

    def grow(self) -> None:
        """Know the streams of the shards a reshard added (the store follows its layout)."""
        self.streams = [shard.keys.events for shard in self.store.shards]

    def follow(self, streams: list[str]) -> None:
        """Read these streams from now on (those its recorder leads), each from its first
        pending entry."""
        self.reading = [stream for stream in self.streams if stream in streams]
        self.rewind()

    @property
    def stream(self) -> str:
        """The home shard's stream (the only one of a store of one shard)."""
        return self.streams[0]

    def ensure_group(self) -> None:
        """Create the streams and the group on each; from then on transitions are recorded
        (this process's store asks again at once whether a recorder listens)."""
        for stream in self.streams:
            try:
                self.client.xgroup_create(stream, self.group, id="0", mkstream=True)
            except StoreUnavailableError as exc:
                if "BUSYGROUP" not in str(exc):  # the group exists already: fine
                    raise
        self.store.forget_recording()

    def read(self, count: int = 500, block_ms: int = 1000) -> list[Event]:
        """Events not yet acknowledged: first this consumer's pending ones after those read
        before (all of them again after :meth:`rewind`), then new ones, waiting up to
        ``block_ms`` for some. Of several streams, up to ``count`` of each, each stream's in
        its order: all are asked at once without waiting, then, while none has any, one after
        the other for a share of ``block_ms``. Reading on before acknowledging is safe: the
        next read starts after the last one."""
        pending = [stream for stream in self.reading if stream in self._pending_after]
        if pending:
            pipe = self.client.pipeline(transaction=False)
            for stream in pending:
                pipe.xreadgroup(self.group, self.consumer,
                                {stream: self._pending_after[stream]}, count=count)
            events = self._collect(pending, pipe.execute())
            if events:
                return events
        caught_up = [stream for stream in self.reading if stream not in self._pending_after]
        if len(caught_up) > 1:
            pipe = self.client.pipeline(transaction=False)
            for stream in caught_up:
                pipe.xreadgroup(self.group, self.consumer, {stream: ">"}, count=count)
            events = self._collect(caught_up, pipe.execute())
            if events:
                return events
        share = max(block_ms // max(len(self.reading), 1), 1)
        for stream in caught_up:
            reply: Any = self.client.xreadgroup(self.group, self.consumer, {stream: ">"},
                                                count=count, block=share)
            events = self._collect([stream], [reply])
            if events:
                return events
        return []

    def rewind(self) -> None:
        """Read this consumer's pending entries from the first again (after a failed write)."""
        self._pending_after = dict.fromkeys(self.reading, "0")

    def _collect(self, streams: list[str], replies: list[Any]) -> list[Event]:
        events: list[Event] = []
        for stream, reply in zip(streams, replies, strict=True):
            entries = reply[0][1] if reply else []
            if stream in self._pending_after:
                if entries:
                    self._pending_after[stream] = entries[-1][0]
                else:  # caught up with its pending entries: new ones from now on
                    del self._pending_after[stream]
            events += [Event.from_entry(entry_id, fields, stream)
                       for entry_id, fields in entries if fields]
        return events

    def ack(self, events: list[Event]) -> None:
        """The events are in the database: drop them from their streams."""
        by_stream: dict[str, list[str]] = {}
        for event in events:
            by_stream.setdefault(event.stream or self.stream, []).append(event.id)
        for stream, ids in by_stream.items():
            pipe = self.client.pipeline()
            pipe.xack(stream, self.group, *ids)
            pipe.xdel(stream, *ids)
            pipe.execute()

    def adopt_pending(self, streams: list[str] | None = None) -> None:
        """Take over the entries an earlier leader of ``streams`` (default: those read) read
        and never acknowledged."""
        for stream in self.reading if streams is None else streams:
            start = "0-0"
            while True:
                reply = self.client.xautoclaim(
                    stream, self.group, self.consumer, min_idle_time=0,
                    start_id=start, count=1000)  # JUSTID would hide the cursor (redis-py drops it)
                start = reply[0]
                if start == "0-0":
                    break
        self.rewind()

    def backlog(self) -> int:
        """Events written and not yet recorded, on every shard."""
        return sum(length for length, in per_shard(
            self.store, lambda pipe, shard: pipe.xlen(shard.keys.events)))

    def lag(self) -> list[StreamLag]:
        """Each stream's events waiting to be recorded and the age of its oldest, in Redis
        time (an entry's id is its time in ms; recorded entries are deleted)."""
        replies = per_shard(self.store, lambda pipe, shard: (
            pipe.xlen(shard.keys.events), pipe.xrange(shard.keys.events, count=1),
            pipe.time()))
        found = []
        for shard, (waiting, oldest, (seconds, micros)) in enumerate(replies):
            now = int(seconds) + int(micros) / 1e6
            born = int(str(oldest[0][0]).split("-")[0]) / 1000 if oldest else now
            found.append(StreamLag(shard, int(waiting), max(0.0, now - born)))
        return found


@dataclass(frozen=True)
class StreamLag:
    """How far the recorders are behind on one shard's stream."""

    shard: int
    waiting: int  # events not yet recorded
    oldest_age: float  # seconds since the oldest of them was written; 0 when none waits


class Leadership:
    """One stream's lease (its shard's recorder lock): whoever holds it applies the stream's
    events; it holds the holder's name, so anyone can see who leads."""

    def __init__(self, store: FairStore, seconds: float, holder: str = "") -> None:
        self._lock = store.client.lock(store.keys.recorder_lock, timeout=seconds,
                                       thread_local=False)
        self.holder = holder or None

    def acquire(self) -> bool:
        """Take the lead if nobody holds it; never waits."""
        return bool(self._lock.acquire(blocking=False, token=self.holder))

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


class StreamLeases:
    """The event streams one recorder leads: a lease per stream, the streams shared evenly
    among the live recorders, each registered for a term at the store's home.

    :meth:`balance` runs every few seconds: it renews the recorder's registration and leases,
    hands back the streams over its share (so a recorder that joins gets its part) and takes
    free ones up to it (so the streams of one that left or died are taken over once its
    leases and registration run out, both ``seconds`` long)."""

    def __init__(self, store: FairStore, name: str, seconds: float) -> None:
        self.store = store
        self.name = name
        self.seconds = seconds
        self.streams = [shard.keys.events for shard in store.shards]
        self._leases = [Leadership(shard, seconds, name) for shard in store.shards]
        self.held: set[int] = set()
        self._first = zlib.crc32(name.encode("utf-8", "backslashreplace")) % len(self.streams)

    def grow(self) -> None:
        """Share the streams of the shards a reshard added, too."""
        self.streams += [shard.keys.events for shard in self.store.shards[len(self.streams):]]
        self._leases += [Leadership(shard, self.seconds, self.name)
                         for shard in self.store.shards[len(self._leases):]]

    def balance(self) -> tuple[list[str], list[str]]:
        """Renew, hand back, take up: returns (the streams gained, the streams lost)."""
        share = -(-len(self.streams) // self._register())
        lost = [n for n in sorted(self.held) if not self._leases[n].renew()]
        self.held.difference_update(lost)
        while len(self.held) > share:
            extra = max(self.held)
            self._leases[extra].release()
            self.held.discard(extra)
            lost.append(extra)
        gained = []
        for step in range(len(self.streams)):
            n = (self._first + step) % len(self.streams)
            if len(self.held) >= share:
                break
            if n not in self.held and self._leases[n].acquire():
                self.held.add(n)
                gained.append(n)
        return [self.streams[n] for n in gained], [self.streams[n] for n in lost]

    def _register(self) -> int:
        """Note this recorder alive for another term; returns the live recorders."""
        seconds, micros = self.store.client.time()
        now = int(seconds) + int(micros) / 1e6
        pipe = self.store.client.pipeline(transaction=False)
        pipe.zadd(self.store.keys.recorders, {self.name: now + self.seconds})
        pipe.zremrangebyscore(self.store.keys.recorders, "-inf", now)
        pipe.zcard(self.store.keys.recorders)
        return max(1, int(pipe.execute()[2]))

    @property
    def leading(self) -> list[str]:
        """The streams this recorder leads, in the store's order."""
        return [stream for n, stream in enumerate(self.streams) if n in self.held]

    def release(self) -> None:
        """Hand every lease back and leave, so the others take over at once."""
        for n in self.held:
            self._leases[n].release()
        self.held.clear()
        with contextlib.suppress(StoreUnavailableError):
            self.store.client.zrem(self.store.keys.recorders, self.name)
