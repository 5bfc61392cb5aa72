"""Real ``celery worker`` subprocesses that a test can start, crash and stop."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.harness.processes import (
    _die_with_parent,
    _read_from,
    child_pids,
    pid_alive,
    process_group,
    tail,
    wait_until,
)
from tests.harness.redis_server import REDIS_URL_ENV

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
        self.launch()
        self.wait_for_log(f"{self.hostname} ready.", timeout)
        return self

    def launch(self) -> WorkerProcess:
        """Start the worker, not waiting for it (a fleet starts side by side: each launched
        from the main thread, whose exit alone kills it, then each waited for)."""
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

    def refused_start(self) -> str:
        """Start a worker that must refuse to (a store it cannot serve): assert that it exits
        with code 1 before it is ready; return its log."""
        try:
            with contextlib.suppress(RuntimeError):  # "exited" before it was ready
                self.start()
            assert self.process is not None and self.process.wait(10) == 1
        finally:
            self.kill()
        return self.log_path.read_text()

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
