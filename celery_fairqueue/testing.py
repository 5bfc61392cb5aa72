"""Pytest plugin: real redis-server, Celery worker and PostgreSQL processes for tests.

Registered through the ``pytest11`` entry point, so a project that installs celery-fairqueue gets
the fixtures ``redis_server``, ``redis_server_factory``, ``redis_url``, ``redis_client``,
``celery_worker_factory``, ``pg_server`` and ``ledger``. Nothing is mocked: every fixture starts
the real program as a subprocess and stops it at teardown, failures included.

Why not pytest-celery: its workers run in Docker containers (the smoke-test setup) or as a
thread inside the test process (the ``celery_worker`` fixture); neither is a ``celery worker``
process with its own bootsteps that a test can SIGKILL, which is what crash tests need.

Django is never imported here; the core package must work without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import redis

#: Environment variable through which test apps (and their workers) learn the Redis URL.
REDIS_URL_ENV = "FAIRQUEUE_TEST_REDIS_URL"
#: Environment variable that pins the session Redis to a port (e.g. 6379) instead of a free one.
REDIS_PORT_ENV = "FAIRQUEUE_TEST_REDIS_PORT"
#: Redis hash in which tasks count their side effects, one field per job key.
LEDGER_KEY = "ledger"

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """Run in the child before exec: a SIGKILLed test run must not leave servers behind."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 60) -> str:
    """Return the last ``lines`` lines of a log file ('' if it does not exist yet)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _read_from(path: Path, offset: int) -> str:
    """The text a log file gained after ``offset`` bytes (what the current run wrote)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """Return (state, ppid, pgrp) of a process from /proc, or None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    state, ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
    return state, int(ppid), int(pgrp)


def _live_processes() -> Iterator[tuple[int, int, int]]:
    """Yield (pid, ppid, pgrp) of every process that is not a zombie."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and stat[0] != "Z":
                yield int(entry), stat[1], stat[2]


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie runs no code any more)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def process_group(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes in a process group."""
    return [pid for pid, _, pgrp in _live_processes() if pgrp == pgid]


def child_pids(pid: int) -> list[int]:
    """PIDs of the live (non-zombie) direct children of a process."""
    return sorted(child for child, ppid, _ in _live_processes() if ppid == pid)


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


# --------------------------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------------------------


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


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's Redis, on a free port (or ``$FAIRQUEUE_TEST_REDIS_PORT``).

    Its URL is also exported as ``$FAIRQUEUE_TEST_REDIS_URL`` in the test process, so test apps
    that read it at import time can be imported by the tests themselves.
    """
    port = int(os.environ[REDIS_PORT_ENV]) if os.environ.get(REDIS_PORT_ENV) else None
    server = RedisServer(tmp_path_factory.mktemp("redis"), port=port)
    with pytest.MonkeyPatch.context() as mp:
        try:
            server.start()
            mp.setenv(REDIS_URL_ENV, server.url)
            yield server
        finally:
            server.stop()


@pytest.fixture
def redis_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., RedisServer]]:
    """Start extra Redis servers with their own config: ``redis_server_factory(appendonly="yes",
    appendfsync="everysec")``. Each gets a free port and its own directory; all are stopped at
    the end of the test."""
    servers: list[RedisServer] = []

    def start(**config: str) -> RedisServer:
        server = RedisServer(tmp_path_factory.mktemp("redis"), config=config)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session Redis (database 0)."""
    return redis_server.url


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client (``decode_responses=True``) on an empty session Redis.

    A server that an earlier test paused or killed is brought back first, so one crash test
    cannot break the tests after it.
    """
    if redis_server.paused:
        redis_server.resume()
    redis_server.start()
    client = redis_server.client(decode_responses=True)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


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


@pytest.fixture
def ledger(redis_client: redis.Redis) -> Ledger:
    """An empty ledger on the session Redis (the database is flushed before the test)."""
    return Ledger(redis_client)


# --------------------------------------------------------------------------------------------
# Celery workers
# --------------------------------------------------------------------------------------------

_worker_ids = itertools.count(1)


class WorkerProcess:
    """A real ``celery -A <app> worker`` subprocess in its own session and process group.

    stdout and stderr go to ``log_path``; ``start()`` returns once the worker logged
    ``<hostname> ready.``, which Celery writes after every bootstep (pool, consumer, broker
    connection) has started.
    """

    def __init__(
        self,
        app: str,
        *,
        redis_url: str,
        log_path: Path,
        cwd: Path,
        pool: str = "threads",
        concurrency: int = 2,
        queues: Sequence[str] = (),
        hostname: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self.pool = pool
        self.hostname = hostname or f"fq{next(_worker_ids)}-{os.getpid()}@localhost"
        self.log_path = Path(log_path)
        self.cwd = Path(cwd)
        self.argv = [sys.executable, "-m", "celery", "-A", app, "worker"]
        self.argv += ["--pool", pool, "--concurrency", str(concurrency), "-n", self.hostname]
        self.argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
        if queues:
            self.argv += ["-Q", ",".join(queues)]
        self.argv += list(args)
        pythonpath = os.pathsep.join(filter(None, [str(self.cwd), os.environ.get("PYTHONPATH")]))
        self.env = {
            **os.environ,
            REDIS_URL_ENV: redis_url,
            "PYTHONPATH": pythonpath,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0  # where the current run's output starts in log_path

    @property
    def pid(self) -> int:
        assert self.process is not None, "worker was never started"
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        """Start the worker and wait for its ready line."""
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.wait_for_log(f"{self.hostname} ready.", timeout)
        return self

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        """Wait until the current run logs ``text``; fail with the log tail if it won't."""

        def logged() -> bool:
            if text in _read_from(self.log_path, self._log_offset):
                return True
            if not self.is_alive():
                raise RuntimeError(
                    f"worker {self.hostname} exited (code {self.process and self.process.poll()})"
                    f" before logging {text!r}:\n{self.log_tail()}"
                )
            return False

        if not wait_until(logged, timeout):
            raise TimeoutError(
                f"worker {self.hostname} did not log {text!r} within {timeout}s:\n{self.log_tail()}"
            )

    def children(self) -> list[int]:
        """PIDs of the worker's pool processes (none with the threads or solo pool)."""
        return child_pids(self.pid) if self.is_alive() else []

    def stop(self, timeout: float = 15.0) -> None:
        """Warm shutdown (SIGTERM: finish running tasks), then SIGKILL whatever is left."""
        if self.is_alive():
            assert self.process is not None
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill()

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the whole process group (main process and pool children) and wait for it."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if not wait_until(lambda: not process_group(self.pid), timeout):
            raise RuntimeError(f"processes of worker {self.hostname} survived SIGKILL")

    def kill_child(self, timeout: float = 10.0) -> int:
        """SIGKILL one prefork pool child, leaving the main process alone; return its PID.

        Returns once the child is dead; the worker replaces it on its own.
        """
        children = self.children()
        if not children:
            raise RuntimeError(f"worker {self.hostname} (pool={self.pool}) has no pool children")
        child = children[0]
        os.kill(child, signal.SIGKILL)
        if not wait_until(lambda: not pid_alive(child), timeout):
            raise RuntimeError(f"pool child {child} of worker {self.hostname} survived SIGKILL")
        return child


_WORKERS = pytest.StashKey[list[WorkerProcess]]()


@pytest.fixture
def celery_worker_factory(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real Celery workers against the session Redis (flushed before the test).

    ``celery_worker_factory(app="tests.apps.harness", pool="threads", concurrency=2, queues=(),
    hostname=None, args=(), env=None, cwd=None, timeout=30.0)`` returns a started
    ``WorkerProcess``. ``cwd`` (default: the pytest rootdir) is also put on ``PYTHONPATH``.
    Every worker is SIGKILLed at teardown; the log tails of a failed test's workers are added to
    its report.
    """
    workers = request.node.stash.setdefault(_WORKERS, [])

    def start(
        app: str = "tests.apps.harness",
        *,
        cwd: Path | str | None = None,
        timeout: float = 30.0,
        **options: Any,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            app,
            redis_url=redis_server.url,
            log_path=tmp_path / f"worker-{len(workers) + 1}.log",
            cwd=Path(cwd) if cwd is not None else request.config.rootpath,
            **options,
        )
        workers.append(worker)
        return worker.start(timeout)

    try:
        yield start
    finally:
        for worker in workers:
            worker.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the log tail of each worker a failed test started to its report."""
    report: pytest.TestReport = yield
    if report.failed:
        for worker in item.stash.get(_WORKERS, []):
            report.sections.append((f"worker {worker.hostname} log", worker.log_tail()))
    return report


# --------------------------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------------------------


def find_postgres_bindir() -> Path | None:
    """Directory holding ``initdb`` and ``postgres``: from PATH, else Debian's newest cluster."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(p) for p in debian), key=lambda p: int(p.parent.name), reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "postgres").exists():
            return bindir
    return None


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1 with trust auth and ``fsync=off``.

    ``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` OS user
    (created if missing) and lives in a directory under /tmp that this user owns.
    """

    def __init__(self, bindir: Path, directory: Path, port: int | None = None) -> None:
        self.bindir = bindir
        self.directory = directory
        self.port = port or free_port()
        self.data_dir = directory / "data"
        self.log_path = directory / "postgres.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._user = _postgres_os_user() if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    @property
    def dsn(self) -> str:
        """Same as ``url``; psycopg and libpq accept URLs as connection strings."""
        return self.url

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if self._user:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
        return subprocess.Popen(
            argv,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            **kwargs,
        )

    def _check(self, argv: list[str]) -> None:
        proc = self._run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{output.decode()}")

    def start(self, timeout: float = 30.0) -> PostgresServer:
        """initdb (first time only), start ``postgres`` and wait until it accepts connections."""
        self.directory.chmod(0o700)
        if self._user:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        if not self.data_dir.exists():
            self._check(
                [
                    *(str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", "postgres"),
                    *("--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"),
                ]
            )
        argv = [str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        argv += ["-h", "127.0.0.1", "-k", str(self.directory)]
        argv += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        with open(self.log_path, "ab") as log:
            offset = log.tell()
            self.process = self._run(argv, stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start:\n{tail(self.log_path)}")
            return "ready to accept connections" in _read_from(self.log_path, offset)

        if not wait_until(ready, timeout):
            self.stop()
            raise RuntimeError(f"postgres not ready within {timeout}s:\n{tail(self.log_path)}")
        return self

    def create_database(self, name: str) -> str:
        """Create a database and return its URL."""
        createdb = str(self.bindir / "createdb")
        self._check([createdb, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name])
        return self.url_for(name)

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown (SIGINT: disconnects clients instead of waiting), SIGKILL at last."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def _postgres_os_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            [
                *("useradd", "--system", "--user-group", "--no-create-home"),
                *("--shell", "/usr/sbin/nologin", "postgres"),
            ],
            check=True,
        )
        return pwd.getpwnam("postgres")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster for the session (use it from tests marked ``postgres``).

    Skipped when no server binaries exist; under CI (``$CI`` set) that is an error instead, so a
    missing install step cannot pass as green.
    """
    bindir = find_postgres_bindir()
    if bindir is None:
        message = "PostgreSQL server binaries (initdb, postgres) not found; run `make services`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    directory = Path(tempfile.mkdtemp(prefix="fairqueue-pg-"))
    server = PostgresServer(bindir, directory)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
