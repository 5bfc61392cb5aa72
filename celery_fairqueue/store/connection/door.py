"""The one door to Redis: every script call of the fair store goes through StoreDoor.

Each script in ``scripts/`` is built with the library files it includes (lua.py), and receives
the global keys followed by the keys of the queues it works on (see formats/keys.py), so it
touches one hash-tag slot. Account ids and queue names go in and come out decoded; the store
encodes them for Redis. Every Redis failure reaches callers as :class:`StoreUnavailableError`
(see translate.py). The store's roles build on it (store/writers): jobs.py (enqueue, claim,
settle), fleet.py (workers, heartbeat), operator.py (pause, cancel, run now, limits, dead
letters); the readers (store/readers) read through its client.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Self

from ...settings import FairqueueSettings
from ..formats.keys import Keys, QueueKeys, decode_id
from .connect import AnyClient, make_client
from .deadline import RedisClock
from .lua import load_script
from .translate import operation

EVENTS_CHECK_SECONDS = 5.0  # how often a store asks whether a recorder listens

SCRIPT_NAMES = ("enqueue", "claim", "ack", "requeue", "reject", "reap", "apply_limit", "bury",
                "emit", "take_dead", "restore_dead", "purge_dead", "give_back", "cancel", "pause",
                "resume", "run_now", "register_worker", "heartbeat", "mark",
                "set_default_limit", "queue_limit", "upgrade", "read_layout", "slow_down",
                "lift_slow_down", "quota", "upgrade_fifo", "stats", "set_format")


def wire(value: Any) -> Any:
    """A script argument as Redis can take it, a string as its UTF-8 bytes: one with a lone
    surrogate (a file name from ``os.fsdecode``, say) cannot be UTF-8 encoded, so it is kept
    with the surrogate escaped instead of failing the whole call."""
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace")
    return value



class StoreDoor:
    """The fair store's client, keys, settings and scripts, and the calls every role makes."""

    def __init__(self, client: AnyClient, keys: Keys, settings: FairqueueSettings, *,
                 sharded: bool = False) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        sources = {name: load_script(name) for name in SCRIPT_NAMES}
        self._scripts = {name: client.register_script(source.source)
                         for name, source in sources.items()}
        # each script's own global keys, then its queues', then the stream if it emits
        self._leading = {name: [getattr(keys, key) for key in source.global_keys]
                         for name, source in sources.items()}
        self._trailing = {name: [keys.events] if source.events else []
                          for name, source in sources.items()}
        self._emits = {name: source.events for name, source in sources.items()}
        self._recording = False
        # the scripts' MODE: a recorder listens, the store has shards (``sharded``, given by
        # the shards package, store/shards/shard.py), its layout is at format 1 (set_format1)
        self.format1 = False
        self.set_sharded(sharded)
        self._recording_checked = float("-inf")
        self.redis_clock = RedisClock(self.server_time)  # the producer's deadlines

    def set_sharded(self, sharded: bool) -> None:
        """Whether the store has shards, for the scripts' MODE: a store of one shard takes them
        when a reshard moves it (store/shards/sharded.py)."""
        self.sharded = sharded
        self._set_mode()

    def set_format1(self, format1: bool) -> None:
        """Whether the store's layout is still at format 1 (an earlier version wrote it, and
        ``fairqueue upgrade`` has not begun): the scripts then write a ready job and a pending
        marker as that version did, so that its workers run them
        (store/shards/format_upgrade.py)."""
        self.format1 = format1
        self._set_mode()

    def _set_mode(self) -> None:
        shape = ("1" if self.sharded else "0") + ("1" if self.format1 else "0")
        self._mode_recording, self._mode_quiet = (f"1{shape}".encode(), f"0{shape}".encode())

    @classmethod
    def from_settings(cls, settings: FairqueueSettings, *, fail_fast: bool = False) -> Self:
        """A store for producers or, ``fail_fast``, for a worker's event loop and threads.

        A producer's call is bounded by ``fairqueue_enqueue_timeout``: redis-py retries a
        command and, inside it, the connect, so one retry of each makes four tries at most,
        each given a quarter of the time. The worker's event loop must not stall on an
        unreachable Redis either: it tries again on its next turn.
        """
        assert settings.redis_url
        timeout = 2.0 if fail_fast else settings.enqueue_timeout / 4
        client = make_client(settings.redis_url, socket_timeout=timeout, retries=1,
                             transport_options=settings.redis_transport_options)
        return cls(client, Keys(settings.key_prefix), settings)

    def _keys_for(self, name: str, queues: Sequence[QueueKeys]) -> list[str]:
        """The keys of one call of script ``name`` on ``queues`` (see lua.py)."""
        keys = list(self._leading[name])
        for queue_keys in queues:
            keys.extend(queue_keys.keys)
        keys.extend(self._trailing[name])
        return keys

    def _args_for(self, name: str, args: Sequence[Any]) -> list[Any]:
        """The arguments of one call of script ``name``, wired; a script that emits events
        gets last the store's mode (see lua.py)."""
        wired = [wire(a) for a in args]
        if self._emits[name]:
            wired.append(self._mode_recording if self.recording() else self._mode_quiet)
        return wired

    def recording(self) -> bool:
        """Whether a recorder listens (the event stream exists); asked at most every 5 s."""
        now = time.monotonic()
        if now - self._recording_checked > EVENTS_CHECK_SECONDS:
            self._recording = bool(self.client.exists(self.keys.events))
            self._recording_checked = now
        return self._recording

    def forget_recording(self) -> None:
        """Ask again at the next call whether a recorder listens."""
        self._recording_checked = float("-inf")

    def _run(self, name: str, queues: Sequence[QueueKeys], args: Sequence[Any], *,
             within: bool = False) -> Any:
        with operation(name, within=within):
            return self._scripts[name](keys=self._keys_for(name, queues),
                                       args=self._args_for(name, args))

    def _run_with_keys(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """:meth:`_run` for a script whose own keys are none of the store's: upgrade.lua, given
        the keys of the layout before records (keys.Keys.legacy) after its global keys. They
        share the store's hash tag, so the call stays in one slot."""
        with operation(name):
            return self._scripts[name](
                keys=[*self._leading[name], *keys, *self._trailing[name]],
                args=self._args_for(name, args))

    def _run_many(self, name: str, calls: Iterable[tuple[Sequence[QueueKeys], Sequence[Any]]],
                  chunk: int) -> list[Any]:
        """:meth:`_run` for each call, ``chunk`` calls a round trip. A resent chunk (after a
        dropped connection) is harmless: every script is idempotent per job id and token."""
        script = self._scripts[name]
        results: list[Any] = []
        batch: list[tuple[list[str], list[Any]]] = []
        with operation(name):
            for queues, args in calls:
                batch.append((self._keys_for(name, queues), self._args_for(name, args)))
                if len(batch) == chunk:
                    results.extend(self.client.run_scripts(script, batch))
                    batch = []
            if batch:
                results.extend(self.client.run_scripts(script, batch))
        return results

    def _run_batch(self, name: str, calls: Sequence[tuple[Sequence[QueueKeys], Sequence[Any]]],
                   wait_replicas: int = 0) -> tuple[list[Any], int]:
        """:meth:`_run` for each call, all in one round trip (then WAIT ``wait_replicas``):
        each call's reply, or its own error as a StoreUnavailableError, and WAIT's count."""
        wired = [(self._keys_for(name, queues), self._args_for(name, args))
                 for queues, args in calls]
        with operation(name):
            return self.client.run_batch(self._scripts[name], wired, wait_replicas)

    def known_queues(self) -> list[str]:
        return sorted(decode_id(q) for q in self.client.smembers(self.keys.queues))

    def server_time(self) -> float:
        seconds, micros = self.client.time_at(self.keys.records)
        return seconds + micros / 1e6

    def ping(self) -> None:
        """Raise StoreUnavailableError unless Redis answers."""
        self.client.ping_at(self.keys.records)

    def instance(self) -> str:
        """The store's instance id, created on first use; a new one means the data was lost."""
        self.client.set(self.keys.instance, uuid.uuid4().hex, nx=True)
        return str(self.client.get(self.keys.instance))

    def clear(self) -> int:
        """Delete every key of this store (those under its prefix), for test suites and for
        decommissioning a store; returns how many were deleted."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.keys.tag) + ":*"
        keys = list(self.client.scan_at(self.keys.records, match=pattern, count=1000))
        return sum(int(self.client.delete(*keys[n:n + 500])) for n in range(0, len(keys), 500))
