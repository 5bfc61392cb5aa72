"""Run the example project end to end, then stop everything it started (``make demo``).

A throwaway redis-server on a free port, the example's SQLite database migrated, a real
``celery -A proj worker``, and the ``run_demo_workload`` command as the producer. The servers and
worker come from the test harness (``tests.harness``), so the demo runs exactly the
processes the tests run.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# Run as a script (`make demo`): put the repo root, which holds tests.harness, on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness import (
    RedisServer,
    WorkerProcess,
    free_port,
    pid_alive,
    process_group,
)

HERE = Path(__file__).resolve().parent


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=HERE, env=env, check=True)


def interactive() -> bool:
    return sys.stdin.isatty() and not os.environ.get("CI")


def serve_admin(env: dict[str, str], port: int) -> None:
    """Create the demo login and, at a terminal, serve the admin until Ctrl-C."""
    login = {"DJANGO_SUPERUSER_USERNAME": "demo", "DJANGO_SUPERUSER_PASSWORD": "demo",
             "DJANGO_SUPERUSER_EMAIL": "demo@example.com"}
    subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"], cwd=HERE,
                   env={**env, **login}, capture_output=True, check=False)  # exists: fine
    console = f"http://127.0.0.1:{port}/admin/celery_fairqueue/account/"
    if not interactive():
        say("admin: `cd example_project && ../.venv/bin/python manage.py runserver`, then "
            f"http://127.0.0.1:{port}/admin/ (login demo / demo); the console: {console}")
        return
    say(f"admin: http://127.0.0.1:{port}/admin/ (login demo / demo); the console: {console}")
    say("Ctrl-C to stop the demo")
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}",
                               "--noreload"], cwd=HERE, env=env)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    # SIGTERM (e.g. from a CI runner) unwinds like Ctrl-C, so the cleanup below always runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with (
        tempfile.TemporaryDirectory(prefix="fairqueue-demo-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        redis = RedisServer(Path(tmp) / "redis")
        stack.callback(redis.stop)
        redis_pid = redis.start().process.pid
        say(f"started redis-server pid {redis_pid} at {redis.url} (dir {redis.directory})")

        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "REDIS_URL": redis.url,
        }
        manage("migrate", "--noinput", "--verbosity", "0", env=env)
        database = os.environ.get("DATABASE_URL", f"sqlite at {HERE / 'db.sqlite3'}")
        say(f"migrated the example database ({database})")

        worker = WorkerProcess(
            "proj",
            redis_url=redis.url,
            log_path=Path(tmp) / "worker.log",
            cwd=HERE,
            pool="prefork",
            concurrency=2,
            hostname=f"demo-{os.getpid()}@localhost",
            env=env,
        )
        stack.callback(worker.stop)
        worker.start()
        say(f"worker {worker.hostname} ready: pid {worker.pid}, pool children {worker.children()}")

        say("running the workload (manage.py run_demo_workload):")
        manage("run_demo_workload", env=env)
        plot = HERE / "fair-vs-plain.png"
        say("a bursty campaign, plain Celery and then FairTask (manage.py run_burst_demo):")
        manage("run_burst_demo", "--plot", str(plot), env=env)
        port = free_port() if interactive() else 8000
        say("the support console's accounts (manage.py run_console_demo):")
        manage("run_console_demo", "--base-url", f"http://127.0.0.1:{port}", env=env)
        serve_admin(env, port)

        log = worker.log_path.read_text()
        received, succeeded = log.count(" received"), log.count(" succeeded in ")
        say(f"worker log: {received} tasks received, {succeeded} succeeded")
        say("stopping the worker (warm shutdown) and redis-server")
    left = [pid for pid in [redis_pid, *process_group(worker.pid)] if pid_alive(pid)]
    if left:
        say(f"still running after cleanup: {left}")
        return 1
    say("done; nothing it started is left running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
