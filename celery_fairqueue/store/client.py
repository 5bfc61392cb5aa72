"""The Redis client of the fair store, and the one place that translates Redis failures.

Every command the store sends goes through :class:`StoreClient` (pipelines included), which
turns each redis-py error, a dropped connection, a timeout or an error reply (OOM, BUSY,
READONLY, LOADING, MASTERDOWN, ...), into :class:`StoreUnavailableError` or, for a full Redis,
:class:`StoreFullError`. Callers above the store catch the package's exceptions only.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeAlias

import redis
from kombu.utils.url import maybe_sanitize_url
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.client import Pipeline
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from ..errors import ConfigurationError, StoreFullError, StoreUnavailableError

if TYPE_CHECKING:
    from .cluster import StoreClusterClient

#: Error replies that mean "not now" rather than "never", in words for a person reading a
#: worker's warning: a failover or a slow script is the cause, not the job. redis-py turns
#: some codes into classes and strips the code from the text, so both are looked at.
_TRANSIENT_REPLIES = [
    (redis.exceptions.ReadOnlyError, "READONLY", "Redis is a read-only replica (a failover?)"),
    (redis.exceptions.BusyLoadingError, "LOADING", "Redis is loading its data"),
    (redis.exceptions.MasterDownError, "MASTERDOWN", "the replica lost its primary"),
    (redis.exceptions.TryAgainError, "TRYAGAIN", "a cluster slot is migrating"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN", "the cluster is down"),
    (None, "BUSY", "Redis is busy running a script"),
]


_SENTINEL_REPR = re.compile(r"<redis\.client\.Redis\(<.*?,host=([^,]*),port=(\d+),.*?\)>\)>\)>")

#: The store operation under way (a script's name), so an error names it, not EVALSHA.
_operation: ContextVar[str | None] = ContextVar("fairqueue_store_operation", default=None)


@contextlib.contextmanager
def operation(name: str) -> Iterator[None]:
    """Name the store operation that the commands sent inside this block belong to."""
    token = _operation.set(name)
    try:
        yield
    finally:
        _operation.reset(token)


def display_url(url: str) -> str:
    """``url`` with its passwords masked, for logs and errors. kombu's ``maybe_sanitize_url``
    alone cannot read the ``;``-separated sentinel form (it raises on
    ``sentinel://h:26379;sentinel://h:26380``, and masks the first password only), so each
    part is masked on its own."""
    if ";" not in url:
        return maybe_sanitize_url(url)
    return ";".join(_masked(part) for part in url.split(";"))


def _masked(part: str) -> str:
    if "@" not in part:
        return part
    try:
        masked: str = maybe_sanitize_url(part)
    except ValueError:  # unparsable: hide everything before the host
        scheme, _, rest = part.partition("://")
        return f"{scheme}://**@{rest.rpartition('@')[2]}"
    # kombu adds a path separator the part may not have had
    return masked[:-1] if masked.endswith("/") and not part.endswith("/") else masked


def translate(exc: redis.RedisError | RedisClusterException, url: str,
              command: Any = None) -> StoreUnavailableError:
    """The package's exception for one redis-py error."""
    where = f"fair store at {display_url(url)}"
    command = _operation.get() or command
    doing = f" during {command}" if command else ""
    # redis-py names each sentinel that failed by its client's whole repr: host:port will do
    text = _SENTINEL_REPR.sub(r"sentinel \1:\2", str(exc))
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or text.startswith("OOM"):
        return StoreFullError(f"{where} is full (maxmemory){doing}: {text}")
    # before the connection errors: redis-py makes LOADING one of them
    why = next((words for kind, code, words in _TRANSIENT_REPLIES
                if (kind is not None and isinstance(exc, kind)) or text.startswith(code)), None)
    if why is None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return StoreUnavailableError(f"{where} is unreachable{doing}: {text}")
    return StoreUnavailableError(f"{where}: {why or 'Redis refused the command'}{doing}: {text}")


def may_run_later(exc: StoreUnavailableError) -> bool:
    """Whether the command that failed with ``exc`` may still run in Redis: no reply came back
    (a timeout, a dropped connection) and Redis's port still took connections at the last try.
    An error reply ends the command; a refused connection means no Redis process listens, and
    a process that is gone runs nothing it was sent."""
    cause = exc.__cause__
    if isinstance(cause, redis.exceptions.BusyLoadingError) or not isinstance(
            cause, (redis.ConnectionError, redis.TimeoutError)):
        return False
    seen: BaseException | None = cause
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return False
        seen = seen.__cause__ or seen.__context__
    return True


class _Translating:
    """Mixed into the client and its pipelines: redis-py errors become the package's."""

    store_url = ""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)  # type: ignore[misc]
        except redis.exceptions.NoScriptError:
            raise  # redis-py's Script catches this, loads the script and calls it again
        except (redis.RedisError, RedisClusterException) as exc:  # the latter: no cluster slots
            raise translate(exc, self.store_url, args[0] if args else None) from exc

    def check_replicated(self, acked: int, wanted: int) -> None:
        """After :meth:`run_and_wait`: fewer replicas than wanted confirmed the write, which a
        failover now would lose, so the caller is told as for any failure of the store (the
        write itself may stand: it is ambiguous)."""
        if acked < wanted:
            raise StoreUnavailableError(
                f"fair store at {display_url(self.store_url)}: {acked} of {wanted} replicas "
                f"confirmed the write in time (fairqueue_wait_replicas); it may be lost in a "
                "failover")


class StorePipeline(_Translating, Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except redis.RedisError as exc:
            raise translate(exc, self.store_url, "a pipeline") from exc


class StoreClient(_Translating, redis.Redis):
    """A redis-py client whose every failure is a :class:`StoreUnavailableError`."""

    def run_and_wait(self, script: Any, keys: list[Any], args: list[Any],
                     replicas: int) -> tuple[Any, int]:
        """Run a registered script, then ``WAIT replicas`` on the same connection (WAIT counts
        the replicas that have that connection's writes), in one round trip. WAIT gives up
        after half of one try's socket timeout, so the reply comes well within it. Returns
        the script's reply and how many replicas confirmed it: see :meth:`check_replicated`."""
        timeout = self.get_connection_kwargs().get("socket_timeout") or 1.0
        timeout_ms = max(1, int(timeout * 500))
        for attempt in (1, 2):
            pipe = self.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            try:
                reply, acked = pipe.execute()
            except StoreUnavailableError as exc:
                if attempt == 1 and isinstance(exc.__cause__, redis.exceptions.NoScriptError):
                    script.sha = self.script_load(script.script)  # as redis-py's Script does
                    continue
                raise
            break
        return reply, int(acked)

    def run_scripts(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
                    ) -> list[Any]:
        """Run ``script`` once per (keys, args), in one round trip."""
        pipe = self.pipeline(transaction=False)
        for keys, args in calls:
            script(keys=keys, args=args, client=pipe)
        return pipe.execute()

    # The store's own server, named by one of its keys: on a cluster, the primary holding
    # the store's slot (see cluster.py); here, the one server.
    def time_at(self, key: str) -> tuple[int, int]:
        return self.time()

    def ping_at(self, key: str) -> None:
        self.ping()

    def scan_at(self, key: str, match: str, count: int) -> Iterator[str]:
        yield from self.scan_iter(match=match, count=count)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StorePipeline:
        pipe = StorePipeline(self.connection_pool, self.response_callbacks, transaction,
                             shard_hint)
        pipe.store_url = self.store_url
        return pipe


#: The store's client: one server (or a sentinel-managed primary), or a Redis Cluster.
AnyClient: TypeAlias = "StoreClient | StoreClusterClient"

#: ``fairqueue_redis_transport_options`` that configure Sentinel itself.
SENTINEL_OPTIONS = ("master_name", "sentinel_kwargs", "min_other_sentinels")
#: ``fairqueue_redis_transport_options`` passed on to the connections to the primary (redis-py
#: keyword arguments). Timeouts and retries are the store's own, set by :func:`make_client`.
CONNECTION_OPTIONS = (
    "username", "password", "db", "client_name", "socket_keepalive", "socket_keepalive_options",
    "ssl", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path",
    "ssl_ca_data", "ssl_check_hostname", "ssl_password", "ssl_min_version", "ssl_ciphers",
)
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
        client = _sentinel_client(url, dict(transport_options or {}), options)
    elif url.startswith(("redis+cluster://", "rediss+cluster://")):
        from .cluster import cluster_client  # cluster.py builds on this module
        client = cluster_client(url, transport_options or {}, options, retries)
    else:
        client = StoreClient.from_url(url, **options)  # type: ignore[assignment]
    client.store_url = url
    return client


def is_cluster(client: AnyClient) -> bool:
    """Whether ``client`` is a Redis Cluster's (see cluster.py)."""
    return not isinstance(client, StoreClient)


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


def _sentinel_client(url: str, transport_options: dict[str, Any],
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
