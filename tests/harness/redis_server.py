"""A real ``redis-server`` per test run, how the test process lets go of its connections to one
that restarted, and the ledger in which test tasks count side effects."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import redis
from celery import Celery
from celery.backends.redis import RedisBackend

from tests.harness.processes import _die_with_parent, free_port, tail, wait_until

#: Environment variable through which test apps (and their workers) learn the Redis URL.
REDIS_URL_ENV = "FAIRQUEUE_TEST_REDIS_URL"
#: Environment variable that pins the session Redis to a port (e.g. 6379) instead of a free one.
REDIS_PORT_ENV = "FAIRQUEUE_TEST_REDIS_PORT"
#: Redis hash in which tasks count their side effects, one field per job key.
LEDGER_KEY = "ledger"


class RedisServer:
    """A real ``redis-server`` on 127.0.0.1, owned by the test run.

    ``config`` entries become command-line options (``{"appendonly": "yes"}`` becomes
    ``--appendonly yes``; underscores turn into dashes). The defaults keep nothing on disk and
    allow ``DEBUG SLEEP``. ``start()`` after ``stop()``/``kill()`` reuses the same port and
    directory, so an AOF written before a crash is replayed.
    """

    DEFAULTS: Mapping[str, str] = {
        "save": "",
        "appendonly": "no",
        "enable-debug-command": "local",
    }

    def __init__(
        self, directory: Path, port: int | None = None, config: Mapping[str, str] | None = None
    ) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        overrides = {name.replace("_", "-"): value for name, value in (config or {}).items()}
        self.config = {**self.DEFAULTS, **overrides}
        self.log_path = self.directory / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        #: How many times this server has started; more than once means a restart.
        self.starts = 0

    @property
    def url(self) -> str:
        """The client URL, with the password of ``requirepass`` and, where a ``tls-port`` is
        configured, ``rediss://`` trusting the configured ``tls-ca-cert-file``."""
        password = self.config.get("requirepass")
        auth = f":{quote(password, safe='')}@" if password else ""
        if "tls-port" in self.config:
            query = urlencode({"ssl_cert_reqs": "required",
                               "ssl_ca_certs": self.config["tls-ca-cert-file"]})
            return f"rediss://{auth}127.0.0.1:{self.config['tls-port']}/0?{query}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis-py client for this server; kwargs go to ``redis.Redis.from_url``."""
        return redis.Redis.from_url(self.url, **kwargs)

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        if self.is_alive():
            return self
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run `make services` to install it")
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--daemonize", "no"]
        argv += ["--dir", str(self.directory), "--logfile", str(self.log_path)]
        for name, value in self.config.items():
            argv += [f"--{name}", value]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        self.paused = False
        self.starts += 1
        if not wait_until(self._answers_ping, timeout):
            self.kill()
            raise RuntimeError(
                f"redis-server on port {self.port} did not answer PING within {timeout}s:\n"
                + tail(self.log_path)
            )
        return self

    def _answers_ping(self) -> bool:
        if not self.is_alive():
            raise RuntimeError(f"redis-server exited at start:\n{tail(self.log_path)}")
        try:
            with self.client(socket_timeout=1) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down with SIGTERM (SIGKILL after ``timeout``)."""
        if self.process is None:
            return
        if self.paused:
            self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server: a crash, with no shutdown work at all."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None
        self.paused = False

    def restart(self, timeout: float = 10.0) -> RedisServer:
        """Stop cleanly and start again on the same port and directory."""
        self.stop()
        return self.start(timeout)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a hung Redis)."""
        assert self.process is not None, "redis-server is not running"
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        assert self.process is not None, "redis-server is not running"
        self.process.send_signal(signal.SIGCONT)
        self.paused = False


def drop_result_subscriptions() -> None:
    """Close the result pub/sub connection of every test app imported in this process.

    After a restart, or a ``CLIENT KILL``, that connection is dead, and Celery's Redis result
    consumer finds out only when it next reads it; it then reads the pending results before it
    subscribes again, so a result published in between is never seen and ``.get()`` times out.
    A closed one is opened afresh at the next subscription.
    """
    for name, module in list(sys.modules.items()):
        app = getattr(module, "app", None) if name.startswith("tests.apps.") else None
        if isinstance(app, Celery) and isinstance(app.backend, RedisBackend):
            app.backend.result_consumer.stop()


# --------------------------------------------------------------------------------------------
# Ledger
# --------------------------------------------------------------------------------------------


def record_side_effect(client: redis.Redis, key: str) -> int:
    """Count one side effect for a job key; tasks of test apps call this. Returns the count."""
    return int(client.hincrby(LEDGER_KEY, key, 1))


class Ledger:
    """Reads the side effects that tasks recorded with ``record_side_effect``.

    The ledger lives outside the system under test, so duplicates and losses are measured, not
    assumed.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __len__(self) -> int:
        """Job keys with a side effect, without reading them all."""
        return int(self.client.hlen(LEDGER_KEY))

    def counts(self) -> dict[str, int]:
        """Side effects per job key."""
        raw = self.client.hgetall(LEDGER_KEY)
        return {_text(key): int(value) for key, value in raw.items()}

    def duplicates(self) -> dict[str, int]:
        """Job keys whose side effect happened more than once, with their counts."""
        return {key: n for key, n in self.counts().items() if n > 1}

    def missing(self, expected_keys: Iterable[str]) -> set[str]:
        """Expected job keys whose side effect never happened."""
        return set(expected_keys) - set(self.counts())

    def wait_for(self, n: int, timeout: float = 30.0) -> dict[str, int]:
        """Wait until at least ``n`` distinct job keys have a side effect; return the counts."""
        if not wait_until(lambda: len(self) >= n, timeout):
            counts = self.counts()
            raise TimeoutError(f"ledger has {len(counts)} of {n} keys after {timeout}s: {counts}")
        return self.counts()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class IdempotentAPI:
    """A fake external API that honours an Idempotency-Key header, as a real one would: one
    side effect per key. ``calls`` counts what was sent, the ledger what the API applied.

    The side effect and its ledger entry are one atomic step, as they are for the API's own
    records: a worker killed between two separate calls would lose the ledger entry.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._apply_once = client.register_script(
            "if redis.call('SET', KEYS[1], '1', 'NX') then "
            "redis.call('HINCRBY', KEYS[2], ARGV[1], 1) end")

    def __call__(self, idempotency_key: str, ledger_key: str) -> str:
        self.client.hincrby("calls", ledger_key, 1)
        self._apply_once(keys=[f"api:{idempotency_key}", LEDGER_KEY], args=[ledger_key])
        return f"msg-{idempotency_key[:8]}"
