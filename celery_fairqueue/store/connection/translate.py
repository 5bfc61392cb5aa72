"""The one place that translates Redis failures into the package's exceptions.

Every command the store sends goes through a client or pipeline that mixes in
:class:`Translating` (client.py, cluster.py), which turns each redis-py error, a dropped
connection, a timeout or an error reply (OOM, BUSY, READONLY, LOADING, MASTERDOWN, ...), into
:class:`StoreUnavailableError` or, for a full Redis, :class:`StoreFullError`, naming the store
operation under way (:func:`operation`) and the store's URL without its password. Callers
above the store catch the package's exceptions only.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import redis
from kombu.utils.url import maybe_sanitize_url
from redis.exceptions import RedisClusterException

from ...errors import StoreFullError, StoreUnavailableError

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
def operation(name: str, *, within: bool = False) -> Iterator[None]:
    """Name the store operation that the commands sent inside this block belong to; ``within``:
    those of the operation under way, if any (a producer's reading of the store's layout is
    part of its enqueue)."""
    token = _operation.set((within and _operation.get()) or name)
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


class Translating:
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


