"""One claim of a worker across a sharded store's shards: which shards it asks, in which order,
and what it keeps of each answer.

The chooser (chooser.py) names the shards by their runnable weights; each shard's claim leases
what it can of the jobs still wanted, with the worker's acks of that shard riding along; the
grants of the queues' shared limits (quota.py) are taken before the first shard is asked and
what they left goes back after the last. A shard that fails is left out for a moment: what the
others answered is kept, and the acks it did not settle come back in ``Claim.unsettled``; only
when no shard answered does the claim raise, as a claim of one store does.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ...errors import FairqueueError
from ..writers.jobs import Claim
from ..writers.leases import Lease
from .chooser import ShardChooser
from .quota import Grants, SharedQuotas
from .shard import FairStore


@dataclass(frozen=True)
class Shards:
    """What a claim spans: the shards, the worker's chooser, the shard of each hash tag, and
    the queues' shared limits at the home (sharded.py keeps them)."""

    shards: list[FairStore]
    chooser: ShardChooser
    by_tag: dict[str, int]
    quotas: SharedQuotas


class ShardedClaim:
    """The state of one claim of ``want`` jobs from ``queues`` over the ``store``'s shards."""

    def __init__(self, store: Shards, queues: Sequence[str], token: str,
                 default_limit: str, first: int, keeps_time: bool) -> None:
        self.store, self.queues, self.token = store, queues, token
        self.default_limit, self.first, self.keeps_time = default_limit, first, keeps_time
        self.by_shard: dict[int, list[Lease]] = {}  # acks not settled yet, by shard
        self.leases: list[Lease] = []
        self.expired: list[Lease] = []
        self.lost: list[str] = []
        self.unsettled: list[Lease] = []
        self.failure: FairqueueError | None = None
        self.answered = False
        self.runnable = 0

    def run(self, want: int, acks: Sequence[Lease], tick: bool) -> Claim:
        store, chooser = self.store, self.store.chooser
        ticking = chooser.due_shards(time.monotonic()) if tick and want <= 0 else []
        for lease in acks:
            self.by_shard.setdefault(store.by_tag[lease.store.keys.tag], []).append(lease)
        grants: Grants | None = None  # taken once a shard is to be asked
        waits_for_grant = False  # every queue at its shared limit: nothing to ask of a shard
        tried: set[int] = set()
        while want > len(self.leases):
            now = time.monotonic()
            # before the grants: would any shard be asked, were every limited queue granted?
            eligible = grants.eligible() if grants is not None else store.quotas.queues
            n = chooser.pick(now, tried, settling=self.by_shard, batch=want - len(self.leases),
                             eligible=eligible)
            if n is None:
                break
            if grants is None:
                grants = store.quotas.take(self.queues, want, self.token, self.keeps_time)
                if all(queue in grants.left for queue in self.queues):  # each has a grant
                    want = min(want, sum(grants.left.values()))
                    if not want:
                        waits_for_grant = True
                        break
                continue  # chosen again with the grants it got
            tried.add(n)
            got = self._ask(n, want - len(self.leases), now, grants.for_claim(self.queues),
                            grants.eligible())
            if got is not None:
                grants.used(self.queues, got.granted)
                self.leases += got.leases
                self.expired += got.expired
                self.runnable += got.runnable
        for n in ticking:
            self._ask(n, 0, time.monotonic(), [], ())
        for n, settling in self.by_shard.items():  # acks of shards not claimed from
            try:
                self.lost += store.shards[n].claim([], 0, self.token, "", acks=settling).lost
                self.answered = True
            except FairqueueError as exc:
                self.unsettled += settling
                self.failure = self.failure or exc
        if grants is None:  # no shard asked: its running jobs of a queue said, if they changed
            grants = store.quotas.take(self.queues, 0, self.token, self.keeps_time)
        store.quotas.settle(grants, self.leases, self.token, self.keeps_time)
        if self.failure is not None and not self.answered:
            raise self.failure
        # the shards' due times wait for the grant too: a due shard is asked at its next claim
        next_due = grants.wait if waits_for_grant else grants.ask_again(
            chooser.next_due(time.monotonic()))
        return Claim(self.leases, next_due,
                     runnable=self.runnable, expired=self.expired, lost=self.lost,
                     unsettled=self.unsettled, failure=self.failure)

    def _ask(self, n: int, wanted: int, now: float, grants: list[int | None],
             eligible: Collection[str]) -> Claim | None:
        """Shard ``n``'s claim of ``wanted`` jobs (0: the keeper's tick), its acks riding; None
        when it failed (left out for a moment)."""
        riding = self.by_shard.pop(n, [])
        try:
            got = self.store.shards[n].claim(
                self.queues, wanted, self.token, self.default_limit, self.first, riding,
                keeps_time=self.keeps_time, tick=not wanted, grants=grants)
        except FairqueueError as exc:
            self.store.chooser.failed(n, now)
            self.unsettled += riding
            self.failure = self.failure or exc
            return None
        self.answered = True
        self.store.chooser.claimed(n, len(got.leases), got.runnable, got.next_due, now,
                                   dict(zip(self.queues, got.waiting, strict=False)), eligible)
        self.lost += got.lost
        return got
