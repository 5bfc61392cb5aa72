"""``make compat``: Celery's own integration tests, plain and with FairTask as ``task_cls``.

1. Downloads the sdist of the installed Celery version from PyPI (once, into ``.compat/``) and
   unpacks its tests (``t/``) and pytest configuration (``pyproject.toml``); Celery itself is
   not unpacked, so the tests import the installed Celery.
2. Runs ``t/integration/test_tasks.py``, ``test_canvas.py`` and ``test_inspect.py`` twice, each
   time against a new throwaway redis-server on a free loopback port (broker and result
   backend): plain Celery, and every task a FairTask (``compat_plugin.py``). Celery's
   ``@flaky`` reruns are off and each test's timeout is cut to ``--timeout``.
3. Compares the two JUnit reports (``compare.py``) and fails when a test passes plain but not
   fair, unless ``docs/compatibility.md`` lists it as a known design difference.

The tests mostly wait (for results, for timeouts they expect), so each mode is split into
``--shards`` pytest processes, each with its own redis-server and embedded worker, and all of
them run at once.

Usage: ``python tools/compat/run.py [--timeout 60] [--shards 3] [-k EXPR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import compare  # noqa: E402

from tests.harness.redis_server import RedisServer  # noqa: E402

CACHE = ROOT / ".compat"
DOC = ROOT / "docs" / "compatibility.md"
TEST_FILES = ("test_tasks.py", "test_canvas.py", "test_inspect.py")
MODES = ("plain", "fair")


def celery_version() -> str:
    """The installed Celery's version (this interpreter's)."""
    import celery

    return str(celery.__version__)


def celery_tests(version: str) -> Path:
    """The unpacked tests of Celery ``version``'s sdist, downloaded from PyPI on first use."""
    target = CACHE / f"celery-{version}"
    if (target / "t" / "integration" / "conftest.py").exists():
        return target
    downloads = CACHE / "sdist"
    archive = downloads / f"celery-{version}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-binary", ":all:", f"celery=={version}", "-d", str(downloads)],
            check=True)
    prefix = f"celery-{version}/"
    with tarfile.open(archive) as tar:
        wanted = [m for m in tar.getmembers()
                  if m.name.startswith(prefix + "t/") or m.name == prefix + "pyproject.toml"]
        tar.extractall(CACHE, members=wanted, filter="data")
    return target


def child_env() -> dict[str, str]:
    """The environment of a pytest process, which runs in the unpacked sdist: the plugin and
    this checkout's ``celery_fairqueue`` come first on its path, not the copy the venv may have
    installed from another checkout."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH")]))}


@dataclass
class Shard:
    """One pytest process of one mode, with its own redis-server and embedded worker."""

    mode: str
    index: int
    count: int
    out: Path

    @property
    def name(self) -> str:
        return f"{self.mode}-{self.index}"

    def start(self, source: Path, timeout: float, select: str | None) -> None:
        self.server = RedisServer(self.out / f"redis-{self.name}").start()
        env = {
            **child_env(),
            "TEST_BROKER": self.server.url, "TEST_BACKEND": self.server.url,
            "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(self.server.port),
        }
        argv = [
            sys.executable, "-m", "pytest",
            # Celery's fixtures first, so that the plugin's celery_parameters overrides them
            "-p", "celery.contrib.pytest", "-p", "compat_plugin",
            "-p", "no:rerunfailures", "-p", "no:cacheprovider",
            f"--compat-mode={self.mode}", f"--compat-shard={self.index}/{self.count}",
            f"--compat-timeout={timeout}", f"--timeout={timeout}",
            f"--compat-stats={self.out / f'{self.name}.json'}",
            f"--junitxml={self.out / f'{self.name}.xml'}", "-o", "junit_family=xunit1",
            "-rfE", "--no-header", "-p", "no:warnings",
            *(["-k", select] if select else []),
            *(f"t/integration/{name}" for name in TEST_FILES),
        ]
        self.log = (self.out / f"{self.name}.log").open("w")
        self.process = subprocess.Popen(argv, cwd=source, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)

    def wait(self) -> int:
        try:
            return self.process.wait()
        finally:
            self.log.close()
            self.server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="most seconds any one test may take (default 60)")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    parser.add_argument("--shards", type=int, default=3,
                        help="pytest processes per mode, all run at once (default 3)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    version = celery_version()
    source = celery_tests(version)
    out = CACHE / "runs"
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.xml"), *out.glob("*.json")]:
        old.unlink()
    shards = [Shard(mode, i, args.shards, out) for mode in MODES for i in range(args.shards)]
    print(f"compat: Celery {version}'s integration tests, plain and fair, in {len(shards)} "
          f"pytest processes (logs: {out.relative_to(ROOT)}/*.log)", flush=True)
    for shard in shards:
        shard.start(source, args.timeout, args.select)
    broken = []
    for shard in shards:
        code = shard.wait()
        print(f"compat: {shard.name} done after {time.monotonic() - started:.0f} s "
              f"(pytest exit {code})", flush=True)
        if code not in (0, 1):  # 1: some tests failed; anything else: the run itself did
            broken.append(shard.name)
    if broken:
        print(f"compat: {', '.join(broken)} did not complete; see their logs")
        return 2
    report = compare.compare(
        {mode: sorted(out.glob(f"{mode}-*.xml")) for mode in MODES}, DOC,
        {mode: [json.loads(p.read_text()) for p in sorted(out.glob(f"{mode}-*.json"))]
         for mode in MODES})
    print(f"\nCelery {version}, {' '.join(TEST_FILES)}; "
          f"wall time {time.monotonic() - started:.0f} s")
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
