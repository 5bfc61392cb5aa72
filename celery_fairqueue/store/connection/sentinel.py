"""A store behind Redis Sentinel: ``sentinel://`` URLs as Celery and kombu write them, the
sentinels' options, and a pool that follows a failover of a primary that is still up."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import redis
from kombu.utils.url import maybe_sanitize_url
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from ...errors import ConfigurationError
from .client import CONNECTION_OPTIONS, StoreClient

#: ``fairqueue_redis_transport_options`` that configure Sentinel itself.
SENTINEL_OPTIONS = ("master_name", "sentinel_kwargs", "min_other_sentinels")
SENTINEL_PORT = 26379
#: How often a sentinel-managed store asks the sentinels whether the primary moved while its
#: connections still work (see :class:`StoreSentinelPool`).
MASTER_CHECK_SECONDS = 1.0


def is_sentinel_url(url: str) -> bool:
    return url.startswith("sentinel://")


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The sentinels of a ``sentinel://`` URL as Celery and kombu write it
    (``sentinel://:pw@h1:26379;sentinel://:pw@h2:26380/0``, one part per sentinel), and the
    options the parts give for the primary: its password (and username) and database. A part
    without a port means 26379. Where parts disagree, the first that gives an option wins."""
    sentinels: list[tuple[str, int]] = []
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in url.split(";"))):
        if not is_sentinel_url(part):
            raise ConfigurationError(
                f"fairqueue_redis_url: {maybe_sanitize_url(part)!r} is not a sentinel:// part; "
                "write sentinel://host:26379;sentinel://host2:26379/0")
        try:
            parsed = parse_url("redis://" + part.removeprefix("sentinel://"))
        except ValueError as exc:
            raise ConfigurationError(f"fairqueue_redis_url: {exc}") from None
        sentinels.append((parsed.pop("host", "localhost"), parsed.pop("port", SENTINEL_PORT)))
        for name, value in parsed.items():
            options.setdefault(name, value)
    unknown = sorted(set(options) - set(CONNECTION_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"fairqueue_redis_url: {', '.join(unknown)} cannot be set on a sentinel:// URL "
            f"(the store sets its own timeouts and retries)")
    return sentinels, options


def check_transport_options(options: Mapping[str, Any]) -> None:
    """Raise ConfigurationError, naming the setting, for options a sentinel store cannot use."""
    name = "fairqueue_redis_transport_options"
    if not options.get("master_name"):
        raise ConfigurationError(
            f"{name} must give the master_name that the sentinels monitor when "
            "fairqueue_redis_url is sentinel://, e.g. {'master_name': 'mymaster'}")
    unknown = sorted(set(options) - set(SENTINEL_OPTIONS) - set(CONNECTION_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"{name}: {', '.join(map(repr, unknown))} is not used by the fair store; it takes "
            f"{', '.join(SENTINEL_OPTIONS + CONNECTION_OPTIONS)} (timeouts and retries are the "
            "store's own)")
    if not isinstance(options.get("sentinel_kwargs") or {}, dict):
        raise ConfigurationError(f"{name}: sentinel_kwargs must be a dict")
    tls = sorted(key for key in options if key.startswith("ssl_"))
    if tls and not options.get("ssl"):
        raise ConfigurationError(f"{name}: {', '.join(tls)} need 'ssl': True")


class StoreSentinelPool(SentinelConnectionPool):
    """redis-py's sentinel pool, which asks the sentinels where the primary is only when it
    opens a connection; this one also asks, at most every :data:`MASTER_CHECK_SECONDS`, when it
    hands one out. After a failover of a primary that is still up (``SENTINEL FAILOVER``, or
    a primary cut off from the sentinels) the old primary keeps accepting writes until the
    sentinels demote it, about ten seconds later, and a demotion discards them: without this
    check open connections keep writing there until READONLY. The sentinels not answering the
    check is no reason to fail a command: the connections in hand are kept."""

    _master_checked = float("-inf")

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._master_checked >= MASTER_CHECK_SECONDS:
            self._master_checked = now
            # a new address closes the idle connections; busy ones are closed when released
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                self.get_master_address()
        return super().get_connection(*args, **kwargs)


def sentinel_client(url: str, transport_options: dict[str, Any],
                     options: dict[str, Any]) -> StoreClient:
    check_transport_options(transport_options)
    sentinels, url_options = parse_sentinel_url(url)
    master_name = transport_options.pop("master_name")
    # The sentinels get the store's timeouts too (a hung sentinel must not stall a producer
    # or a worker's loop) and no retries: discover_master asks the next sentinel instead.
    sentinel_kwargs = {
        "socket_timeout": options["socket_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
        "retry": Retry(NoBackoff(), 0),
        **(transport_options.pop("sentinel_kwargs", None) or {}),
    }
    min_other_sentinels = int(transport_options.pop("min_other_sentinels", 0) or 0)
    # the URL's password and database win over the options, as in redis-py's from_url
    connection = {**transport_options, **url_options, **options}
    sentinel = Sentinel(sentinels, min_other_sentinels=min_other_sentinels,
                        sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(
        master_name, redis_class=StoreClient, connection_pool_class=StoreSentinelPool,
        **connection)
