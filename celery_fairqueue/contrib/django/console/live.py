"""What the console reads from the fair store (Redis), for the accounts on a page.

Every read here may find the store down: it then answers with nothing and the reason in words,
so the database-backed rest of the page still renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from celery import Celery

from ....errors import FairqueueError
from ....limits import AccountLimit as Limit
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
    own_limit: Limit | None = None  # its own limit, even with no job in the store
    default_weight: int = 1  # the store's default limit's weight (1 while unread)

    @property
    def limit(self) -> Limit | None:
        """The account's limit in force: its own (as a queue's state or the store holds it)."""
        return next((s.limit for s in self.states if s.limit and not s.limit_is_default),
                    None) or self.own_limit

    @property
    def weight(self) -> int:
        return self.limit.weight if self.limit else self.default_weight


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
    layout_format: str = "2"  # "1", "1>2": workers of this version claim nothing until "2"


def account_live(app: Celery, account: str, jobs: int = 50) -> AccountLive:
    """Per queue state of ``account`` with its reason, its jobs and its limit in the store:
    everything the account page reads of the store, read at once (on the account's shard,
    and the store's default limit at its home)."""
    try:
        store = store_for(app)
        reader = ConsoleReader(store)
        live = AccountLive(reader.account_state(account), reader.live_jobs(account, jobs),
                           reader.server_time())
        default = store.default_limit()
        live.own_limit = store.get_limit(account)
        live.default_weight = default.weight if default else 1
        return live
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
        live.layout_format = status.layout_format
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
