"""The one vocabulary of account states, shared by the store's views, both CLIs, the console
and the metrics: an account is *ready*, *deferred* by its limit (rate limited, window closed,
at its concurrency cap; until when) or by its provider's "slow down" (*slowed*: a 429 or 503
with Retry-After, SlowDown; until when), or *paused* by an operator (who, when, why); while
``fairqueue reshard`` moves it to another shard, it is *moving*. A ready account whose queue is
at its shared limit (set_queue_limit) keeps its turn and waits with the queue: *queue quota*.

Imports nothing of the package, so the store (at the bottom of the import graph) and the
reports above it read the same names and the same labels.
"""

from __future__ import annotations

from enum import StrEnum


class AccountState(StrEnum):
    """Where an account stands in one queue's rotation."""

    READY = "ready"  # in the rotation
    DEFERRED = "deferred"  # skipped by the claim until its limit lets it run (DeferReason)
    PAUSED = "paused"  # taken out of the rotation by an operator until resumed
    IDLE = "idle"  # nothing ready

    @property
    def label(self) -> str:
        return _STATE_LABELS[self]


class DeferReason(StrEnum):
    """Why the claim deferred an account (it records this where it decides: claim.lua)."""

    RATE_LIMITED = "rate_limited"
    WINDOW_CLOSED = "window_closed"
    CONCURRENCY_CAP = "concurrency_cap"
    SLOWED = "slowed"  # the provider asked to slow down (slowdown.py), the account or its queue

    @property
    def label(self) -> str:
        return _REASON_LABELS[self]


class Reason(StrEnum):
    """Why an account's next job does not run now, as the console and ``fairqueue accounts``
    explain it: a deferral's reason, an operator's pause, or the queue's own circumstances."""

    RUNNABLE = "runnable"
    NO_READY_JOBS = "no_ready_jobs"
    RATE_LIMITED = DeferReason.RATE_LIMITED.value
    WINDOW_CLOSED = DeferReason.WINDOW_CLOSED.value
    CONCURRENCY_CAP = DeferReason.CONCURRENCY_CAP.value
    SLOWED = DeferReason.SLOWED.value
    PAUSED = AccountState.PAUSED.value
    MOVING = "moving"  # frozen by `fairqueue reshard` while it moves to another shard
    QUEUE_QUOTA = "queue_quota"  # ready, but its queue is at its shared limit (set_queue_limit)
    NO_WORKER = "no_worker"

    @property
    def label(self) -> str:
        return _REASON_LABELS[self]


_STATE_LABELS = {
    AccountState.READY: "ready",
    AccountState.DEFERRED: "deferred",
    AccountState.PAUSED: "paused",
    AccountState.IDLE: "idle",
}
_REASON_LABELS: dict[str, str] = {
    "runnable": "Runnable",
    "no_ready_jobs": "No ready jobs",
    "rate_limited": "Deferred: rate limited",
    "window_closed": "Deferred: window closed",
    "concurrency_cap": "Deferred: at its concurrency cap",
    "slowed": "Deferred: the provider asked to slow down",
    "paused": "Paused by an operator",
    "moving": "Moving to another shard",
    "queue_quota": "Waiting: its queue is at its shared limit",
    "no_worker": "No worker",
}

#: The one-letter codes of a queue's state hash (QueueKeys.state), as the scripts write them.
#: "p" is a deferral (the letter predates the vocabulary; stored data keeps it), "o" an
#: operator's pause, "c" a deferral at the concurrency cap.
STATE_CODES: dict[str, tuple[AccountState, DeferReason | None]] = {
    "r": (AccountState.READY, None),
    "p": (AccountState.DEFERRED, None),  # its reason: the claim's deferral record
    "c": (AccountState.DEFERRED, DeferReason.CONCURRENCY_CAP),
    "o": (AccountState.PAUSED, None),
}

#: Counters of the store (Keys.stats) and what each counts, in these words.
ACCOUNTS_READY = "Accounts ready"
ACCOUNTS_DEFERRED = "Accounts deferred"
ACCOUNTS_PAUSED = "Accounts paused"


def ready_and_deferred(nready: int, code: str | None) -> tuple[int, int]:
    """An account's ready jobs (``nready``, its code in the state hash) split as
    ``fairqueue accounts`` and its ``--account`` view (and the console) count them:
    (ready for the rotation, deferred). Deferred until a time by its rate or window ("p"), all
    its ready jobs wait for that time; at its concurrency cap they stay ready."""
    deferred = nready if code == "p" else 0
    return nready - deferred, deferred
