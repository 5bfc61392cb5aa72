"""Upgrading a fair store from the layout before job records.

That layout kept a job in several hashes (``meta``, counted by :func:`legacy_jobs`, among them)
and the idempotency of business keys in three more (``markers``, ``done``, ``jobkeys``); this
version reads none of them, and every job key name changed, so neither version sees the other's
jobs. Jobs stored the old way are drained by workers of the version that stored them: a worker
of this version refuses to start while any is left (:func:`require_current_layout`). The
idempotency records carry over by themselves: the first worker to start adopts them into key
strings (:func:`adopt_legacy_idempotency`), so a business key done before the upgrade still
dedupes for the rest of its retention. See docs/deployment.md, "Upgrading the store layout".
"""

from __future__ import annotations

from ...errors import StoreLayoutError
from ..connection.door import StoreDoor
from ..connection.translate import display_url

ADOPT_BATCH = 1000  # old records a script call adopts: each call is one short script


def legacy_jobs(store: StoreDoor) -> int:
    """How many jobs the store holds in the layout before records."""
    return int(store.client.hlen(store.keys.legacy_jobs))


def adopt_legacy_idempotency(store: StoreDoor, batch: int = ADOPT_BATCH) -> int:
    """Move the idempotency records of the layout before records into key strings (see
    upgrade.lua for what each becomes), ``batch`` records a call, then delete them and the
    layout's leftovers; returns how many key strings were written. Nothing to do (a store
    adopted already, or a new one) costs one EXISTS. Raises :class:`StoreLayoutError`, having
    changed nothing, while the old layout holds jobs: its own workers still use those records.
    Safe to run from several workers at once, and to resume: each call is atomic and takes
    what it adopted out of the old records."""
    legacy = store.keys.legacy
    if not store.client.exists(*legacy):
        return 0
    cursor, adopted = "0", 0
    while True:
        status, value, count = store._run_with_keys(
            "upgrade", legacy, [store.settings.job_retention, batch, cursor])
        if status < 0:
            raise StoreLayoutError(refusal(store, int(value)))
        adopted += int(count)
        if status > 0:
            return adopted
        cursor = str(value)


def require_current_layout(store: StoreDoor) -> int:
    """A worker's check before its first claim: :class:`StoreLayoutError` while the store
    holds jobs of the layout before records, else :func:`adopt_legacy_idempotency` (returns
    how many key strings it wrote)."""
    jobs = legacy_jobs(store)
    if jobs:
        raise StoreLayoutError(refusal(store, jobs))
    return adopt_legacy_idempotency(store)


def refusal(store: StoreDoor, jobs: int) -> str:
    """Why a worker does not start, and what to do."""
    return (
        f"the fair store at {display_url(store.settings.redis_url or '')} holds {jobs} "
        f"job{'' if jobs == 1 else 's'} in the layout of the previous celery-fairqueue version, "
        "which this version does not read. Keep workers of the previous version running until "
        "`celery -A proj fairqueue status` on the previous version shows none, then start "
        "workers of this version (stop producers of the previous version first; producers of "
        "this version may enqueue meanwhile: their jobs wait in the new layout). See "
        "docs/deployment.md, \"Upgrading the store layout\".")
