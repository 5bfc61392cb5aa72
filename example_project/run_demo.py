"""Run the example project, then keep it up for you to look at (``make demo``).

A throwaway redis-server on a free port, the example's SQLite database migrated, a real
``celery -A proj worker``, and the ``run_demo_workload``, ``run_burst_demo`` and
``run_console_demo`` commands as producers. Then the admin and its support console are served
(``manage.py runserver`` on a free loopback port) with Redis and the worker still running, in any
shell, terminal or not, until Ctrl-C or SIGTERM; everything it started is then stopped.
``--once`` runs the workload and exits instead, for scripts. The servers and worker come from the
test harness (``tests.harness``), so the demo runs exactly the processes the tests run.
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

# Run as a script (`make demo`): put the repo root, which holds tests.harness, on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness import (
    RedisServer,
    WorkerProcess,
    free_port,
    pid_alive,
    process_group,
    wait_until,
)
from tests.harness.processes import _die_with_parent

HERE = Path(__file__).resolve().parent
LOGIN = {"DJANGO_SUPERUSER_USERNAME": "demo", "DJANGO_SUPERUSER_PASSWORD": "demo",
         "DJANGO_SUPERUSER_EMAIL": "demo@example.com"}


class Stopped(Exception):
    """Ctrl-C or SIGTERM: unwind, stopping everything the demo started."""


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=HERE, env=env, check=True)


def on_signal(signum: int, frame: object) -> None:
    # One stop only: a second Ctrl-C while the worker shuts down warmly must not cut it short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as page:
            return page.status == 200
    except (OSError, urllib.error.URLError):
        return False


def serve_console(env: dict[str, str], port: int, stack: contextlib.ExitStack,
                  watched: dict[str, subprocess.Popen[bytes]], log: Path) -> None:
    """Create the demo login and serve the admin on loopback until it answers."""
    subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"], cwd=HERE,
                   env={**env, **LOGIN}, capture_output=True, check=False)  # exists: fine
    with open(log, "ab") as out:
        # Its own session: a terminal's Ctrl-C reaches the demo, which stops it in order.
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent)
    stack.callback(stop, server)
    watched["the console (manage.py runserver)"] = server
    login = f"http://127.0.0.1:{port}/admin/login/"
    if not wait_until(lambda: answers(login) or server.poll() is not None, 60, 0.2) or (
            server.poll() is not None):
        raise RuntimeError(f"manage.py runserver did not answer at {login}; its log: {log}")
    say(f"admin: http://127.0.0.1:{port}/admin/ (pid {server.pid}, log {log})")
    say(f"console: http://127.0.0.1:{port}/admin/celery_fairqueue/account/ (login demo / demo)")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stay_up(watched: dict[str, subprocess.Popen[bytes]]) -> int:
    """Wait for Ctrl-C or SIGTERM; stop early (1) if one of the demo's processes exits."""
    say("the demo stays up, Redis and the worker included, until Ctrl-C or SIGTERM "
        f"(kill -TERM {os.getpid()})")
    while True:
        for name, process in watched.items():
            if process.poll() is not None:
                say(f"{name} exited with status {process.returncode}: stopping the demo")
                return 1
        time.sleep(0.5)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", "--exit", action="store_true",
                        help="run the workload, then stop everything and exit (for scripts)")
    parser.add_argument("--port", type=int, default=0,
                        help="the console's port on 127.0.0.1 (default: a free one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    status, started = 0, []
    with (
        tempfile.TemporaryDirectory(prefix="fairqueue-demo-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        try:
            redis = RedisServer(Path(tmp) / "redis")
            stack.callback(redis.stop)
            redis.start()
            assert redis.process is not None
            started.append(redis.process.pid)
            say(f"started redis-server pid {redis.process.pid} at {redis.url} "
                f"(dir {redis.directory})")

            env = {**os.environ, "DJANGO_SETTINGS_MODULE": "proj.settings",
                   "REDIS_URL": redis.url}
            manage("migrate", "--noinput", "--verbosity", "0", env=env)
            database = os.environ.get("DATABASE_URL", f"sqlite at {HERE / 'db.sqlite3'}")
            say(f"migrated the example database ({database})")

            worker = WorkerProcess(
                "proj", redis_url=redis.url, log_path=Path(tmp) / "worker.log", cwd=HERE,
                pool="prefork", concurrency=2, hostname=f"demo-{os.getpid()}@localhost",
                env=env)
            stack.callback(worker.stop)
            worker.start()
            started.append(worker.pid)
            say(f"worker {worker.hostname} ready: pid {worker.pid}, "
                f"pool children {worker.children()}")

            say("running the workload (manage.py run_demo_workload):")
            manage("run_demo_workload", env=env)
            plot = HERE / "fair-vs-plain.png"
            say("a bursty campaign, plain Celery and then FairTask (manage.py run_burst_demo):")
            manage("run_burst_demo", "--plot", str(plot), env=env)
            port = options.port or free_port()
            say("the support console's accounts (manage.py run_console_demo):")
            manage("run_console_demo", "--base-url", f"http://127.0.0.1:{port}", env=env)

            if options.once:
                say("--once: not serving the console; `make demo` without it keeps it up")
            else:
                assert redis.process is not None and worker.process is not None
                watched = {"redis-server": redis.process, "the worker": worker.process}
                serve_console(env, port, stack, watched, Path(tmp) / "runserver.log")
                started.append(watched["the console (manage.py runserver)"].pid)
                status = stay_up(watched)
        except (Stopped, KeyboardInterrupt) as stopped:
            print(flush=True)
            say(f"{stopped or 'SIGINT'}: stopping")
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if len(started) > 1:
                log = worker.log_path.read_text()
                received, succeeded = log.count(" received"), log.count(" succeeded in ")
                say(f"worker log: {received} tasks received, {succeeded} succeeded")
            console = "" if options.once else "the console, "
            say(f"stopping {console}the worker (warm shutdown) and redis-server")
            group = process_group(started[1]) if len(started) > 1 else []
    left = [pid for pid in {*started, *group} if pid_alive(pid)]
    if left:
        say(f"still running after cleanup: {left}")
        return 1
    say("done; nothing it started is left running")
    return status


if __name__ == "__main__":
    sys.exit(main())
