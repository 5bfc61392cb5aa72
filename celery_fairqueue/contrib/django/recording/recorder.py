"""The recorder: applies the event stream (events.py) to the Job and Attempt tables.

It reads batches through the stream's consumer group, folds each batch into the rows it touches
in memory (fold.py: plain values, one handler per event type, one row per job however many of
its events the batch holds), with the writer (writer.py) loading those rows first and writing
them back after in one transaction, and only then acknowledges the events. On PostgreSQL the
three overlap: the write runs in a thread of its own while the next batch is folded (on the
rows of the one being written, which are newer than the tables), and while a backlog lasts a
reading thread fetches the batch after from Redis meanwhile, so Redis, the database and this
process work at once; a batch is written only once the one before has been, and after a batch
that changed whole accounts the next one waits for it. Whatever makes the recorder read a
stream again from its first unacknowledged event (a failed write, a change of the streams it
leads) first waits for the batch being read ahead and drops it. A database or Redis that is
down makes it log, back off and read the same unacknowledged events again, so nothing is
lost: they are applied when both are back. A batch the database refuses for its content
(not its absence) is applied event by event and the offending event skipped with an error
log, so one bad event cannot stall recording.

Recording must not slow the jobs down: after a batch smaller than ``batch`` the recorder waits
``linger_ms`` so the next one gathers more events (group commit), and on PostgreSQL the rows go
through COPY (see ``writer.PostgresCopy``). State is visible within ``block_ms + linger_ms``
plus the write, well under 2 s.

Each event stream has one leading recorder at a time. Events must be applied in stream order
(a ``running`` applied after the ``succeeded`` of the same delivery would show a finished job
as running); a store of shards has a stream per shard, and a job's events are all in its
account's shard's, so each stream's order is all it takes. A consumer group hands different
events to different consumers, so two recorders reading one stream would race. Every recorder
therefore holds a short lease on each stream it reads (``StreamLeases``): the live recorders
share a sharded store's streams evenly, hand streams over when one joins or leaves, and take
over those of one that died within ``lock_seconds``, adopting the entries it had read but not
acknowledged. One recorder alone leads every stream. Applying is also idempotent (a batch
applied twice, because its ack was lost, gives the same rows) and ignores events older than
the job's current delivery.

A job enqueued while its account is paused by a limit is ready in Redis but waits for the
account: the recorder remembers the pauses it saw (``account_deferred`` until ``account_ready``)
and records such a job as deferred until the pause ends. A recorder that takes over has not
seen the pauses before it, so until their end it may show such jobs as ready.

The leading recorder also deletes the recorded jobs past their retention when it has nothing
to record, a fifth of a second at a time (pruner.py), so pruning never holds recording up.

Events for jobs the database does not know (enqueued before any recorder listened) are skipped
with a debug log: without their ``enqueued`` event there is no task, queue or account to show.
Such a job appears once it is enqueued again, e.g. by its next retry.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

from celery import Celery
from django.db import (
    InterfaceError,
    OperationalError,
    connections,
    router,
)

from ....errors import StoreUnavailableError
from ....protocol import Event
from ....settings import settings_for
from ....store import EventReader, StreamLeases, open_store
from ..models import Job
from . import writer
from .fold import NO_OUTCOME, Fold
from .pruner import Pruner

__all__ = ["NO_OUTCOME", "Recorder", "default_consumer_name"]

# the name it logged under before the app had rooms: logging settings name it
logger = logging.getLogger("celery_fairqueue.contrib.django.recorder")

# The database is away (down, restarting, unreachable): keep the events and try again. Any other
# database error is the batch's fault, which retrying would repeat forever.
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
#: Most seconds the leading recorder prunes at a time when it has nothing to record.
PRUNE_SLICE = 0.2


def _close(db: str) -> None:
    """Close this thread's connection to ``db`` (Django's connections are per thread)."""
    connections[db].close()


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Recorder:
    """Reads the event stream of ``app``'s fair store into the database; see the module doc."""

    def __init__(self, app: Celery, consumer_name: str | None = None, batch: int = 2000,
                 block_ms: int = 500, lock_seconds: float = 30.0, linger_ms: int = 200,
                 max_backoff: float = 5.0) -> None:
        self.app = app
        # a worker's store: quick to give up, since the loop backs off and reads again
        self.store = open_store(settings_for(app), fail_fast=True)
        self.reader = EventReader(self.store, consumer_name or default_consumer_name())
        self.batch = batch
        self.block_ms = block_ms
        self.lock_seconds = lock_seconds
        self.linger = linger_ms / 1000
        self.max_backoff = max_backoff
        self.db = router.db_for_write(Job)
        # a lease a stream, for half of lock_seconds, balanced every sixth: the streams of a
        # recorder that died are taken over within two thirds of lock_seconds
        self._leases = StreamLeases(self.store, self.consumer_name, lock_seconds / 2)
        self.leading = False
        self._renewed = float("-inf")
        self._group_ready = False
        self._paused: dict[tuple[str, str], datetime] = {}
        self._writing: tuple[list[Event], Fold, Future[None]] | None = None  # being written
        self._ahead: Future[list[Event]] | None = None  # the next batch, being read
        # the leading recorder prunes in its idle time, unless fairqueue_record_prune_interval=0
        self.pruner = Pruner(app) if settings_for(app).record_prune_interval else None
        self._prune_at = float("-inf")
        self.skipped = 0  # events that could not be applied and were left behind

    @property
    def consumer_name(self) -> str:
        return self.reader.consumer

    def run_once(self) -> int:
        """Apply one batch and ack it; returns the events applied (0 while another leads).

        Database and Redis errors propagate, with the batch left pending for the next call.
        """
        try:
            events = self._read()
            if events:
                self._write_or_skip(events, self._fold_or_none(events))
        except Exception:
            self._rewind()
            raise
        return len(events)

    def _rewind(self) -> None:
        """Read from the first unacknowledged event again, the batch read ahead dropped."""
        self._drop_ahead()
        self.reader.rewind()

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            with contextlib.suppress(Exception):
                ahead.result()  # its events stay pending: read again after the rewind

    def _read_ahead(self, reads: ThreadPoolExecutor, events: list[Event]) -> None:
        """While a backlog lasts (a full batch was read), read the next batch in ``reads``'
        thread while this one is folded and the one before written."""
        if len(events) < self.batch // 2 or not self.leading:
            return
        per_stream = max(1, self.batch // max(1, len(self.reader.reading)))
        self._ahead = reads.submit(self.reader.read, count=per_stream, block_ms=self.block_ms)

    def _next(self) -> list[Event]:
        """The batch read ahead, else one read now; read again when the streams this recorder
        leads changed meanwhile (they are read from their first unacknowledged event then)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return self._read()
        events = ahead.result()
        streams = list(self.reader.reading)
        if not self._lead() or self.reader.reading != streams:
            return self._read()
        return events

    def _read(self) -> list[Event]:
        if not self._group_ready:
            self.reader.ensure_group()
            self._group_ready = True
        if not self._lead():
            return []
        # ``batch`` events a step whatever the streams led, so a step stays well within a lease
        per_stream = max(1, self.batch // max(1, len(self.reader.reading)))
        return self.reader.read(count=per_stream, block_ms=self.block_ms)

    def _write_or_skip(self, events: list[Event], fold: Fold | None) -> None:
        """Write a folded batch (``fold`` None: it could not be folded) and ack it."""
        try:
            if fold is None:
                raise ValueError("the batch could not be folded")
            writer.write(writer.prepare(fold), self.db)
        except TRANSIENT_DB_ERRORS:
            raise
        except Exception as exc:  # the batch's content, not the database's absence
            logger.warning("fairqueue recorder: a batch of %d events failed (%s); applying "
                           "them one by one to skip the bad one", len(events),
                           type(exc).__name__)
            self._apply_each(events)
        self.reader.ack(events)

    def _apply_each(self, events: list[Event]) -> None:
        """Apply events one at a time; one that cannot be applied (a value the database or
        Python refuses) is logged once, counted in ``skipped`` and left behind, so it cannot
        stall all recording by being read again forever."""
        for event in events:
            try:
                self.apply([event])
            except TRANSIENT_DB_ERRORS:
                raise
            except Exception:
                self.skipped += 1
                logger.exception("fairqueue recorder: skipped event %s of type %r (job %s)",
                                 event.id, event.type, event.job_id)

    def fold(self, events: list[Event], before: Fold | None = None) -> Fold:
        """Fold ``events`` (in stream order) on the stored rows, or on those ``before`` left."""
        fold = Fold(self._paused)
        if before is not None:
            fold.carry(before)
        writer.load(fold, events, self.db)
        fold.apply(events)
        return fold

    def _fold_or_none(self, events: list[Event], before: Fold | None = None) -> Fold | None:
        """The fold of ``events``, or None when one of them breaks it (applied alone then)."""
        if not events:
            return None
        try:
            return self.fold(events, before)
        except TRANSIENT_DB_ERRORS:
            raise
        except Exception:
            logger.warning("fairqueue recorder: a batch of %d events could not be folded",
                           len(events))
            return None

    def apply(self, events: list[Event]) -> Fold:
        """Write the effect of ``events`` (in stream order) in one transaction."""
        fold = self.fold(events)
        writer.write(writer.prepare(fold), self.db)
        return fold

    def run_forever(self, stop_event: threading.Event) -> None:
        """Record until ``stop_event`` is set, backing off while the database or Redis is down."""
        logger.info("fairqueue recorder %s started", self.consumer_name)
        failures = 0
        overlap = connections[self.db].vendor == "postgresql"
        with ThreadPoolExecutor(1, thread_name_prefix="fairqueue-recorder-write") as pool, \
                ThreadPoolExecutor(1, thread_name_prefix="fairqueue-recorder-read") as reads:
            while not stop_event.is_set():
                try:
                    applied = self._overlapped(pool, reads) if overlap else self.run_once()
                    failures = 0
                    if not self.leading:
                        stop_event.wait(self.lock_seconds / 6)
                    elif 0 < applied < self.batch // 2:
                        # group commit: a read returns as soon as one event is there, so a
                        # recorder that keeps up would spend a transaction on every few events
                        stop_event.wait(self.linger)
                    elif not applied:
                        self._prune_idle()
                except Exception as exc:
                    failures += 1
                    with contextlib.suppress(Exception):
                        self._settle(quiet=True)
                    self._rewind()
                    if isinstance(exc, TRANSIENT_DB_ERRORS):
                        pool.submit(_close, self.db).result()
                    self._failed(exc, failures)
                    stop_event.wait(self._backoff(failures))
            self._drop_ahead()
            with contextlib.suppress(Exception):
                self._settle(quiet=True)
            pool.submit(_close, self.db).result()
        self.release()
        logger.info("fairqueue recorder %s stopped", self.consumer_name)

    def _overlapped(self, pool: ThreadPoolExecutor, reads: ThreadPoolExecutor) -> int:
        """Fold a batch while the one before is written and, in a backlog, the one after is
        read, then hand it to the writing thread; returns the events read."""
        events = self._next()
        self._read_ahead(reads, events)
        if self._writing is not None and self._writing[1].account_updates:
            self._settle()  # rows of those accounts that the fold does not hold may change
        fold = self._fold_or_none(events, self._writing[1] if self._writing else None)
        if not self._settle():
            return len(events)  # folded on a batch that was not written so: read again
        if fold is None and events:
            self._write_or_skip(events, None)
        elif fold is not None:
            self._writing = (events, fold, pool.submit(writer.write, writer.prepare(fold),
                                                       self.db))
        return len(events)

    def _settle(self, quiet: bool = False) -> bool:
        """Wait for the batch being written and ack it. False when it was not written as
        folded (a batch the database refused for its content is applied event by event;
        ``quiet``: left pending instead): what was folded on it must be read again."""
        if self._writing is None:
            return True
        events, _, written = self._writing
        self._writing = None
        try:
            written.result()
        except Exception as exc:
            self._rewind()
            if quiet:
                return False
            if isinstance(exc, TRANSIENT_DB_ERRORS):
                raise
            logger.warning("fairqueue recorder: the database refused a batch (%s)",
                           type(exc).__name__)
            self._write_or_skip(events, None)
            return False
        self.reader.ack(events)
        return True

    def _prune_idle(self) -> None:
        """With nothing to record, prune for at most ``PRUNE_SLICE`` seconds (pruner.py), then
        read again; a pass that is through waits ``fairqueue_record_prune_interval``."""
        if self.pruner is None or time.monotonic() < self._prune_at:
            return
        try:
            self.pruner.prune(PRUNE_SLICE)
        except (*TRANSIENT_DB_ERRORS, StoreUnavailableError) as exc:
            logger.warning("fairqueue recorder: pruning failed (%s); trying again later", exc)
            self._prune_at = time.monotonic() + self.pruner.interval
            return
        self._prune_at = time.monotonic() + (0 if self.pruner.unfinished
                                             else self.pruner.interval)

    def _failed(self, exc: Exception, failures: int) -> None:
        """Log a failed step and forget what a restarted Redis lost."""
        if isinstance(exc, TRANSIENT_DB_ERRORS):
            logger.warning("fairqueue recorder: database unavailable (%s); the events stay "
                           "pending and are applied when it is back", exc)
            connections[self.db].close()
        elif isinstance(exc, StoreUnavailableError):
            logger.warning("fairqueue recorder: Redis unavailable (%s); retrying", exc)
            self._group_ready = self.leading = False  # a restarted Redis lost the group
        else:  # a bug must not end the thread unseen: log it, keep trying
            logger.exception("fairqueue recorder: recording failed; retrying", exc_info=exc)

    def release(self) -> None:
        """Hand the streams to the other recorders at once instead of after their leases."""
        self.leading = False
        with contextlib.suppress(StoreUnavailableError):
            self._leases.release()
        connections[self.db].close()

    def _backoff(self, failures: int) -> float:
        return min(self.max_backoff, 0.25 * 2 ** (failures - 1))

    def _lead(self) -> bool:
        """Whether this recorder leads any stream now; every ``lock_seconds / 6`` (and at
        every call while it leads none) it balances the streams with the other recorders."""
        if self.leading and time.monotonic() - self._renewed < self.lock_seconds / 6:
            return True
        self.store.check_shards()
        if len(self.store.shards) > len(self._leases.streams):  # a reshard added shards
            self._leases.grow()
            self.reader.grow()
            self.reader.ensure_group()
        gained, lost = self._leases.balance()
        self._renewed = time.monotonic()
        if gained or lost:
            self._settle()  # what is being written is acked before the streams change
            self.reader.follow(self._leases.leading)
            if gained:
                self.reader.adopt_pending(gained)
            logger.info("fairqueue recorder %s leads %d of %d event streams (%d taken, %d "
                        "handed back or lost)", self.consumer_name, len(self._leases.held),
                        len(self._leases.streams), len(gained), len(lost))
        self.leading = bool(self._leases.held)
        return self.leading
