"""The Redis client of the fair store, and the one place that translates Redis failures.

Every command the store sends goes through :class:`StoreClient` (pipelines included), which
turns each redis-py error, a dropped connection, a timeout or an error reply (OOM, BUSY,
READONLY, LOADING, MASTERDOWN, ...), into :class:`StoreUnavailableError` or, for a full Redis,
:class:`StoreFullError`. Callers above the store catch the package's exceptions only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import redis
from kombu.utils.url import maybe_sanitize_url
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.retry import Retry

from ..errors import StoreFullError, StoreUnavailableError

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


def translate(exc: redis.RedisError, url: str, command: Any = None) -> StoreUnavailableError:
    """The package's exception for one redis-py error."""
    where = f"fair store at {maybe_sanitize_url(url)}"
    command = _operation.get() or command
    doing = f" during {command}" if command else ""
    text = str(exc)
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or text.startswith("OOM"):
        return StoreFullError(f"{where} is full (maxmemory){doing}: {text}")
    # before the connection errors: redis-py makes LOADING one of them
    why = next((words for kind, code, words in _TRANSIENT_REPLIES
                if (kind is not None and isinstance(exc, kind)) or text.startswith(code)), None)
    if why is None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return StoreUnavailableError(f"{where} is unreachable{doing}: {text}")
    return StoreUnavailableError(f"{where}: {why or 'Redis refused the command'}{doing}: {text}")


class _Translating:
    """Mixed into the client and its pipelines: redis-py errors become the package's."""

    store_url = ""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)  # type: ignore[misc]
        except redis.exceptions.NoScriptError:
            raise  # redis-py's Script catches this, loads the script and calls it again
        except redis.RedisError as exc:
            raise translate(exc, self.store_url, args[0] if args else None) from exc


class StorePipeline(_Translating, Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except redis.RedisError as exc:
            raise translate(exc, self.store_url, "a pipeline") from exc


class StoreClient(_Translating, redis.Redis):
    """A redis-py client whose every failure is a :class:`StoreUnavailableError`."""

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StorePipeline:
        pipe = StorePipeline(self.connection_pool, self.response_callbacks, transaction,
                             shard_hint)
        pipe.store_url = self.store_url
        return pipe


def make_client(url: str, socket_timeout: float = 10.0, retries: int = 6) -> StoreClient:
    """A store client that retries dropped connections and timeouts with backoff. Replies are
    decoded as UTF-8 with surrogate escapes, so one stored value that is not UTF-8 cannot make
    a whole reply (a claim of many jobs) undecodable."""
    client: StoreClient = StoreClient.from_url(  # type: ignore[assignment]
        url,
        decode_responses=True,
        encoding_errors="surrogateescape",
        socket_timeout=socket_timeout,
        socket_connect_timeout=min(5.0, socket_timeout),
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    client.store_url = url
    return client
