"""The lease: a job a worker claimed, and every way it can end.

A claim returns leases. A lease is the one thing the worker's dispatcher, Celery's request and
the inline test runner hold of a job, and it settles itself with one script call per outcome:

- :meth:`Lease.ack`: the run ended. After a success (:meth:`Lease.succeeded`) the ack marks the
  job's business key done and records the success; after a failure handed to a retry or kept
  as a dead letter by the task, it only releases the job.
- :meth:`Lease.requeue`: run it again, in its FIFO place (the worker was lost or stops).
- :meth:`Lease.give_back`: the store failed the run's own write; again after a moment, and the
  delivery is not counted toward the poison limit.
- :meth:`Lease.dead_letter`: the worker cannot run it (malformed, unknown task, rejected).

kombu's ``Message`` acks and rejects through its channel, so a lease is its own message's
channel (:meth:`basic_ack`, :meth:`basic_reject`): Celery's request settles it as it would a
broker message. A :class:`LeaseHolder` (the dispatcher) may take an ack to send with its next
claim, one round trip for many. Who writes the done marker is decided here: the ack of a
succeeded lease, or the task itself when its lease says the ack will not (see
:class:`~celery_fairqueue.protocol.LeaseTicket`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import FairqueueError
from ...protocol import NO_JOB_KEY, LeaseTicket
from ..formats.keys import Keys

logger = logging.getLogger(__name__)

#: How long a job waits after its run could not write to the store: long enough that a full or
#: read-only Redis is not asked again at once, short enough to go unnoticed after a failover.
GIVE_BACK_SECONDS = 1.0


class LeaseHolder(Protocol):
    """What holds leases for a worker: the dispatcher (the inline runner holds none)."""

    def released(self, lease: Lease) -> None:
        """``lease`` is no longer held: its slot is free."""

    def ack_later(self, lease: Lease) -> bool:
        """Take ``lease``'s ack to send with the next claim; False: the lease acks at once."""

    def settled(self, lease: Lease, owned: bool) -> None:
        """A store call settled ``lease``; ``owned`` is False when its lease had been lost."""


class Settler(Protocol):
    """The store a lease settles in, one script call per outcome (jobs.Jobs, on the lease's
    shard)."""

    keys: Keys

    def ack(self, lease: Lease) -> bool:
        """Release the job (a success marks its key done); False: its lease was lost."""

    def requeue(self, lease: Lease) -> bool:
        """Give the job back to ready in its FIFO place."""

    def give_back(self, lease: Lease, wait: float) -> bool:
        """Run the job again in ``wait`` seconds, the delivery uncounted."""

    def reject(self, lease: Lease, reason: str) -> bool:
        """Dead-letter the job with ``reason``."""


@dataclass(eq=False)
class Lease:
    """A claimed job, leased to the worker ``token`` until it settles (or its lease expires)."""

    store: Settler = field(repr=False)
    token: str
    queue: str
    account: str
    job_id: str
    envelope: str = field(repr=False)  # the Celery message, as stored (see envelope.py)
    deliveries: int = 1
    stored_key: str = NO_JOB_KEY  # its business key as the store holds it (encoded), or "-"
    #: its idempotency marker (JSON) as it was before the claim wrote the started one; "" none
    marker: str = field(default="", repr=False)
    #: dropped by the claim past Celery's ``expires``: settling it asks nothing of the store
    expired: bool = False
    holder: LeaseHolder | None = field(default=None, repr=False)
    success: bool = False  # its task succeeded: the ack marks its business key done
    settled: bool = False
    outcome: str = ""  # how it settled: "ack", "requeue", "give back" or "dead-letter"

    # -- what Celery's request and the task see ----------------------------------------------

    def ticket(self, acked_after_run: bool) -> LeaseTicket:
        """What the task learns of its lease, from its message's headers (see LeaseTicket)."""
        return LeaseTicket(marker=self.marker, ack_marks_done=acked_after_run)

    def succeeded(self) -> None:
        """The task succeeded: the ack that follows marks the business key done."""
        self.success = True

    # kombu's Message.ack/reject call these on its channel: the lease is that channel
    no_ack_consumers = None

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        self.ack()

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.requeue()
        else:
            self.dead_letter("rejected by the worker (see its log)")

    # -- the outcomes ------------------------------------------------------------------------

    def ack(self) -> None:
        """The run ended: release the job (a success marks its key done, in the same step)."""
        if self._let_go("ack") and not (self.holder and self.holder.ack_later(self)):
            self._settle("ack", lambda store: store.ack(self))

    def requeue(self) -> None:
        """Run it again, in its FIFO place."""
        if self._let_go("requeue"):
            self._settle("requeue", lambda store: store.requeue(self))

    def give_back(self, wait: float = GIVE_BACK_SECONDS) -> None:
        """The store failed the run's own write: again after ``wait`` s, uncounted."""
        if self._let_go("give back"):
            self._settle("give back", lambda store: store.give_back(self, wait))

    def dead_letter(self, reason: str) -> None:
        """Keep it as a dead letter with ``reason``: it cannot be run."""
        if self._let_go("dead-letter"):
            self._settle("dead-letter", lambda store: store.reject(self, reason))

    def ack_args(self, queue_index: int) -> list[Any]:
        """The job as the claim and ack scripts take an ack (see ack_job in lib/leases.lua)."""
        return [queue_index, self.job_id, self.stored_key, "1" if self.success else "0"]

    def _let_go(self, doing: str) -> bool:
        """Stop holding the lease, once; False when it settled already or needs no store call
        (expired)."""
        if self.settled:
            logger.warning("fairqueue: %s of job %s, which settled already", doing, self.job_id)
            return False
        self.settled = True
        self.outcome = doing
        if self.holder is not None:
            self.holder.released(self)
        return not self.expired

    def _settle(self, doing: str, call: Callable[[Settler], bool]) -> None:
        try:
            owned = call(self.store)
        except FairqueueError as exc:
            # the lease will expire and the reaper returns the job: at least once, not lost
            logger.warning("fairqueue: could not %s job %s (its lease returns it): %s", doing,
                           self.job_id, exc)
            owned = True
        if not owned:
            lost_before_settled(self.job_id)
        if self.holder is not None:
            self.holder.settled(self, owned)


def lost_before_settled(job_id: str) -> None:
    logger.warning("fairqueue: job %s lost its lease before it settled (it ran longer than "
                   "fairqueue_lease_seconds without a heartbeat and was given to another "
                   "worker)", job_id)
