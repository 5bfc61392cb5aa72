"""An idle worker's wait for work: a blocking pop on its queues' doorbells.

The scripts ring a queue's doorbell (a sorted set per queue and shard, QueueKeys.bell) when its
rotation gains work that nobody is claiming, and a claim that leaves work rings once more; idle
workers block on the doorbells with one BZPOPMIN, so Redis hands each ring to exactly one of
them.
The queue's time keeper also blocks on its calls (QueueKeys.clock). A ring can still be lost
(a worker killed right after it took one): the keeper's sweep rings again for work nobody came
for (DoorbellWait.sweep), and every worker still polls, seldom, as a fallback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import redis
from redis.exceptions import RedisClusterException

from ..connection.connect import is_cluster, make_client
from ..connection.translate import translate
from ..shards.shard import FairStore

#: How much longer than the longest BZPOPMIN the waiting connection's socket waits for a reply.
SOCKET_MARGIN_SECONDS = 5.0


class DoorbellWait:
    """Blocking pops on the store's doorbells, on a connection of its own (a BZPOPMIN holds
    its connection for as long as it waits)."""

    def __init__(self, store: FairStore, longest_wait: float) -> None:
        self._url = store.settings.redis_url or ""
        self.store = store
        self._client = make_client(self._url, socket_timeout=longest_wait + SOCKET_MARGIN_SECONDS,
                                   retries=1,
                                   transport_options=store.settings.redis_transport_options)
        self._id: int | None = None  # the waiting connection's CLIENT ID (one Redis only)

    @staticmethod
    def shards_of(store: FairStore) -> list[list[FairStore]]:
        """The store's shards in groups whose doorbells one BZPOPMIN can wait on: all of them
        on one Redis, each alone on a cluster (a blocking pop waits on one slot's keys)."""
        if is_cluster(store.client):
            return [[shard] for shard in store.shards]
        return [list(store.shards)]

    @staticmethod
    def groups_of(store: FairStore, queues: Sequence[str], keeps_time: bool, *,
                  bells: bool = True) -> list[list[str]]:
        """The doorbells of ``queues`` (``bells``) and their time keeper's calls (when the
        worker ``keeps_time``), by group of :meth:`shards_of`."""
        return [[key for shard in shards for key in shard.doorbells(queues, keeps_time, bells)]
                for shards in DoorbellWait.shards_of(store)]

    def wait(self, keys: Sequence[str], timeout: float) -> tuple[str, float] | None:
        """Block up to ``timeout`` seconds for a ring on one of ``keys``; the doorbell that rang
        (the store learns which shard's: ShardedStore.woken) and the ring's score (a call on a
        queue's clock: the due time it was made for, on Redis's clock), or None."""
        try:
            if self._id is None and not is_cluster(self._client):
                self._id = int(self._client.client_id())
            popped = self._client.bzpopmin(list(keys), timeout=timeout)
        except (redis.RedisError, RedisClusterException) as exc:
            raise translate(exc, self._url, "BZPOPMIN (doorbell)") from exc
        if not popped:
            return None
        key = str(popped[0])
        self.store.woken(key)
        return key, float(popped[2])

    def sweep(self, shards: Sequence[FairStore], queues: Sequence[str]) -> None:
        """Ring each doorbell of ``queues`` on ``shards`` whose rotation holds accounts that
        may run now, unless a ring waits there already (one ring, as lib/rotation.lua's
        ``ring``): two pipelined reads and writes, not a script a shard. The time keeper's
        sweep for a lost ring, and a ring given back by a worker that cannot use it."""
        pairs = [shard.keys.queue(queue) for shard in shards for queue in queues]
        try:
            pipe = self.store.client.pipeline(transaction=False)
            for qk in pairs:
                pipe.zcard(qk.tags)
            with_work = [qk for qk, count in zip(pairs, pipe.execute(), strict=True) if count]
            if with_work:
                pipe = self.store.client.pipeline(transaction=False)
                for qk in with_work:
                    pipe.zadd(qk.bell, {"1": 0}, nx=True)
                pipe.execute()
        except (redis.RedisError, RedisClusterException) as exc:
            raise translate(exc, self._url, "doorbell sweep") from exc

    def interrupt(self) -> None:
        """End the wait under way at once (CLIENT UNBLOCK), so the next one waits on other
        keys: a worker that became its queues' time keeper hears their calls from now on. On a
        cluster the wait ends at its timeout instead."""
        if self._id is not None:
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                self.store.client.client_unblock(self._id)

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            self._client.close()
