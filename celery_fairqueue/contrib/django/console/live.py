"""What the console reads from the fair store (Redis), for the accounts on a page.

Every read here may find the store down: it then answers with nothing and the reason in words,
so the database-backed rest of the page still renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from celery import Celery

from ....errors import FairqueueError
from ....store import (
    ConsoleReader,
    EventReader,
    LiveJob,
    QueueState,
    QueueStatus,
    StoreInspector,
    StreamLag,
    WorkerInfo,
    store_for,
)


@dataclass
class AccountLive:
    """One account as the store sees it now."""

    states: list[QueueState] = field(default_factory=list)
    jobs: list[LiveJob] = field(default_factory=list)
    server_time: float | None = None
    error: str | None = None  # why the store could not be read


@dataclass
class StoreLive:
    """The overview's live part: reasons of the page's accounts, queues and workers."""

    states: dict[str, list[QueueState]] = field(default_factory=dict)
    queues: list[QueueStatus] = field(default_factory=list)
    oldest: dict[str, float | None] = field(default_factory=dict)
    workers: list[WorkerInfo] = field(default_factory=list)
    recording: list[StreamLag] = field(default_factory=list)  # each event stream's lag
    server_time: float | None = None
    error: str | None = None


def account_live(app: Celery, account: str, jobs: int = 50) -> AccountLive:
    """Per queue state of ``account`` with its reason, and its jobs in the store: read on
    the account's shard alone."""
    try:
        reader = ConsoleReader(store_for(app))
        return AccountLive(reader.account_state(account), reader.live_jobs(account, jobs),
                           reader.server_time())
    except (FairqueueError, ValueError) as exc:  # ValueError: an id the store cannot hold
        return AccountLive(error=str(exc))


def store_live(app: Celery, accounts: list[str]) -> StoreLive:
    """States of ``accounts`` (each read on its shard), per-queue totals with their oldest
    waiting age, live workers and the recorders' lag (every shard's)."""
    live = StoreLive()
    try:
        inspector = StoreInspector(app)
        live.server_time = inspector.console.server_time()
        names = inspector.queues()
        status = inspector.status(names, deferred_limit=1)  # every shard's, added up
        live.queues = status.queues
        live.oldest = {queue.queue: queue.oldest_waiting for queue in status.queues}
        live.workers = status.workers
        live.recording = EventReader(inspector.store, "console").lag()
        for account in accounts:
            try:  # the queues and workers read once for the page, not once per account
                live.states[account] = inspector.console.account_state(
                    account, names, workers=live.workers) if names else []
            except ValueError:  # an id longer than the store holds: never in Redis
                live.states[account] = []
    except FairqueueError as exc:
        live.error = str(exc)
    return live


def unserved_queues(live: StoreLive) -> list[str]:
    """Queues with ready jobs that no live worker consumes."""
    served = {queue for worker in live.workers for queue in worker.queues}
    return [q.queue for q in live.queues if q.ready and q.queue not in served]
