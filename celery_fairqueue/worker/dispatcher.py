"""Claims fair jobs for free pool slots and hands them to Celery's own task handler.

The dispatcher runs in the consumer's event loop: it claims when a slot frees (an ack wakes it
through a self-pipe, so bursts of acks coalesce into one claim call, which settles the acks in
the same round trip), when its doorbell rings (see doorbell.py) and on a fallback timer.
It never holds more jobs than the pool can start now, so nothing waits in worker memory. A
maintenance thread extends the leases of running jobs (heartbeat), keeps its queues' time when
the heartbeat makes it their keeper (doorbell.py) and returns expired leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from collections import deque
from typing import Any

from celery.platforms import EX_FAILURE
from celery.worker import state as worker_state

from ..errors import FairqueueError, StoreLayoutError
from ..settings import settings_for
from ..store import GIVE_BACK_SECONDS, Lease, WorkerRegistration, display_url, open_store
from ..store.shards.sharded import FORMAT_WAIT_SECONDS
from ..store.writers.leases import lost_before_settled
from .channel import lease_message, read_envelope
from .doorbell import Doorbell, drain
from .layout_gate import layout_ready
from .outage import Outage

logger = logging.getLogger(__name__)

WINDOW_REFRESH_SECONDS = 3600.0


class FairDispatcher:
    """Claims leases for free pool slots and holds them until they settle (a LeaseHolder)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.app = consumer.app
        self.settings = settings_for(self.app)
        self.store = open_store(self.settings, fail_fast=True)
        self.store.reading.role = f"worker {consumer.hostname}"  # to a reshard that waits
        self.token = f"{consumer.hostname}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self.held: dict[str, Lease] = {}
        self._acks: deque[Lease] = deque()  # settled by the next claim (pool threads append)
        self.queues: list[str] = []
        self.handler: Any = None
        self.claiming = False
        self._drained = False  # the last claim took less than it wanted: wait for a ring
        self._rotation = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._timer: Any = None
        self._due: Any = None  # the timer entry of _claim_at
        self._due_at = 0.0
        self._stopping = threading.Event()
        self._maintainer: threading.Thread | None = None
        self.doorbell: Doorbell | None = None
        self._instance: str | None = None  # see _check_instance
        self._layout_checked = False  # see _check_layout
        self._default_limit = ""
        self._claims = Outage("claiming")
        self._default_limit_at = 0.0
        self._started = time.time()
        self._succeeded = self._failed = 0

    # -- lifecycle (called by the bootstep) ----------------------------------------------------

    def start(self) -> None:
        c = self.consumer
        if c.hub is None:
            raise FairqueueError(
                "celery-fairqueue needs the worker's event loop (a Redis or AMQP broker and the "
                "prefork, threads or solo pool); eventlet and gevent are not supported")
        if not self._layout_checked:  # raises StoreLayoutError: Celery exits
            self._layout_checked = self._check_layout()
        self.queues = sorted(c.app.amqp.queues.consume_from)
        self.handler = c.create_task_handler()
        c.hub.add_reader(self._wake_r, self._on_wake)
        self._timer = c.timer.call_repeatedly(self.settings.poll_interval, self._poll)
        self.claiming = True
        if self._instance is None:
            with contextlib.suppress(FairqueueError, OSError):
                self._instance = self.store.instance()
        with contextlib.suppress(FairqueueError, OSError):  # the heartbeat registers it later
            self.store.register_worker(self.token, self.registration())
        if self._maintainer is None:
            self._maintainer = threading.Thread(
                target=self._maintain, name="fairqueue-maintenance", daemon=True)
            self._maintainer.start()
        if self._layout_checked:
            self._ring_in()
        logger.info("fairqueue: claiming fair jobs from queues %s of %s as %s",
                    ", ".join(self.queues), display_url(self.settings.redis_url or ""),
                    self.token)
        self.wake()

    def _ring_in(self) -> None:
        """Wait on the queues' doorbells (and keep their time, if the heartbeat says so) from
        now on: once the store's layout is this version's, not while a worker of an earlier
        version may still need each ring (doorbell.py)."""
        if self.doorbell is None:
            self.doorbell = Doorbell(self.store, self.queues, self.wake)
            self.doorbell.idle.set()
            self.doorbell.start()

    def stop(self) -> None:
        """Stop claiming; running jobs still settle through the channel."""
        self.claiming = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flush_acks()
        hub = self.consumer.hub
        if hub is not None:
            hub.remove_reader(self._wake_r)

    def shutdown(self) -> None:
        """Give back what is still held (a cold shutdown), stop the maintenance thread and
        leave the registry of live workers."""
        self.stop()
        for lease in list(self.held.values()):
            lease.requeue()
        self._stopping.set()
        if self.doorbell is not None:
            self.doorbell.stop()
        if self._maintainer is not None:
            self._maintainer.join(timeout=5)
        with contextlib.suppress(FairqueueError, OSError):  # else they expire
            self.store.beat(self.token, self.registration(), [], keeping=False)
            self.store.unregister_worker(self.token)

    def registration(self) -> WorkerRegistration:
        """What the registry of live workers shows of this worker (the console, status)."""
        return WorkerRegistration(name=str(self.consumer.hostname), queues=tuple(self.queues),
                                  slots=int(getattr(self.consumer.pool, "num_processes", 0) or 0),
                                  started=self._started, succeeded=self._succeeded,
                                  failed=self._failed)

    # -- claiming ------------------------------------------------------------------------------

    def free_slots(self) -> int:
        """Pool slots not taken by a broker task or by a fair job this worker still holds.

        A held job counts until its ack is settled, which runs a loop turn after the request
        leaves ``reserved_requests``; counting it keeps the leases at most the pool size.
        The threads pool's threads take their requests out of that set while this loop counts,
        and it is a ``WeakSet``, whose own iteration and ``copy()`` are Python code that they
        interleave with ("Set changed size during iteration" killed the worker): its weak
        references are copied in one C call instead, a single step under the GIL.
        """
        refs = list(worker_state.reserved_requests.data)
        broker_tasks = sum(1 for ref in refs if (request := ref()) is not None
                           and not isinstance(request.message.channel, Lease))
        return int(self.consumer.pool.num_processes) - broker_tasks - len(self.held)

    def wake(self) -> None:
        """Ask for a claim from any thread; the event loop runs it once for many wakes."""
        with contextlib.suppress(BlockingIOError):  # a full pipe: a claim is already due
            os.write(self._wake_w, b"x")

    def _on_wake(self, *args: Any) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        self.claim()

    def _take_acks(self) -> list[Lease]:
        return drain(self._acks)

    def claim(self, force: bool = False) -> None:
        """One round trip a turn: settle the jobs finished since the last turn, lease jobs for
        the free slots. A worker whose last claim took less than it wanted waits for its
        doorbell: until a ring, the keeper's call, its timer or its poll (``force``), a turn
        settles its acks alone and leases nothing (there is nothing to lease: new work rings)."""
        if not self.claiming or not (self._layout_checked or self._check_layout_late()):
            return
        bell = self.doorbell
        keeps_time = bell is None or bell.keeps_time
        tick = bell is not None and bell.ticking and keeps_time
        rings = bell.take_rings() if bell is not None else []
        called = bell.take_calls() if bell is not None else None
        if called is not None:  # the keeper's call: its timer, for the due time it carries
            self._claim_at(max(0.0, called - time.time()))
        acks = self._take_acks()
        free = self.free_slots()
        if bell is not None:
            if free > 0:
                bell.idle.set()
            else:
                bell.idle.clear()
            if free <= 0 and rings:
                with contextlib.suppress(FairqueueError):  # else the keeper's sweep rings
                    bell.give_back(rings)
        want = free if force or tick or rings or not self._drained else 0
        if want <= 0 and not acks and not tick:
            return
        if bell is not None:
            bell.ticking = False
        try:
            claim = self.store.claim(self.queues if want > 0 or tick else [], want, self.token,
                                     self.default_limit(), first=self._rotation, acks=acks,
                                     keeps_time=keeps_time, tick=tick)
        except FairqueueError as exc:
            # the acks go with the next claim, a moment from now; the heartbeat keeps their
            # leases meanwhile (should this worker die first, the leases return the jobs)
            self._acks.extendleft(reversed(acks))
            self._claims.failed(exc)
            if acks:
                self._claim_at(GIVE_BACK_SECONDS)
            return
        if claim.failure is not None:  # a shard failed: its acks go with the next claim
            self._acks.extendleft(reversed(claim.unsettled))
            self._claims.failed(claim.failure)
        else:
            self._claims.answered()
        if want > 0:
            self._drained = claim.failure is None and len(claim.leases) < want and \
                claim.next_due != 0
        self._rotation += 1
        for job_id in claim.lost:
            lost_before_settled(job_id)
        for lease in claim.leases:
            self._dispatch(lease)
        for lease in claim.expired:
            self._revoke_expired(lease)
        if bell is not None and self.free_slots() <= 0:
            bell.idle.clear()
        # the keeper's timer for the next due time; any worker's for a claim cut short (0)
        if claim.next_due is not None and (keeps_time or claim.next_due == 0):
            self._claim_at(claim.next_due)

    def _check_layout(self) -> bool:
        """Whether the worker may claim yet (layout_gate.py); if not, asked again soon."""
        if layout_ready(self.store, self._claims):
            return True
        self._claim_at(FORMAT_WAIT_SECONDS)
        return False

    def _check_layout_late(self) -> bool:
        """:meth:`_check_layout` at a claim, the store having been out of reach at start: a
        store holding jobs of the previous layout stops the worker then (a warm shutdown,
        exit code 1), as Celery's own shutdown does, from the event loop."""
        try:
            self._layout_checked = self._check_layout()
        except StoreLayoutError as exc:
            logger.critical("fairqueue: this worker stops: %s", exc)
            self.claiming = False
            worker_state.should_stop = EX_FAILURE
        if self._layout_checked:
            self._ring_in()
        return self._layout_checked

    def _claim_at(self, delay: float) -> None:
        """Claim again when a paused account's token or a delayed job is due, not a poll later.

        One timer entry at most: kombu's hub fires ten timers per loop turn and then sleeps a
        full second, so stray entries would stall the worker.
        """
        due = time.monotonic() + delay
        if self._due is not None:
            if self._due_at <= due:
                return
            self._due.cancel()
        self._due_at = due
        self._due = self.consumer.timer.call_after(delay, self._on_due)

    def _on_due(self) -> None:
        self._due = None
        if self.doorbell is not None:  # the keeper promotes what is due even with no free slot
            self.doorbell.ticking = True
        self.claim(force=True)

    def _poll(self) -> None:
        self.store.rescan()
        self.claim(force=True)

    def default_limit(self) -> str:
        """The store's default limit, packed (the claim reads the store's own; this is its
        fallback). The first worker sets it from its settings; a worker whose settings differ
        says so once and uses the store's. Asked again hourly (an operator may change it)."""
        now = time.time()
        if now - self._default_limit_at > WINDOW_REFRESH_SECONDS:
            configured = self.settings.default_limit
            stored = self.store.set_default_limit(configured, only_if_unset=True)
            if stored != configured and not getattr(self, "_default_limit_warned", False):
                self._default_limit_warned = True
                logger.warning(
                    "fairqueue: this worker's default limit (fairqueue_default_rate, "
                    "fairqueue_default_burst, fairqueue_default_concurrency, "
                    "fairqueue_default_window, fairqueue_default_tz: %s) differs from the fair "
                    "store's (%s); using the store's. Change it with `celery -A proj fairqueue "
                    "limits --default ...` or celery_fairqueue.set_default_limit().",
                    configured.to_json(), stored.to_json())
            self._default_limit = stored.pack(self.store.server_time())
            self._default_limit_at = now
        return self._default_limit

    def _dispatch(self, lease: Lease) -> None:
        lease.holder = self
        self.held[lease.job_id] = lease
        try:
            envelope = read_envelope(lease)
        except Exception as exc:
            logger.error("fairqueue: job %s of account %r is malformed and was dead-lettered: %s",
                         lease.job_id, lease.account, exc)
            lease.dead_letter(f"malformed message: {exc}")
            return
        name = envelope.task_name
        if name not in self.consumer.strategies:
            logger.error("fairqueue: job %s has unknown task %r (not registered in this "
                         "worker); dead-lettered", lease.job_id, name)
            lease.dead_letter(f"unknown task {name!r}: not registered in worker "
                              f"{self.consumer.hostname}")
            return
        message = lease_message(lease, envelope, self._acked_after_run(name))
        try:
            self.handler(message)
        except Exception:
            logger.exception("fairqueue: handing job %s to Celery failed; returned to ready",
                             lease.job_id)
            if not lease.settled:
                lease.requeue()

    def _acked_after_run(self, task_name: str | None) -> bool:
        return bool(getattr(self.app.tasks.get(task_name), "acks_late", False))

    def _revoke_expired(self, lease: Lease) -> None:
        """Celery records a job the claim dropped past its ``expires`` as revoked, as it does a
        message that arrives expired: it never runs, and took no slot or token."""
        try:
            envelope = read_envelope(lease)
        except Exception:
            envelope = None
        if envelope is None or envelope.task_name not in self.consumer.strategies:
            logger.warning("fairqueue: job %s expired and was dropped", lease.job_id)
            return
        lease.holder = self
        self.held[lease.job_id] = lease
        try:
            self.handler(lease_message(lease, envelope, False))
        except Exception:
            logger.exception("fairqueue: recording expired job %s failed", lease.job_id)
        self.held.pop(lease.job_id, None)

    # -- holding leases (LeaseHolder) ----------------------------------------------------------

    def released(self, lease: Lease) -> None:
        self.held.pop(lease.job_id, None)
        # the registry's counts (the console's workers): a requeue or give-back is neither
        if lease.outcome == "ack" and lease.success:
            self._succeeded += 1
        elif lease.outcome in ("ack", "dead-letter"):
            self._failed += 1

    def ack_later(self, lease: Lease) -> bool:
        """While claiming, an ack rides with the next claim: one round trip for many."""
        if not self.claiming:
            return False
        self._acks.append(lease)
        self.wake()
        return True

    def settled(self, lease: Lease, owned: bool) -> None:
        self.wake()

    def _flush_acks(self) -> None:
        """Settle the acks still waiting for a claim, as the worker stops claiming."""
        acks = self._take_acks()
        if not acks:
            return
        failure: FairqueueError | None
        try:
            claim = self.store.claim([], 0, self.token, "", acks=acks)
        except FairqueueError as exc:
            unsettled, failure, lost = acks, exc, []
        else:
            unsettled, failure, lost = claim.unsettled, claim.failure, claim.lost
        if unsettled:
            logger.warning("fairqueue: could not ack %d jobs (their leases return them): %s",
                           len(unsettled), failure)
        for job_id in lost:
            lost_before_settled(job_id)

    # -- maintenance thread --------------------------------------------------------------------

    def _check_instance(self, current: str) -> None:
        """Report loudly when Redis lost the fair store (restarted without persistence): a
        shard's instance id changed (the shards a reshard adds come after the others)."""
        shards = zip((self._instance or current).split(","), current.split(","), strict=False)
        if any(was != now for was, now in shards):
            logger.error(
                "fairqueue: the fair store at %s lost its data (instance %s is now %s): jobs "
                "enqueued or running before were lost with it; run Redis with appendonly yes",
                display_url(self.settings.redis_url or ""), self._instance, current)
        self._instance = current

    def _maintain(self) -> None:
        """Beat every ``fairqueue_heartbeat_interval``; reap (and trim done keys) so that the
        fleet reaps about every ``fairqueue_reap_interval``: each of N live workers every N
        intervals, at a random phase, so idle workers cost Redis little."""
        s = self.settings
        tick = min(s.heartbeat_interval, s.reap_interval)
        last_beat = last_windows = 0.0
        next_reap = time.monotonic()
        live_workers = 1
        outage = Outage("maintenance (heartbeat, reaper)")
        while not self._stopping.wait(tick / 2):
            now = time.monotonic()
            asked = False  # an outage ends only when a call to the store went through
            try:
                if now - last_beat >= s.heartbeat_interval:
                    last_beat, asked = now, True
                    leased = [*self.held, *(ack.job_id for ack in list(self._acks))]
                    beat = self.store.beat(self.token, self.registration(), leased,
                                           keeping=self.doorbell is not None)
                    if self.doorbell is not None:
                        self.doorbell.kept(beat.keeps, beat.clock_offset)
                    self._check_instance(beat.instance)
                    live_workers = max(1, beat.live_workers)
                    for job_id in beat.lost:
                        logger.warning("fairqueue: lease of running job %s was lost", job_id)
                if now >= next_reap:
                    next_reap, asked = now + s.reap_interval * live_workers * random.uniform(
                        0.5, 1.5), True
                    reaped = self.store.reap()
                    if reaped:
                        logger.warning("fairqueue: returned %d jobs with expired leases to ready",
                                       reaped)
                if now - last_windows >= WINDOW_REFRESH_SECONDS:
                    last_windows, asked = now, True
                    self.store.refresh_windows()
                if asked:
                    outage.answered()
            except FairqueueError as exc:
                outage.failed(exc)
            except Exception:
                logger.exception("fairqueue: maintenance error")
