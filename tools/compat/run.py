"""``make compat``: Celery's own integration tests, plain and with FairTask as ``task_cls``.

1. Downloads the sdist of the installed Celery version from PyPI (once, into ``.compat/``) and
   unpacks its tests (``t/``) and pytest configuration (``pyproject.toml``); Celery itself is
   not unpacked, so the tests import the installed Celery.
2. Runs ``t/integration/test_tasks.py``, ``test_canvas.py`` and ``test_inspect.py`` twice, each
   time against a new throwaway redis-server on a free loopback port (broker and result
   backend): plain Celery, then every task a FairTask (``compat_plugin.py``). Celery's
   ``@flaky`` reruns are off and each test's timeout is cut to ``--timeout``.
3. Compares the two JUnit reports (``compare.py``) and fails when a test passes plain but not
   fair, unless ``docs/compatibility.md`` lists it as a known design difference.

Usage: ``python tools/compat/run.py [--timeout 60] [-k EXPR] [--only plain|fair]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
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


def run_suite(mode: str, source: Path, out: Path, timeout: float, select: str | None) -> int:
    """Run Celery's integration tests once in ``mode``; the JUnit report goes to ``out``."""
    server = RedisServer(out / f"redis-{mode}").start()
    try:
        env = {
            **os.environ,
            "TEST_BROKER": server.url, "TEST_BACKEND": server.url,
            "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(server.port),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE),
                                                        os.environ.get("PYTHONPATH")])),
        }
        argv = [
            sys.executable, "-m", "pytest",
            # Celery's fixtures first, so that the plugin's celery_parameters overrides them
            "-p", "celery.contrib.pytest", "-p", "compat_plugin",
            "-p", "no:rerunfailures", "-p", "no:cacheprovider",
            f"--compat-mode={mode}", f"--compat-timeout={timeout}",
            f"--compat-stats={out / f'{mode}.json'}", f"--timeout={timeout}",
            f"--junitxml={out / f'{mode}.xml'}", "-o", "junit_family=xunit1",
            "-q", "-rfE", "--no-header",
            *(["-k", select] if select else []),
            *(f"t/integration/{name}" for name in TEST_FILES),
        ]
        started = time.monotonic()
        print(f"compat: {mode} run of Celery's integration tests (redis {server.url})",
              flush=True)
        code = subprocess.run(argv, cwd=source, env=env).returncode
        print(f"compat: {mode} run took {time.monotonic() - started:.0f} s (pytest exit {code})",
              flush=True)
        return code
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="most seconds any one test may take (default 60)")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    parser.add_argument("--only", choices=MODES, default=None,
                        help="run one mode again; the other's last report is reused")
    args = parser.parse_args(argv)

    started = time.monotonic()
    version = celery_version()
    source = celery_tests(version)
    out = CACHE / "runs"
    out.mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        if args.only in (None, mode):
            code = run_suite(mode, source, out, args.timeout, args.select)
            if code not in (0, 1):  # 1: some tests failed; anything else: the run itself did
                print(f"compat: the {mode} run did not complete (pytest exit {code})")
                return 2
    stats = {mode: json.loads((out / f"{mode}.json").read_text()) for mode in MODES}
    report = compare.compare(out / "plain.xml", out / "fair.xml", DOC, stats)
    print(f"\nCelery {version}, {' '.join(TEST_FILES)}; "
          f"wall time {time.monotonic() - started:.0f} s")
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
