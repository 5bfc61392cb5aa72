"""The fair store: every Redis operation on fair jobs, one method per Lua script.

Each script in ``scripts/`` gets ``scripts/_lib.lua`` prepended, and receives the global keys
followed by the keys of the queues it works on (see keys.py), so it touches one hash-tag slot.
Account ids and queue names go in and come out decoded; the store encodes them for Redis.
Every Redis failure reaches callers as :class:`StoreUnavailableError` (see client.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from ..errors import BacklogFullError, DeadLetterNotFound
from ..limits import AccountLimit
from ..protocol import event_fields, task_id_of
from ..settings import FairqueueSettings, settings_for
from .client import AnyClient, make_client, operation
from .controls import StoreControls, paused_accounts
from .keys import DEFAULT_LIMIT_FIELD, Keys, QueueKeys, decode_id, encode_id, encode_job_key
from .leases import Lease
from .lua import load_script
from .records import Marker, build_dead_record, marker_external_id

SCRIPT_NAMES = ("enqueue", "claim", "ack", "requeue", "reject", "reap", "trim_done",
                "wake", "bury", "emit", "take_dead", "restore_dead", "purge_dead", "give_back",
                "cancel", "pause", "resume", "run_now", "register_worker", "heartbeat", "mark",
                "set_default_limit")
EVENTS_CHECK_SECONDS = 5.0


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


def store_for(app: Celery) -> FairStore:
    """The fair store of ``app``, created once per app (redis-py reconnects after fork)."""
    store = getattr(app, "_fairqueue_store", None)
    if store is None:
        store = FairStore.from_settings(settings_for(app))
        app._fairqueue_store = store
    return store


@dataclass(frozen=True)
class EnqueueResult:
    job_id: str
    created: bool
    delayed: bool

    @classmethod
    def from_reply(cls, reply: Sequence[Any]) -> EnqueueResult:
        """From the enqueue script's reply: its status (0 stored already, 1 ready,
        2 delayed, 3 the dead letter it replays is gone) and the job id."""
        status, stored_id = reply
        if status == 3:
            raise DeadLetterNotFound("the dead letter was replayed or purged already")
        if status == 4:
            raise BacklogFullError("the account has fairqueue_max_pending_per_account jobs "
                                   "pending already")
        if status == 5:
            raise BacklogFullError("the fair store holds fairqueue_max_pending jobs already")
        return cls(job_id=stored_id, created=status != 0, delayed=status == 2)

    @property
    def task_id(self) -> str:
        return task_id_of(self.job_id)


@dataclass(frozen=True)
class Claim:
    leases: list[Lease]
    next_due: float | None  # seconds until a deferred account or delayed job is due
    expired: list[Lease] = field(default_factory=list)  # dropped, past Celery's expires
    lost: list[str] = field(default_factory=list)  # acked jobs whose lease was lost


class FairStore(StoreControls):
    """Enqueue, claim, settle, extend and reap fair jobs in one Redis; pause, resume, run now
    and the worker registry come from :class:`StoreControls`."""

    def __init__(self, client: AnyClient, keys: Keys, settings: FairqueueSettings) -> None:
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
        self._recording = False
        self._recording_checked = float("-inf")

    @classmethod
    def from_settings(cls, settings: FairqueueSettings, *, fail_fast: bool = False) -> FairStore:
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

    def _run(self, name: str, queues: Sequence[QueueKeys], args: Sequence[Any]) -> Any:
        with operation(name):
            return self._scripts[name](keys=self._keys_for(name, queues),
                                       args=[wire(a) for a in args])

    def _run_many(self, name: str, calls: Iterable[tuple[Sequence[QueueKeys], Sequence[Any]]],
                  chunk: int) -> list[Any]:
        """:meth:`_run` for each call, ``chunk`` calls a round trip. A resent chunk (after a
        dropped connection) is harmless: every script is idempotent per job id and token."""
        script = self._scripts[name]
        results: list[Any] = []
        batch: list[tuple[list[str], list[Any]]] = []
        with operation(name):
            for queues, args in calls:
                batch.append((self._keys_for(name, queues), [wire(a) for a in args]))
                if len(batch) == chunk:
                    results.extend(self.client.run_scripts(script, batch))
                    batch = []
            if batch:
                results.extend(self.client.run_scripts(script, batch))
        return results

    # -- producer side -------------------------------------------------------------------------

    def _enqueue_args(self, *, queue: str, account: str, job_id: str, envelope: str,
                      due: float | None = None, job_key: str | None = None,
                      dedupe: bool = True, task: str = "", shown_args: str = "",
                      replays: str = "", priority: int | None = None,
                      expires: float | None = None) -> list[Any]:
        return [job_id, encode_id(account), encode_id(queue), envelope, due or 0,
                encode_job_key(job_key), "1" if dedupe else "0",
                self.settings.job_retention, task, shown_args, replays,
                self.settings.max_pending_per_account, self.settings.max_pending,
                min(max(int(priority or 0), 0), 9),
                "" if expires is None else f"{expires:.6f}"]

    def enqueue(self, *, queue: str, account: str, job_id: str, envelope: str,
                due: float | None = None, job_key: str | None = None,
                dedupe: bool = True, task: str = "", shown_args: str = "",
                replays: str = "", priority: int | None = None,
                expires: float | None = None) -> EnqueueResult:
        """Store a job; an existing delivery or pending/running/recently done key is reused.
        ``replays`` names the dead letter this job replays: it leaves the dead-letter queue in
        the same step, or :class:`DeadLetterNotFound` says someone else took it first.
        ``priority`` (0-9, 0 first) orders the job among its account's own. Past ``expires``
        (epoch seconds) the claim drops the job instead of running it."""
        args = self._enqueue_args(queue=queue, account=account, job_id=job_id,
                                  envelope=envelope, due=due, job_key=job_key, dedupe=dedupe,
                                  task=task, shown_args=shown_args, replays=replays,
                                  priority=priority, expires=expires)
        wanted = self.settings.wait_replicas
        if not wanted:
            return EnqueueResult.from_reply(self._run("enqueue", [self.keys.queue(queue)], args))
        with operation("enqueue"):
            reply, acked = self.client.run_and_wait(
                self._scripts["enqueue"], self._keys_for("enqueue", [self.keys.queue(queue)]),
                [wire(a) for a in args], wanted)
        result = EnqueueResult.from_reply(reply)  # refused (a full backlog): nothing to lose
        self.client.check_replicated(acked, wanted)
        return result

    # -- worker side ---------------------------------------------------------------------------

    def claim(self, queues: Sequence[str], want: int, token: str, default_limit: str,
              first: int = 0, acks: Sequence[Lease] = ()) -> Claim:
        """Ack ``acks`` (this worker's finished leases), then lease up to ``want`` jobs from
        ``queues``, rotating over accounts with capacity; also say when the next deferred
        account or delayed job is due. ``first`` is the 0-based index of the queue to look at
        first (workers rotate it so no queue starves). One round trip for the whole turn."""
        want = min(want, self.settings.claim_batch) if queues else 0
        if want <= 0 and not acks:
            return Claim([], None)
        s = self.settings
        names = list(queues)
        names += dict.fromkeys(a.queue for a in acks if a.queue not in names)
        position = {name: n + 1 for n, name in enumerate(names)}
        flat = self._run("claim", [self.keys.queue(q) for q in names], [
            max(want, 0), s.lease_seconds, token, default_limit, s.promote_batch, s.max_skips,
            s.max_deliveries, first % len(queues) + 1 if queues else 1, len(queues), len(acks),
            *(arg for ack in acks for arg in ack.ack_args(position[ack.queue])),
        ])
        next_due = float(flat[0])
        claim = Claim([], next_due if next_due >= 0 else None, lost=list(flat[1]))
        for n in range(2, len(flat), 7):
            index = int(flat[n])  # negated for an expired job the claim dropped
            lease = Lease(self, token, queue=names[abs(index) - 1], job_id=flat[n + 1],
                          envelope=flat[n + 2], deliveries=int(flat[n + 3]),
                          account=decode_id(flat[n + 4]), stored_key=flat[n + 5],
                          marker=flat[n + 6], expired=index < 0)
            (claim.expired if lease.expired else claim.leases).append(lease)
        return claim

    # The settling of one lease (see leases.py), one script each; True while the lease was
    # still this worker's (else it expired and was reaped). A claiming worker acks with its
    # next claim instead of ack.

    def ack(self, lease: Lease) -> bool:
        """The job ran (or handed over to its retry): release its lease and slot; a success
        marks its business key done."""
        return bool(self._run("ack", [self.keys.queue(lease.queue)],
                              [lease.token, *lease.ack_args(1)]))

    def requeue(self, lease: Lease) -> bool:
        """Give a leased job back to ready, in its FIFO place."""
        return bool(self._run("requeue", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token, encode_id(lease.account)]))

    def give_back(self, lease: Lease, wait: float) -> bool:
        """A leased job whose run the store failed (full, read-only, busy) waits ``wait``
        seconds and runs again; the failed delivery does not count toward the poison limit."""
        return bool(self._run("give_back", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token, encode_id(lease.account), wait]))

    def reject(self, lease: Lease, reason: str) -> bool:
        """Dead-letter a leased job with ``reason``."""
        return bool(self._run("reject", [self.keys.queue(lease.queue)],
                              [lease.job_id, lease.token, encode_id(lease.account), reason]))

    def cancel(self, task_id: str) -> list[str]:
        """Take the waiting deliveries of a Celery task out of the store (a revoke); returns
        the delivery ids cancelled. A running one stays: Celery's revoke stops it in its worker.
        See :meth:`deliveries_of` for the ids it takes."""
        return [job_id for job_id, queue in list(self.deliveries_of(task_id))
                if self._run("cancel", [self.keys.queue(queue)], [job_id]) == 1]

    def bury(self, job_id: str, reason: str, job_key: str | None = None,
             record: dict[str, Any] | None = None) -> None:
        """Keep a failed job as a dead letter with ``reason``; ``record`` (task, account, args,
        error, ...) is kept as JSON, as it is, and read back by DeadLetter."""
        self._run("bury", [], [job_id, reason, encode_job_key(job_key),
                               build_dead_record(record)])

    def recording(self) -> bool:
        """Whether a recorder listens (the event stream exists); asked at most every 5 s."""
        now = time.monotonic()
        if now - self._recording_checked > EVENTS_CHECK_SECONDS:
            self._recording = bool(self.client.exists(self.keys.events))
            self._recording_checked = now
        return self._recording

    def emit(self, type: str, **fields: Any) -> bool:
        """Record a task-side transition (see protocol.EventType) for the recorder; a no-op
        until a recorder created the stream."""
        if not self.recording():
            return False
        return bool(self._run("emit", [], event_fields(type, **fields)))

    # -- idempotency markers -------------------------------------------------------------------

    def marker(self, job_key: str) -> Marker | None:
        """The business key's idempotency marker, or None."""
        return Marker.read(self.client.hget(self.keys.markers, encode_id(job_key)))

    def mark_started(self, job_key: str, job_id: str) -> None:
        """Before the side effect: a redelivery that finds only this asks for reconciliation."""
        self._run("mark", [], [encode_id(job_key), job_id, "started", ""])

    def mark_done(self, job_key: str, job_id: str, external_id: str | None = None) -> None:
        """After the side effect: a redelivery that finds this returns without running. One
        atomic call: the marker and the key's done time together."""
        self._run("mark", [], [encode_id(job_key), job_id, "done",
                               marker_external_id(external_id)])

    def known_queues(self) -> list[str]:
        return sorted(decode_id(q) for q in self.client.smembers(self.keys.queues))

    def reap(self, batch: int = 500) -> int:
        """Return jobs with expired leases (crashed or hung workers) to ready."""
        queues = self.known_queues()
        if not queues:
            return 0
        return int(self._run("reap", [self.keys.queue(q) for q in queues],
                             [batch, *(encode_id(q) for q in queues)]))

    def trim_done(self, batch: int = 1000) -> int:
        """Forget business keys whose job finished longer ago than the retention."""
        return int(self._run("trim_done", [], [self.settings.job_retention, batch]))

    # -- limits --------------------------------------------------------------------------------

    def set_limit(self, account: str, limit: AccountLimit) -> None:
        """Store an account's limit; it applies from the next claim, deferred or not."""
        encoded = encode_id(account)
        now = self.server_time()
        pipe = self.client.pipeline()
        pipe.hset(self.keys.limits, encoded, limit.pack(now))
        pipe.hset(self.keys.limit_config, encoded, limit.to_json())
        pipe.execute()
        self._wake(encoded)

    def clear_limit(self, account: str) -> None:
        """Drop an account's own limit; the default limit applies again."""
        encoded = encode_id(account)
        pipe = self.client.pipeline()
        pipe.hdel(self.keys.limits, encoded)
        pipe.hdel(self.keys.limit_config, encoded)
        pipe.execute()
        self._wake(encoded)

    def limits(self) -> Iterator[tuple[str, AccountLimit]]:
        """Every account's own limit, as set (``set_account_limit`` or the admin)."""
        for encoded, raw in self.client.hscan_iter(self.keys.limit_config, count=500):
            yield decode_id(encoded), AccountLimit.from_json(raw)

    def get_limit(self, account: str) -> AccountLimit | None:
        raw = self.client.hget(self.keys.limit_config, encode_id(account))
        return AccountLimit.from_json(raw) if raw else None

    def refresh_windows(self) -> int:
        """Recompute the window schedules of accounts that have one, and of the store's default
        limit (they run a week ahead)."""
        now = self.server_time()
        refreshed = 0
        default = self.default_limit()
        if default is not None and default.window:
            self.client.hset(self.keys.limits, DEFAULT_LIMIT_FIELD, default.pack(now))
            refreshed += 1
        for account, limit in self.limits():
            if limit.window:
                self.client.hset(self.keys.limits, encode_id(account), limit.pack(now))
                refreshed += 1
        return refreshed

    def _wake(self, encoded_account: str) -> None:
        queues = self.known_queues()
        self._run("wake", [self.keys.queue(q) for q in queues], [encoded_account])

    # -- inspection ----------------------------------------------------------------------------

    def clear(self) -> int:
        """Delete every key of this store (those under its prefix), for test suites and for
        decommissioning a store; returns how many were deleted."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.keys.tag) + ":*"
        keys = list(self.client.scan_at(self.keys.jobs, match=pattern, count=1000))
        return sum(int(self.client.delete(*keys[n:n + 500])) for n in range(0, len(keys), 500))

    def ping(self) -> None:
        """Raise StoreUnavailableError unless Redis answers."""
        self.client.ping_at(self.keys.jobs)

    def instance(self) -> str:
        """The store's instance id, created on first use; a new one means the data was lost."""
        self.client.set(self.keys.instance, uuid.uuid4().hex, nx=True)
        return str(self.client.get(self.keys.instance))

    def server_time(self) -> float:
        seconds, micros = self.client.time_at(self.keys.jobs)
        return seconds + micros / 1e6

    def counts(self, queue: str) -> dict[str, int]:
        """Ready, delayed and running job counts of one queue, its accounts deferred by their
        limit (rate, window, concurrency cap) and its accounts an operator paused."""
        qk = self.keys.queue(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(qk.ready)
        pipe.zcard(qk.delayed)
        pipe.hvals(qk.running)
        pipe.hlen(qk.deferrals)
        ready, delayed, running, deferred = pipe.execute()
        return {"ready": ready, "delayed": delayed, "running": sum(int(n) for n in running),
                "deferred_accounts": deferred,
                "paused_accounts": paused_accounts(self.pauses(), queue)}

    def stats(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(self.keys.stats).items()}
