"""Waiting for work without polling: the scripts PUBLISH on a queue's wake channel when its
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

from .client import translate
from .core import FairStore


class WakeSubscription:
    """A subscription to the wake channels of some queues, on a connection of its own."""

    def __init__(self, store: FairStore, queues: Sequence[str]) -> None:
        self._url = store.settings.redis_url or ""
        self._pubsub: Any = None
        self._reconnected = False
        channels = [store.keys.queue(queue).wake for queue in queues]
        try:
            self._pubsub = store.client.pubsub(ignore_subscribe_messages=True)
            # redis-py reconnects a dropped subscription by itself, inside get_message, and
            # subscribes again in on_connect (a callback it holds weakly: a bound method)
            self._pubsub.on_connect = self._on_connect
            self._pubsub.subscribe(*channels)
        except redis.RedisError as exc:
            self.close()
            raise translate(exc, self._url, "SUBSCRIBE (wake-ups)") from exc

    def _on_connect(self, connection: Any) -> None:
        type(self._pubsub).on_connect(self._pubsub, connection)
        self._reconnected = True  # a signal sent while it was away was missed

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when some queue signalled work, or when the
        subscription was made again (what was signalled meanwhile is lost)."""
        try:
            woken = False
            message = self._pubsub.get_message(timeout=timeout)
            while message is not None:  # drain: many signals, one claim
                woken = woken or message.get("type") in ("message", "smessage")
                message = self._pubsub.get_message(timeout=0)
            if self._reconnected:
                self._reconnected, woken = False, True
            return woken
        except redis.RedisError as exc:
            raise translate(exc, self._url, "wake-up subscription") from exc

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError):  # the connection is gone already
                self._pubsub.close()
            self._pubsub = None
