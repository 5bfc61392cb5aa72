"""A real RabbitMQ broker per test, from Debian's rabbitmq-server, on free loopback ports.

Everything of the node lives in its own folder (data, logs, the Erlang cookie under ``HOME``),
and its Erlang port mapper listens on a port of its own, so it meets no system service and
leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.harness.processes import free_port, tail, wait_until

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"


class RabbitMQServer:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.port = free_port()
        self.epmd_port = free_port()
        self.log_path = self.directory / "rabbitmq.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.env = {
            **os.environ,
            "HOME": str(self.directory),
            "RABBITMQ_NODENAME": f"fq{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_PID_FILE": str(self.directory / "rabbitmq.pid"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
        }

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self, timeout: float = 60.0) -> RabbitMQServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "enabled_plugins").write_text("[].\n")
        # a port mapper of our own, in the foreground, so stopping it is ours too
        self.epmd = subprocess.Popen([EPMD, "-port", str(self.epmd_port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([SERVER], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        if not wait_until(self._listens, timeout, interval=0.25):
            self.stop()
            raise RuntimeError(f"rabbitmq-server did not listen on {self.port} within "
                               f"{timeout}s:\n{tail(self.log_path)}")
        return self

    def _listens(self) -> bool:
        import socket

        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        """Stop the node, its Erlang runtime and its port mapper."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None
        if self.epmd is not None:
            self.epmd.kill()
            self.epmd.wait(timeout=10)
            self.epmd = None
