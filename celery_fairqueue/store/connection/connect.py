"""The store's client for a URL: one Redis, a sentinel-managed primary or a Redis Cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import redis
from redis.backoff import ExponentialBackoff
from redis.connection import Encoder, HiredisRespSerializer, PythonRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:  # an optional speed-up (the django extra brings it)
    import hiredis

from .client import StoreClient
from .cluster import StoreClusterClient, cluster_client
from .sentinel import is_sentinel_url, sentinel_client

#: The store's client: one server (or a sentinel-managed primary), or a Redis Cluster.
AnyClient: TypeAlias = "StoreClient | StoreClusterClient"


#: redis-py's own (Connection._buffer_cutoff): longer arguments go out as separate buffers.
BUFFER_CUTOFF = 6000


class HiredisPacker(HiredisRespSerializer):
    """redis-py's packer with hiredis, without its own pass in Python over every argument
    first: a script call of the store carries two dozen keys and arguments (an enqueue), and
    that pass cost about 10 us a call, five times hiredis's packing. hiredis packs str (as
    UTF-8), bytes, int and float as redis-py does; a command name of two words ("SCRIPT
    LOAD"), a str that is not UTF-8 (a lone surrogate), a bool, a memoryview or any other
    value is packed by redis-py's own code, its errors too."""

    def pack(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (" " not in name) if isinstance(name, str) else (b" " not in name):
            try:
                return [hiredis.pack_command(args)]
            except (TypeError, UnicodeEncodeError):
                pass
        packed: list[bytes] = super().pack(*args)
        return packed

    @classmethod
    def for_options(cls, options: Mapping[str, Any]) -> HiredisPacker:
        """The packer of a client made with ``options`` (its encoding), as redis-py makes its
        own (Connection._construct_command_packer)."""
        encode = Encoder(options.get("encoding", "utf-8"), options["encoding_errors"],
                         options["decode_responses"]).encode
        return cls(PythonRespSerializer(BUFFER_CUTOFF, encode).pack, encode)


def make_client(url: str, socket_timeout: float = 10.0, retries: int = 6,
                transport_options: Mapping[str, Any] | None = None) -> AnyClient:
    """A store client that retries dropped connections and timeouts with backoff. Replies are
    decoded as UTF-8 with surrogate escapes, so one stored value that is not UTF-8 cannot make
    a whole reply (a claim of many jobs) undecodable.

    A ``sentinel://`` URL gives a client of the primary that the sentinels name
    (``transport_options``: ``master_name``, optional ``sentinel_kwargs`` and
    ``min_other_sentinels``, and the primary's password and TLS). Each new connection asks the
    sentinels where the primary is; a connection that meets a demoted primary (READONLY) drops
    itself, so the retry of that command, or the next command, reaches the new primary.

    A ``redis+cluster://`` (``rediss+cluster://``) URL gives a Redis Cluster client (see
    cluster.py); ``transport_options`` then hold the nodes' password and TLS options."""
    options: dict[str, Any] = dict(
        decode_responses=True,
        encoding_errors="surrogateescape",
        socket_timeout=socket_timeout,
        socket_connect_timeout=min(5.0, socket_timeout),
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    client: AnyClient
    if is_sentinel_url(url):
        client = sentinel_client(url, dict(transport_options or {}), options)
    elif url.startswith(("redis+cluster://", "rediss+cluster://")):
        client = cluster_client(url, transport_options or {}, options, retries)
    else:
        if HIREDIS_AVAILABLE:  # the store's hot path packs its script calls itself
            options["command_packer"] = HiredisPacker.for_options(options)
        client = StoreClient.from_url(url, **options)  # type: ignore[assignment]
    client.store_url = url
    return client


def is_cluster(client: AnyClient) -> bool:
    """Whether ``client`` is a Redis Cluster's (see cluster.py)."""
    return not isinstance(client, StoreClient)


