"""Waiting for work without polling: the scripts publish on a queue's wake channel when its
rotation goes from empty to not (a claim: only when it leaves that work to others), and when a
delayed job becomes the first due; an idle worker waits on the channels of its queues.

A message can be missed (the subscription was down when it was sent), so a worker claims once
after every (re)subscription and still polls, seldom, as a fallback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ..connection.connect import is_cluster
from ..connection.translate import translate
from ..shards.shard import FairStore


class WakeSubscription:
    """A subscription to the wake channels of some queues on every shard, on a connection of
    its own: plain pub/sub on one Redis, sharded pub/sub (SSUBSCRIBE) on a cluster, where each
    shard's channel lives with its slot (a plain PUBLISH there is copied to every node)."""

    def __init__(self, store: FairStore, queues: Sequence[str]) -> None:
        self._url = store.settings.redis_url or ""
        self._pubsub: Any = None
        self._reconnected = False
        self._sharded = is_cluster(store.client)
        self._store = store
        self.shards = len(store.shards)  # a reshard adds shards: subscribe again (Wakeups)
        channels = [shard.keys.queue(queue).wake for shard in store.shards for queue in queues]
        try:
            self._pubsub = store.client.pubsub(ignore_subscribe_messages=True)
            if self._sharded:
                self._pubsub.ssubscribe(*channels)  # redis-py follows the slots' moves
            else:
                # redis-py reconnects a dropped subscription by itself, inside get_message,
                # and subscribes again in on_connect (a callback it holds weakly: a bound
                # method)
                self._pubsub.on_connect = self._on_connect
                self._pubsub.subscribe(*channels)
        except (redis.RedisError, RedisClusterException) as exc:
            self.close()
            raise translate(exc, self._url, "SUBSCRIBE (wake-ups)") from exc

    def _on_connect(self, connection: Any) -> None:
        type(self._pubsub).on_connect(self._pubsub, connection)
        self._reconnected = True  # a signal sent while it was away was missed

    def _next(self, timeout: float) -> Any:
        if self._sharded:
            return self._pubsub.get_sharded_message(ignore_subscribe_messages=True,
                                                    timeout=timeout)
        return self._pubsub.get_message(timeout=timeout)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when some queue signalled work, or when the
        subscription was made again (what was signalled meanwhile is lost). The store learns
        which shards signalled (ShardedStore.woken)."""
        try:
            woken = False
            message = self._next(timeout)
            while message is not None:  # drain: many signals, one claim
                if message.get("type") in ("message", "smessage"):
                    woken = True
                    self._store.woken(str(message.get("channel") or ""))
                message = self._next(0)
            if self._reconnected:
                self._reconnected, woken = False, True
            return woken
        except (redis.RedisError, RedisClusterException) as exc:
            raise translate(exc, self._url, "wake-up subscription") from exc

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                self._pubsub.close()  # the connection is gone already
            self._pubsub = None
