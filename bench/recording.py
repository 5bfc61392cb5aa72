"""Recording: its cost to the workers, and its pace against theirs.

    .venv/bin/python -m bench.recording [--jobs 3000] [--accounts 20] [--rounds 5]
    .venv/bin/python -m bench.recording --backlog [--jobs 20000] [--accounts 200]
        [--shards 1] [--recorders 1] [--rounds 3]

**Cost** (the default):
One redis-server and one throwaway PostgreSQL cluster; one worker (prefork, 2 processes) runs a
backlog of short fair jobs spread over the accounts, enqueued first. With recording on, a
recorder (as ``manage.py fairqueue_recorder`` runs it, here in a thread of this process) reads
the event stream into the Job and Attempt tables while the worker runs. Runs come in pairs,
off and on back to back in alternating order, and the verdict is the median of the pairs'
ratios (acceptance: >= 0.8): a 2-core machine shared with other work drifts more from one
minute to the next than within a pair. Also prints how long after the last job its row was
written.

**Backlog** (``--backlog``): the events pile up in the stream while 2 workers x 8 threads run
``--jobs`` keyed no-op jobs, then ``--recorders`` recorder processes (as ``manage.py
fairqueue_recorder`` runs them) record them alone. The store runs at its best pace: no
recorder runs beside the workers, the backlog waits behind a pause of its queue until both
workers are up, and the workers log no line per task (a user's worker logs at WARNING). Prints
jobs/s recorded beside jobs/s run by the store and workers in the same round, their ratio, and
the CPU per job of the recorders and of PostgreSQL (every process of its cluster, from /proc)
while they record.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import django
from django.conf import settings

import celery_fairqueue
from bench._common import ROOT, ratio, redis_server, workers
from bench.environment import QUIET_TASKS_ENV, SHARDS_ENV
from tests.harness import PostgresServer, find_postgres_bindir

FLAGS = {"pool": "prefork", "concurrency": 2}


BACKLOG_WORKERS = {"pool": "threads", "concurrency": 8}
DB_PORT_ENV = "FQ_BENCH_DB_PORT"
BATCH_ENV = "FQ_BENCH_RECORDER_BATCH"
EVENTS_A_JOB = 3  # enqueued, running, succeeded
QUEUE = "celery"  # the bench tasks' (Celery's default)


def configure_django(port: int | str, name: str) -> None:
    """Django with only the fair-queue app, on database ``name`` of the cluster at ``port``."""
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": "postgres",
                "HOST": "127.0.0.1", "PORT": port}
    settings.configure(DATABASES={"default": database}, USE_TZ=True,
                       INSTALLED_APPS=["celery_fairqueue.contrib.django"],
                       CELERY_FAIRQUEUE_APP="bench.app.app")
    django.setup()


def setup_django(postgres: PostgresServer, name: str) -> None:
    """Django with only the fair-queue app, on a new database of the cluster, migrated."""
    from django.core.management import call_command

    postgres.create_database(name)
    configure_django(postgres.port, name)
    call_command("migrate", verbosity=0)


@contextlib.contextmanager
def bench_database(name: str = "fqbench") -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster with Django set up on a new, migrated database ``name``;
    stopped and removed at the end."""
    bindir = find_postgres_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found; run `make services`")
    folder = Path(tempfile.mkdtemp(prefix="fq-bench-pg-"))
    postgres = PostgresServer(bindir, folder).start()
    try:
        setup_django(postgres, name)
        yield postgres
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


def phase(server, jobs: int, accounts: int, record: bool) -> tuple[float, float | None]:
    """jobs/s of one worker over the backlog; with ``record``, also the recorder's lag."""
    from bench import app
    from celery_fairqueue.contrib.django.models import Job
    from celery_fairqueue.contrib.django.recording.recorder import Recorder
    from celery_fairqueue.store import store_for

    client = server.client()
    client.flushall()
    Job.objects.all().delete()
    stop = threading.Event()
    thread = None
    if record:
        recorder = Recorder(app.app, "bench")
        recorder.reader.ensure_group()
        store_for(app.app)._recording_checked = float("-inf")  # skip the 5 s "nobody records"
        thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
        thread.start()
    for n in range(jobs):
        app.fair_noop.delay(f"acct{n % accounts}")
    try:
        with workers(server, 1, **FLAGS):
            deadline = time.monotonic() + 300
            while int(client.get("done") or 0) < jobs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {client.get('done')} of {jobs} done")
                time.sleep(0.02)
            lag = None
            while record and Job.objects.filter(status=Job.Status.SUCCEEDED).count() < jobs:
                if time.monotonic() > deadline:
                    raise TimeoutError("the recorder did not catch up")
                time.sleep(0.05)
            if record:
                lag = time.time() - float(client.get("last"))
        return jobs / (float(client.get("last")) - float(client.get("first"))), lag
    finally:
        stop.set()
        if thread is not None:
            thread.join(10)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of ``pids`` so far, with that of their children that ended (the
    postmaster's backends that closed); those that are gone count nothing."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def cluster_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (backends, writers, autovacuum)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == postmaster:
                pids.append(int(entry.name))
    return pids


def recorder_child(name: str) -> None:
    """A recorder process for the backlog mode: ready, then records from "go" to SIGTERM."""
    configure_django(os.environ[DB_PORT_ENV], "fqbench")
    from bench import app
    from celery_fairqueue.contrib.django.recording.recorder import Recorder

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    recorder = Recorder(app.app, name, lock_seconds=5.0,
                        batch=int(os.environ.get(BATCH_ENV, "2000")))
    recorder.reader.ensure_group()
    gc.freeze()  # as manage.py fairqueue_recorder does
    print("ready", flush=True)
    sys.stdin.readline()
    recorder.run_forever(stop)


def backlog_round(server, postgres: PostgresServer, options: argparse.Namespace
                  ) -> tuple[float, float, float, float]:
    """(jobs/s run, jobs/s recorded, recorder CPU and PostgreSQL CPU per job in µs)."""
    from bench import app
    from celery_fairqueue.contrib.django.models import Attempt, Job
    from celery_fairqueue.store import EventReader, Keys, store_for

    client = server.client()
    client.flushall()
    Attempt.objects.all().delete()
    Job.objects.all().delete()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    store = store_for(app.app)
    store.client.set(Keys(store.keys.prefix).shard_count, options.shards)  # as flushed
    store.client.set(Keys(store.keys.prefix).layout_format, "2")
    reader = EventReader(store, "bench")
    reader.ensure_group()
    store.forget_recording()  # skip the 5 s "nobody records"
    # the store at its best pace: the backlog waits behind a pause of its queue until both
    # workers are up (started one after the other, the first would run part of it alone)
    celery_fairqueue.pause(app.app, queue=QUEUE, by="bench")
    for n in range(options.jobs):
        app.fair_keyed_noop.delay(f"acct{n % options.accounts}", n)
    with workers(server, 2, **BACKLOG_WORKERS, env={QUIET_TASKS_ENV: "1"}):
        celery_fairqueue.resume(app.app, queue=QUEUE)
        deadline = time.monotonic() + 600
        while int(client.get("done") or 0) < options.jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {client.get('done')} of {options.jobs} done")
            time.sleep(0.05)
        # a job counts itself done before its worker acks it and the store writes its last
        # event: stopping the workers now could cut those acks on a loaded machine
        while reader.backlog() < EVENTS_A_JOB * options.jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{reader.backlog()} events written of "
                                   f"{EVENTS_A_JOB * options.jobs}")
            time.sleep(0.05)
    run = options.jobs / (float(client.get("last")) - float(client.get("first")))
    env = {**os.environ, DB_PORT_ENV: str(postgres.port), "PYTHONPATH": str(ROOT),
           BATCH_ENV: str(options.batch)}
    children = [subprocess.Popen([sys.executable, "-m", "bench.recording", "--child",
                                  f"recorder{n}"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
                for n in range(options.recorders)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        database = cluster_pids(postgres.process.pid)  # type: ignore[union-attr]
        pids = [child.pid for child in children]
        cpu_before, db_before = cpu_seconds(pids), cpu_seconds(database)
        started = time.monotonic()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        while reader.backlog():
            if time.monotonic() - started > 600:
                raise TimeoutError(f"{reader.backlog()} events left unrecorded")
            time.sleep(0.01)
        seconds = time.monotonic() - started
        database = cluster_pids(postgres.process.pid)  # type: ignore[union-attr]
        cpu = cpu_seconds(pids) - cpu_before
        db = cpu_seconds(database) - db_before
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            child.wait(30)
    recorded = Job.objects.filter(status=Job.Status.SUCCEEDED).count()
    if recorded != options.jobs:
        raise SystemExit(f"{recorded} of {options.jobs} jobs recorded as succeeded")
    per_job = 1e6 / options.jobs
    return run, options.jobs / seconds, cpu * per_job, db * per_job


def backlog(server, postgres: PostgresServer, options: argparse.Namespace) -> None:
    """The backlog mode's rounds and verdict: the recorder's best pace against the store's best
    (acceptance: >= 1.5), and the CPU per job of each."""
    rounds = [backlog_round(server, postgres, options) for _ in range(options.rounds)]
    print(f"\nrecording a backlog, {options.jobs} keyed no-op jobs over {options.accounts} "
          f"accounts, S={options.shards}, {options.recorders} recorder(s) of batch "
          f"{options.batch}, 2 workers x 8 threads, {options.rounds} rounds, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for run, recorded, cpu, db in rounds:
        print(f"    store ran {run:6.0f} jobs/s   recorder recorded {recorded:6.0f} jobs/s   "
              f"ratio {recorded / run:.2f}   recorder CPU {cpu:4.0f} us/job   "
              f"PostgreSQL CPU {db:4.0f} us/job")
    store = max(run for run, _, _, _ in rounds)
    recorder = max(recorded for _, recorded, _, _ in rounds)
    print(f"    store's best pace {store:.0f} jobs/s, recorder's best {recorder:.0f} jobs/s: "
          f"{recorder / store:.2f}x (acceptance: >= 1.5; best round "
          f"{max(r[1] / r[0] for r in rounds):.2f}x)")
    print(f"    least recorder CPU {min(r[2] for r in rounds):.0f} us/job (<= 70), least "
          f"PostgreSQL CPU {min(r[3] for r in rounds):.0f} us/job (<= 80)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--accounts", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None, help="pairs of runs, off and on")
    parser.add_argument("--backlog", action="store_true", help="the recorder against a backlog")
    parser.add_argument("--shards", type=int, default=1, help="the store's shards (backlog)")
    parser.add_argument("--recorders", type=int, default=1, help="recorder processes (backlog)")
    parser.add_argument("--batch", type=int, default=2000, help="events a recorder's batch "
                                                             "(backlog)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        recorder_child(options.child)
        return
    defaults = (20000, 200, 3) if options.backlog else (3000, 20, 5)
    for name, value in zip(("jobs", "accounts", "rounds"), defaults, strict=True):
        if getattr(options, name) is None:
            setattr(options, name, value)
    os.environ[SHARDS_ENV] = str(options.shards)  # read by bench.app, here and in children
    with bench_database() as postgres, redis_server() as server:
        if options.backlog:
            backlog(server, postgres, options)
            return
        off, on, lags = [], [], []
        for n in range(options.rounds):
            # a pair per round, in alternating order: drift and a busy neighbour hit both
            for record in (False, True) if n % 2 == 0 else (True, False):
                rate, lag = phase(server, options.jobs, options.accounts, record)
                (on if record else off).append(rate)
                if lag is not None:
                    lags.append(lag)
    ratios = sorted(rate_on / rate_off for rate_off, rate_on in zip(off, on, strict=True))
    median = ratios[len(ratios) // 2]
    print(f"\nrecording cost, {options.jobs} no-op fair jobs over {options.accounts} accounts, "
          f"worker --pool prefork -c 2, {options.rounds} rounds")
    print("    recording off           jobs/s: " + ", ".join(f"{r:.0f}" for r in off))
    print("    recording on (Postgres) jobs/s: " + ", ".join(f"{r:.0f}" for r in on))
    print(f"    ratio on/off per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"    median ratio {median:.2f} (acceptance: >= 0.8); best on / best off "
          f"{ratio(max(on), max(off)):.2f}")
    print(f"    last row written {max(lags):.2f} s after the last job ran (worst round)")
    raise SystemExit(0 if median >= 0.8 else 1)


if __name__ == "__main__":
    main()
