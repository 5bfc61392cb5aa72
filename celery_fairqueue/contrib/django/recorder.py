"""The recorder: applies the event stream (events.py) to the Job and Attempt tables.

It reads batches through the stream's consumer group, folds each batch into the rows it touches
in memory (fold.py: one handler per event type), with the writer (writer.py) loading those rows
first and writing them back after, all in one transaction, and only then acknowledges the
events. A database or Redis that is down makes it log, back off and read the same
unacknowledged events again, so nothing is lost: they are applied when both are back. A batch
the database refuses for its content (not its absence) is applied event by event and the
offending event skipped with an error log, so one bad event cannot stall recording.

Recording must not slow the jobs down: after a batch smaller than ``batch`` the recorder waits
``linger_ms`` so the next one gathers more events (group commit), and on PostgreSQL the rows go
through COPY (see ``writer.PostgresCopy``). State is visible within ``block_ms + linger_ms``
plus the write, well under 2 s.

One recorder leads at a time. Events must be applied in stream order (a ``running`` applied
after the ``succeeded`` of the same delivery would show a finished job as running); a store of
shards has a stream per shard, and a job's events are all in its account's shard's, so each
stream's order is all it takes. A consumer group hands different events to different
consumers, so several recorders reading at once would race. Every recorder therefore takes a
Redis lock before reading; the others stand by and take over within ``lock_seconds`` when the
leader dies, adopting the entries it had read but not acknowledged. Applying is also
idempotent (a batch applied twice, because its ack was lost, gives the same rows) and ignores
events older than the job's current delivery.

A job enqueued while its account is paused by a limit is ready in Redis but waits for the
account: the recorder remembers the pauses it saw (``account_deferred`` until ``account_ready``)
and records such a job as deferred until the pause ends. A recorder that takes over has not
seen the pauses before it, so until their end it may show such jobs as ready.

Events for jobs the database does not know (enqueued before any recorder listened) are skipped
with a debug log: without their ``enqueued`` event there is no task, queue or account to show.
Such a job appears once it is enqueued again, e.g. by its next retry.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime

from celery import Celery
from django.db import (
    InterfaceError,
    OperationalError,
    connections,
    router,
    transaction,
)

from ...errors import StoreUnavailableError
from ...protocol import Event
from ...settings import settings_for
from ...store import EventReader, Leadership, open_store
from . import writer
from .fold import NO_OUTCOME, Fold
from .models import Job

__all__ = ["NO_OUTCOME", "Recorder", "default_consumer_name"]

logger = logging.getLogger(__name__)

# The database is away (down, restarting, unreachable): keep the events and try again. Any other
# database error is the batch's fault, which retrying would repeat forever.
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Recorder:
    """Reads the event stream of ``app``'s fair store into the database; see the module doc."""

    def __init__(self, app: Celery, consumer_name: str | None = None, batch: int = 500,
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
        self._leadership = Leadership(self.store, lock_seconds)
        self.leading = False
        self._renewed = float("-inf")
        self._group_ready = False
        self._paused: dict[tuple[str, str], datetime] = {}
        self.skipped = 0  # events that could not be applied and were left behind

    @property
    def consumer_name(self) -> str:
        return self.reader.consumer

    def run_once(self) -> int:
        """Apply one batch and ack it; returns the events applied (0 while another leads).

        Database and Redis errors propagate, with the batch left pending for the next call.
        """
        if not self._group_ready:
            self.reader.ensure_group()
            self._group_ready = True
        if not self._lead():
            return 0
        events = self.reader.read(count=self.batch, block_ms=self.block_ms)
        if events:
            try:
                self.apply(events)
            except TRANSIENT_DB_ERRORS:
                raise
            except Exception:  # the batch's content, not the database's absence
                logger.warning("fairqueue recorder: a batch of %d events failed; applying "
                               "them one by one to skip the bad one", len(events))
                self._apply_each(events)
            self.reader.ack(events)
        return len(events)

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

    def apply(self, events: list[Event]) -> Fold:
        """Write the effect of ``events`` (in stream order) in one transaction."""
        fold = Fold(self._paused)
        with transaction.atomic(using=self.db):
            writer.load(fold, events, self.db)
            fold.apply(events)
            writer.write(fold, self.db)
        return fold

    def run_forever(self, stop_event: threading.Event) -> None:
        """Record until ``stop_event`` is set, backing off while the database or Redis is down."""
        logger.info("fairqueue recorder %s started", self.consumer_name)
        failures = 0
        while not stop_event.is_set():
            try:
                applied = self.run_once()
                failures = 0
                if not self.leading:
                    stop_event.wait(self.lock_seconds / 3)
                elif 0 < applied < self.batch:
                    # group commit: a read returns as soon as one event is there, so a recorder
                    # that keeps up would spend a transaction on every few events
                    stop_event.wait(self.linger)
            except TRANSIENT_DB_ERRORS as exc:
                failures += 1
                logger.warning("fairqueue recorder: database unavailable (%s); the events stay "
                               "pending and are applied when it is back", exc)
                connections[self.db].close()
                stop_event.wait(self._backoff(failures))
            except StoreUnavailableError as exc:
                failures += 1
                logger.warning("fairqueue recorder: Redis unavailable (%s); retrying", exc)
                self._group_ready = self.leading = False  # a restarted Redis lost the group
                stop_event.wait(self._backoff(failures))
            except Exception:  # a bug must not end the thread unseen: log it, keep trying
                failures += 1
                logger.exception("fairqueue recorder: recording failed; retrying")
                stop_event.wait(self._backoff(failures))
        self.release()
        logger.info("fairqueue recorder %s stopped", self.consumer_name)

    def release(self) -> None:
        """Hand the lead to a standby recorder at once instead of after ``lock_seconds``."""
        if self.leading:
            self.leading = False
            self._leadership.release()
        connections[self.db].close()

    def _backoff(self, failures: int) -> float:
        return min(self.max_backoff, 0.25 * 2 ** (failures - 1))

    def _lead(self) -> bool:
        if self.leading:
            if time.monotonic() - self._renewed < self.lock_seconds / 3:
                return True
            if self._leadership.renew():
                self._renewed = time.monotonic()
                return True
            self.leading = False
            logger.warning("fairqueue recorder %s lost the lead", self.consumer_name)
        if not self._leadership.acquire():
            return False
        self.leading = True
        self._renewed = time.monotonic()
        self.reader.adopt_pending()
        logger.info("fairqueue recorder %s leads", self.consumer_name)
        return True
