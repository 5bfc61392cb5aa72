"""Which shard a worker claims from next: stride scheduling by each shard's runnable weight.

Each claim returns its shard's runnable weight W (the summed weights of its accounts that can
run now). A shard's pass moves on by jobs / W for the jobs claimed there, and the worker claims
from the shard of the lowest pass: so each shard gets jobs in proportion to its W, and within
a shard its rotation gives each account jobs in proportion to its weight, so an account's share
of the whole store is its weight over the sum, wherever it lives. A shard that comes back to
work joins at the lowest pass of those that have work: it neither banks turns while idle nor
jumps the others, as an account joins its rotation.

A shard of unknown weight is asked first: never asked yet, woken by its doorbell (new work),
believed empty and due (a deferred account or delayed job), or one believed empty, in turn,
at each of the worker's polls (``rescan``: a missed ring). A shard believed empty is not
asked again on its own: its doorbell rings when it gains work (worker/doorbell.py), and
asking every empty shard once a poll interval made each worker's cost grow with the shards
and the fleet. A shard with
work waits for its pass, however long ago it was asked: were it asked first once stale, they
would take turns, not shares; its weight is brought up to date when its pass comes.

A queue at its shared limit (quota.py) keeps its weight apart while it waits for the worker's
next grant (``waiting``): it counts only in a claim that holds a grant of it (``eligible``), so
a worker of two queues does not ask every shard of the waiting one for the other's jobs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

#: How long a worker leaves out a shard whose claim failed (a failover under way, say).
RETRY_FAILED_SECONDS = 1.0


class ShardChooser:
    """One worker's view of its shards' runnable weights, and its choice among them."""

    def __init__(self, shards: int) -> None:
        self.weights: list[int | None] = [None] * shards  # None: unknown, ask it
        self.waiting: list[dict[str, int]] = [{} for _ in range(shards)]  # queue -> weight
        self.passes = [0.0] * shards
        self.due = [math.inf] * shards  # monotonic time a shard's deferred work is due
        self.asked = [-math.inf] * shards  # monotonic time it was last asked
        self._rescanned = 0  # the shard the next rescan starts from

    def _unknown(self, n: int, now: float) -> bool:
        weight = self.weights[n]
        if weight is None:
            return True
        return weight <= 0 and self.due[n] <= now

    def _weight(self, n: int, eligible: Collection[str]) -> int:
        """Shard ``n``'s runnable weight for a claim holding grants of ``eligible``."""
        waiting = sum(w for queue, w in self.waiting[n].items() if queue in eligible)
        return (self.weights[n] or 0) + waiting

    def pick(self, now: float, tried: set[int], settling: Collection[int] = (),
             batch: int = 1, eligible: Collection[str] = ()) -> int | None:
        """The shard to claim from now, none of ``tried``; None when none has work. A shard
        this worker has acks for (``settling``) goes first while its pass is within one claim
        of ``batch`` jobs of the lowest: the acks ride on that claim instead of a call of
        their own, and no shard gets ahead by more than one claim. ``eligible``: the queues
        waiting for a grant that this claim holds one of."""
        candidates = [n for n in range(len(self.weights)) if n not in tried]
        unknown = [n for n in candidates if self._unknown(n, now)]
        if unknown:
            return min(unknown, key=lambda n: (self.asked[n], n))
        weight = {n: self._weight(n, eligible) for n in candidates}
        runnable = [n for n in candidates if weight[n] > 0]
        if not runnable:
            return None
        lowest = min(self.passes[n] for n in runnable)
        riding = [n for n in runnable if n in settling
                  and self.passes[n] - lowest <= batch / weight[n]]
        return min(riding or runnable, key=lambda n: (self.passes[n], n))

    def claimed(self, n: int, jobs: int, runnable: int, next_due: float | None,
                now: float, waiting: Mapping[str, int] | None = None,
                eligible: Collection[str] = ()) -> None:
        """A claim on shard ``n`` leased ``jobs`` and left it ``runnable`` by weight, and
        ``waiting`` by the weight of each queue that waits for a grant (``eligible``: those it
        held one of); its next deferred account or delayed job is due in ``next_due``
        seconds."""
        unknown, before = self.weights[n] is None, self._weight(n, eligible)
        self.weights[n] = runnable
        self.waiting[n] = {queue: w for queue, w in (waiting or {}).items() if w > 0}
        after = self._weight(n, eligible)
        if before <= 0 < after or unknown:  # back to work: no banked turns
            others = [self.passes[k] for k in range(len(self.weights))
                      if k != n and self._weight(k, eligible) > 0]
            if others:
                self.passes[n] = max(self.passes[n], min(others))
        self.passes[n] += jobs / max(after, before, 1)
        self.asked[n] = now
        self.due[n] = now + next_due if next_due is not None else math.inf

    def due_shards(self, now: float) -> list[int]:
        """The shards whose deferred account or delayed job is due (the time keeper's tick)."""
        return [n for n, due in enumerate(self.due) if due <= now]

    def woken(self, n: int) -> None:
        """Shard ``n``'s doorbell rang: believed empty, its weight is unknown until it is
        asked; one known to have work waits for its pass (a claim that leaves work rings too,
        and its ring must not jump the stride order)."""
        if not self.weights[n]:
            self.weights[n] = None

    def failed(self, n: int, now: float) -> None:
        """Shard ``n`` did not answer: ask it again in a second (the claim goes on without)."""
        self.weights[n] = 0
        self.due[n] = now + RETRY_FAILED_SECONDS

    def forget(self) -> None:
        """Every shard's weight is unknown (an operator's change may have made work runnable;
        the other workers learn it from the doorbells)."""
        self.weights = [None] * len(self.weights)

    def rescan(self) -> None:
        """The worker's poll: the next shard believed empty, in turn, is asked at its next
        claim (its ring may have been lost: the time keeper's sweep rings again for every
        shard, this is the fallback's fallback); one known to have work keeps its pass. One
        shard a poll, not all: every shard asked by every worker once a poll interval is a
        cost that grows with the shards and the fleet."""
        count = len(self.weights)
        for step in range(count):
            n = (self._rescanned + step) % count
            if not self.weights[n]:
                self.weights[n] = None
                self._rescanned = n + 1
                return

    def next_due(self, now: float) -> float | None:
        """Seconds until some shard's deferred account or delayed job is due (as a claim of one
        store says), or None."""
        due = min(self.due)
        return max(0.0, due - now) if due < math.inf else None
