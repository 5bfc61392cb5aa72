"""A queue's shared limit in a sharded store: the grants a worker takes at the store's home
before it claims, and gives back when its claims did not use them (scripts/quota.lua).

An account lives on one shard and a queue spans them all, and no claim sees two shards at once
(on a Redis Cluster they are on other nodes), so a queue's shared limit (``set_queue_limit``)
is kept in one place, the home: its token bucket, and the jobs each worker runs under it.
Before a claim that wants jobs of a queue known to have one, the worker takes a grant there
(one call for all such queues); the shards' claims lease at most what is left of it, each in
its own fair order; what they did not use goes back at the end of the claim, in a second
call, made only then. The waiting accounts keep their turns and the workers choose shards by
their runnable weights (chooser.py), so a binding quota is shared by the accounts' weights,
wherever they live.

Why not a bucket per shard: a shard's share of the queue would have to follow how many of its
accounts wait, which changes with every job; a share left idle on one shard is a rate lost to
all. The grant is exact by construction (the home's bucket never gives more than its rate and
burst), and its cost is one call at the home for each claim of a worker that wants the queue.

Each call reports the worker's running jobs of the queue (its ``held``: the leases its sharded
claims took whose run has not ended), which replaces what it reported before, so the home's
count never drifts; a worker whose jobs ended reports so at its next claim, even one that wants
nothing. A dead worker's count is forgotten with its registration (lib/fleet.lua).

Which queues have one: every shard holds a copy of the limit (set_queue_limit, reshard.py); a
claim that meets a queue whose worker brought no grant leases none of it and says so
(Claim.granted -1), and the worker takes grants from its next claim on, at once; the home
answers -1 once the limit is gone, and the worker stops asking.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ...errors import FairqueueError
from ..writers.leases import Lease
from .shard import FairStore

logger = logging.getLogger(__name__)

#: How long a worker whose grant the home could not give waits before it asks again.
RETRY_SECONDS = 1.0


@dataclass
class Grants:
    """The grants one claim took: jobs left to lease per queue, and when to ask again."""

    left: dict[str, int] = field(default_factory=dict)
    wait: float | None = None  # seconds until a short grant's queue has its next token
    #: queues a shard named as having a shared limit, which this worker took no grant of
    learned: set[str] = field(default_factory=set)

    def eligible(self) -> set[str]:
        """The limited queues this claim may still lease jobs of."""
        return {queue for queue, left in self.left.items() if left > 0}

    def for_claim(self, queues: Sequence[str]) -> list[int | None]:
        """The ``grants`` argument of a shard's claim (Jobs.claim)."""
        return [self.left.get(queue) for queue in queues]

    def used(self, queues: Sequence[str], granted: Sequence[int]) -> None:
        """A shard's claim leased ``granted`` (Claim.granted) of its queues' grants."""
        for queue, used in zip(queues, granted, strict=False):  # none: a store of one shard
            if used < 0:
                self.learned.add(queue)
            elif queue in self.left:
                self.left[queue] -= used

    def ask_again(self, next_due: float | None) -> float | None:
        """When the worker claims again: at once after learning of a limit, or at the next
        token of a short grant's queue if that comes first."""
        if self.learned:
            return 0.0
        if self.wait is None:
            return next_due
        return self.wait if next_due is None else min(next_due, self.wait)


class SharedQuotas:
    """One worker's view of the queues' shared limits of a sharded store, at its ``home``."""

    def __init__(self, home: FairStore) -> None:
        self.home = home
        self.queues: set[str] = set()  # known to have a shared limit
        self._running: dict[str, Lease] = {}  # by job id: leased by a sharded claim
        self._reported: dict[str, int] = {}  # queue -> its running jobs last reported

    def take(self, queues: Sequence[str], want: int, token: str, keeps_time: bool) -> Grants:
        """The grants of a claim of ``want`` jobs from ``queues``: asks the home only for the
        queues known to have a shared limit, and only when the claim wants jobs or this
        worker's running count of one changed since it last said."""
        grants = Grants()
        limited = [queue for queue in queues if queue in self.queues]
        held = self._held()
        asked = [queue for queue in limited
                 if want > 0 or held[queue] != self._reported.get(queue)]
        if not asked:
            return grants
        try:
            reply = self._call(asked, token, keeps_time,
                               [(max(want, 0), held[queue], 0) for queue in asked])
        except FairqueueError as exc:
            logger.warning("fairqueue: the home could not grant jobs of the queues' shared "
                           "limits (%s); claiming none of them for %.0f s", exc, RETRY_SECONDS)
            grants.left = dict.fromkeys(limited, 0)
            grants.wait = RETRY_SECONDS
            return grants
        for queue, (grant, wait) in zip(asked, reply, strict=True):
            if grant < 0:
                self.queues.discard(queue)
                continue
            grants.left[queue] = grant
            self._reported[queue] = held[queue] + grant
            if wait is not None:
                grants.wait = wait if grants.wait is None else min(grants.wait, wait)
        grants.left.update({queue: 0 for queue in limited if queue not in grants.left
                            and queue in self.queues})
        return grants

    def settle(self, grants: Grants, leases: Sequence[Lease], token: str,
               keeps_time: bool) -> None:
        """After the claim: its leases are running, the queues a shard named as limited are
        known, and what the grants left unused goes back to the home (one call, only then)."""
        for lease in leases:
            self._running[lease.job_id] = lease
        self.queues |= grants.learned
        back = {queue: left for queue, left in grants.left.items() if left > 0}
        if not back:
            return
        held = self._held()
        try:
            self._call(list(back), token, keeps_time,
                       [(0, held[queue], left) for queue, left in back.items()])
            self._reported.update((queue, held[queue]) for queue in back)
        except FairqueueError as exc:  # the tokens come back by the bucket's refill
            logger.warning("fairqueue: could not give back %d unused job(s) of the queues' "
                           "shared limits (%s)", sum(back.values()), exc)

    def still_held(self, job_ids: Collection[str]) -> None:
        """The worker's beat: the jobs it holds now (any other was settled or handed back)."""
        held = set(job_ids)
        self._running = {job_id: lease for job_id, lease in self._running.items()
                         if job_id in held}

    def _held(self) -> Counter[str]:
        """This worker's running jobs of each queue: the leases whose run has not ended
        (Lease.settled is set as it ends, before its ack rides on a claim)."""
        self._running = {job_id: lease for job_id, lease in self._running.items()
                         if not lease.settled}
        return Counter(lease.queue for lease in self._running.values())

    def _call(self, queues: list[str], token: str, keeps_time: bool,
              asks: list[tuple[int, int, int]]) -> list[tuple[int, float | None]]:
        home = self.home
        flat = home._run("quota", [home.keys.queue(queue) for queue in queues],
                         [token, "1" if keeps_time else "0",
                          *(value for ask in asks for value in ask)])
        return [(int(flat[n]), None if float(flat[n + 1]) < 0 else float(flat[n + 1]))
                for n in range(0, len(flat), 2)]
