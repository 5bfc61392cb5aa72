"""The store's client of one Redis server (or of a sentinel-managed primary, sentinel.py):
redis-py's, with every failure translated (translate.py) and the calls the store makes of
"its server" (its time, a ping, a scan) named as a cluster client names them (cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis
from redis.client import Pipeline

from ...errors import StoreUnavailableError
from .translate import Translating, translate

#: ``fairqueue_redis_transport_options`` passed on to the connections to the primary (redis-py
#: keyword arguments). Timeouts and retries are the store's own, set by :func:`make_client`.
CONNECTION_OPTIONS = (
    "username", "password", "db", "client_name", "socket_keepalive", "socket_keepalive_options",
    "ssl", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path",
    "ssl_ca_data", "ssl_check_hostname", "ssl_password", "ssl_min_version", "ssl_ciphers",
)

def errors_in_place(replies: list[Any], url: str, wait_replicas: int) -> tuple[list[Any], int]:
    """A batch's replies with each error reply translated where it stands, and WAIT's count
    (0 when WAIT failed or was not asked)."""
    acked = 0
    if wait_replicas:
        last = replies.pop()
        acked = 0 if isinstance(last, Exception) else int(last)
    return [translate(reply, url) if isinstance(reply, redis.RedisError) else reply
            for reply in replies], acked


class StorePipeline(Translating, Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except redis.RedisError as exc:
            raise translate(exc, self.store_url, "a pipeline") from exc


class StoreClient(Translating, redis.Redis):
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

    def run_batch(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]],
                  wait_replicas: int = 0) -> tuple[list[Any], int]:
        """Run ``script`` once per (keys, args) in one round trip (EVALSHA only: redis-py's
        pipelined Script asks SCRIPT EXISTS first, a second round trip), then ``WAIT
        wait_replicas`` when asked. Returns each call's reply, or the error of that call alone
        as a StoreUnavailableError (the others ran), and how many replicas confirmed them;
        no reply at all raises."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
        if wait_replicas:
            timeout = self.get_connection_kwargs().get("socket_timeout") or 1.0
            commands.append(("WAIT", wait_replicas, max(1, int(timeout * 500))))
        for attempt in (1, 2):
            pipe = self.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)
            if attempt == 1 and any(isinstance(r, redis.exceptions.NoScriptError)
                                    for r in replies):
                # a restarted Redis: load it and send the batch again (a call that ran
                # answers for its job: every enqueue is idempotent by its delivery id)
                script.sha = self.script_load(script.script)
                continue
            break
        return errors_in_place(replies, self.store_url, wait_replicas)

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


