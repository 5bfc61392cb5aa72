"""A throwaway PostgreSQL cluster, started from the server binaries on this machine."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.harness.processes import _die_with_parent, _read_from, free_port, tail, wait_until


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
