"""The fair store on Redis Cluster: ``redis+cluster://`` URLs, through redis-py's RedisCluster.

Every key of one store shares one hash tag (``{prefix}``, see keys.py), so the whole store
lives in one slot of one shard, and every Lua script, pipeline and transaction stays in that
slot. redis-py's cluster client follows MOVED and ASK and waits out TRYAGAIN; what the store
sends as one connection's work (a script with its ``WAIT``, a chunk of scripts) goes to the
slot's primary here, with the same redirections followed. A call that still fails is a
:class:`StoreUnavailableError`, as for any other Redis failure.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry

from ...errors import ConfigurationError
from .client import CONNECTION_OPTIONS, errors_in_place
from .translate import Translating, display_url, translate

#: ``redis+cluster://`` and, with TLS, ``rediss+cluster://``; one part per startup node,
#: separated by ``;`` as in Celery's ``sentinel://`` form.
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
CLUSTER_PORT = 6379
#: ``fairqueue_redis_transport_options`` that a cluster store takes: the nodes' connection
#: options (a cluster has one database, 0).
CLUSTER_OPTIONS = tuple(name for name in CONNECTION_OPTIONS if name != "db")
#: Redirections (MOVED, ASK, TRYAGAIN) one call follows before it gives up, as redis-py does.
MAX_REDIRECTIONS = 16


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


def parse_cluster_url(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The startup nodes of a cluster URL (``redis+cluster://:pw@h1:7000;redis+cluster://h2:7001``)
    and the connection options its parts give (password, username, TLS from ``rediss+cluster``
    and ``ssl_*`` query options). A part without a port means 6379; where parts disagree, the
    first that gives an option wins. A database other than 0 is refused: a cluster has one."""
    nodes: list[tuple[str, int]] = []
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in url.split(";"))):
        if not is_cluster_url(part):
            raise ConfigurationError(
                f"fairqueue_redis_url: {display_url(part)!r} is not a redis+cluster:// part; "
                "write redis+cluster://host:7000;redis+cluster://host2:7001")
        scheme, _, rest = part.partition("+cluster://")
        try:
            parsed = parse_url(f"{scheme}://{rest}")
        except ValueError as exc:
            raise ConfigurationError(f"fairqueue_redis_url: {exc}") from None
        if parsed.pop("connection_class", None) is SSLConnection:
            parsed["ssl"] = True
        if int(parsed.pop("db", 0) or 0) != 0:
            raise ConfigurationError(
                f"fairqueue_redis_url: {display_url(part)!r} names a database; a Redis Cluster "
                "has only database 0 (give each store its own fairqueue_key_prefix instead)")
        nodes.append((parsed.pop("host", "localhost"), parsed.pop("port", CLUSTER_PORT)))
        for name, value in parsed.items():
            options.setdefault(name, value)
    if not nodes:
        raise ConfigurationError("fairqueue_redis_url: redis+cluster:// names no node")
    unknown = sorted(set(options) - set(CLUSTER_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"fairqueue_redis_url: {', '.join(unknown)} cannot be set on a redis+cluster:// URL "
            "(the store sets its own timeouts and retries)")
    return nodes, options


def check_cluster_options(options: Mapping[str, Any]) -> None:
    """Raise ConfigurationError, naming the setting, for options a cluster store cannot use."""
    name = "fairqueue_redis_transport_options"
    unknown = sorted(set(options) - set(CLUSTER_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"{name}: {', '.join(map(repr, unknown))} is not used by a redis+cluster:// store; "
            f"it takes {', '.join(CLUSTER_OPTIONS)} (timeouts and retries are the store's own)")


#: The first redis-py whose cluster pipelines take ``transaction=True`` (MULTI/EXEC in one slot),
#: which the store's limits and the recorder's acknowledgements use.
MIN_REDIS_PY = (6, 1)


def cluster_client(url: str, transport_options: Mapping[str, Any], options: dict[str, Any],
                   retries: int) -> StoreClusterClient:
    """A cluster client for ``url`` with the store's connection ``options`` (see make_client)."""
    installed = tuple(int(p) for p in redis.__version__.split(".")[:2] if p.isdigit())
    if installed < MIN_REDIS_PY:
        raise ConfigurationError(
            f"fairqueue_redis_url: a redis+cluster:// store needs redis-py "
            f"{'.'.join(map(str, MIN_REDIS_PY))} or later (transactions in cluster pipelines); "
            f"redis-py {redis.__version__} is installed")
    check_cluster_options(transport_options)
    nodes, url_options = parse_cluster_url(url)
    # the nodes' own connections never retry in redis-py's cluster client: the cluster client
    # retries, after asking the cluster for its slot map again
    for name in ("retry", "retry_on_error", "health_check_interval"):
        options.pop(name, None)
    return StoreClusterClient(nodes, retries=retries,
                              **{**transport_options, **url_options, **options})


class StoreClusterPipeline(Translating, ClusterPipeline):
    """redis-py's cluster pipeline (or, ``transaction=True``, a MULTI/EXEC in one slot) whose
    failures are the package's."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except (redis.RedisError, RedisClusterException) as exc:
            raise translate(exc, self.store_url, "a pipeline") from exc


class StoreClusterClient(Translating, RedisCluster):
    """A redis-py cluster client whose every failure is a :class:`StoreUnavailableError`.

    redis-py's cluster client asks the cluster for its slot map as it is created, and fails
    there when no node answers. The store's client is made before Redis is needed (a producer
    at import, a worker at start), where an unreachable Redis must not be an error yet: this
    one asks on its first command, and again on each command until the cluster answers."""

    def __init__(self, nodes: Sequence[tuple[str, int]], retries: int, **kwargs: Any) -> None:
        self._nodes = list(nodes)
        self._kwargs = kwargs
        self._retries = retries
        self._started = False
        self._starter: int | None = None
        self._start_lock = threading.Lock()
        # what register_script needs before the cluster is asked anything
        self.encoder = redis.connection.Encoder(
            "utf-8", kwargs.get("encoding_errors", "strict"), kwargs.get("decode_responses", False))

    def _start(self) -> None:
        # the thread that starts the client sends commands of its own (COMMAND) meanwhile
        if self._started or self._starter == threading.get_ident():
            return
        with self._start_lock:
            if self._started:
                return
            self._starter = threading.get_ident()
            try:
                RedisCluster.__init__(
                    self, startup_nodes=[ClusterNode(host, port) for host, port in self._nodes],
                    retry=Retry(NoBackoff(), self._retries), **self._kwargs)
            except (redis.RedisError, RedisClusterException) as exc:
                raise translate(exc, self.store_url, "asking the cluster for its slots") from exc
            finally:
                self._starter = None
            self._started = True

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._start()
        return super().execute_command(*args, **options)

    def close(self) -> None:
        if self._started:
            super().close()

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> StoreClusterPipeline:
        self._start()
        try:
            pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        except RedisClusterException as exc:
            raise translate(exc, self.store_url, "a pipeline") from exc
        # redis-py builds its ClusterPipeline from the client's internals, which change between
        # releases; the pipeline it built becomes the translating one (no state of its own)
        pipe.__class__ = StoreClusterPipeline
        pipe.store_url = self.store_url
        return pipe

    # -- the store's node --------------------------------------------------------------------

    def _home(self, key: str) -> ClusterNode:
        self._start()
        try:
            return self.get_node_from_key(key)
        except RedisClusterException as exc:
            raise translate(exc, self.store_url) from exc

    def time_at(self, key: str) -> tuple[int, int]:
        """TIME of the primary holding ``key``: the clock the store's scripts read."""
        reply: tuple[int, int] = self.execute_command("TIME", target_nodes=self._home(key))
        return reply

    def ping_at(self, key: str) -> None:
        """PING the primary holding ``key``."""
        self.execute_command("PING", target_nodes=self._home(key))

    def scan_at(self, key: str, match: str, count: int) -> Iterator[str]:
        """SCAN the primary holding ``key``: the keys of one hash tag live there only."""
        yield from self.scan_iter(match=match, count=count, target_nodes=self._home(key))

    def run_batch(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]],
                  wait_replicas: int = 0) -> tuple[list[Any], int]:
        """As StoreClient.run_batch: each call's reply or its own error, and WAIT's count."""
        return errors_in_place(self.run_scripts(script, calls, wait_replicas, in_place=True),
                               self.store_url, wait_replicas)

    def run_scripts(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]],
                    wait_replicas: int = 0, in_place: bool = False) -> list[Any]:
        """Run ``script`` once per (keys, args) in one round trip to the primary holding the
        keys (all share one slot), then ``WAIT wait_replicas`` on the same connection when
        asked; returns the replies (and WAIT's last). redis-py's cluster pipeline refuses
        EVALSHA and would not keep WAIT on the script's connection, so this pipeline is sent
        to the node itself, following MOVED, ASK and TRYAGAIN as the cluster client does."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
        if wait_replicas:
            commands.append(("WAIT", wait_replicas, self._wait_ms()))
        key = calls[0][0][0]
        slot = self.keyslot(key)
        asking: ClusterNode | None = None
        failures = 0
        for _ in range(MAX_REDIRECTIONS):
            node = asking or self._home(key)
            pipe = self.get_redis_connection(node).pipeline(transaction=False)
            for command in commands:
                if asking is not None:
                    pipe.execute_command("ASKING")
                pipe.execute_command(*command)
            try:
                replies = pipe.execute(raise_on_error=not in_place)
                # ``in_place``: a call's own error stays in its place; one that says where
                # to send the batch (or to load the script) is followed for all of them
                redirected = next((r for r in replies if isinstance(
                    r, (NoScriptError, AskError, TryAgainError))), None)
                if redirected is not None:
                    raise redirected
            except NoScriptError:  # a new primary after a failover has no scripts yet
                self.get_redis_connection(node).script_load(script.script)
                continue
            except AskError as exc:
                if isinstance(exc, MovedError):
                    self.nodes_manager.move_slot(exc)
                    asking = None
                else:
                    asking = self.nodes_manager.get_node(host=exc.host, port=exc.port) or \
                        ClusterNode(exc.host, exc.port)
                continue
            except TryAgainError:  # the slot's keys are split between two nodes for now
                time.sleep(0.05)
                continue
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failures += 1
                self._refresh(node)
                if failures > self._retries:
                    raise translate(exc, self.store_url) from exc
                continue
            except redis.RedisError as exc:
                raise translate(exc, self.store_url) from exc
            return replies[1::2] if asking is not None else replies
        raise translate(RedisClusterException(
            f"slot {slot} still moving after {MAX_REDIRECTIONS} redirections"), self.store_url)

    def run_and_wait(self, script: Any, keys: list[Any], args: list[Any],
                     replicas: int) -> tuple[Any, int]:
        """As StoreClient.run_and_wait: the script, then WAIT on the same connection."""
        reply, acked = self.run_scripts(script, [(keys, args)], wait_replicas=replicas)
        return reply, int(acked)

    def _wait_ms(self) -> int:
        timeout = self._kwargs.get("socket_timeout") or 1.0
        return max(1, int(timeout * 500))

    def _refresh(self, failed: ClusterNode) -> None:
        """Ask the cluster for its slot map again after ``failed`` did not answer (a failover
        under way); a cluster that does not answer either is reported by the next try."""
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            self.nodes_manager.initialize(last_failed_node_name=failed.name)
