"""Pruning while recording: the pruner deletes old recorded jobs while workers run jobs and a
recorder records them.

    .venv/bin/python -m bench.pruning [--rows 1000000] [--rate 300] [--baseline 10]

One redis-server and one throwaway PostgreSQL cluster. The Job table is filled with ``--rows``
succeeded jobs (an attempt each) that finished 30 days ago, past the default retention. Then a
producer enqueues ``--rate`` fair jobs a second, a worker (8 threads) runs them and a recorder
process records them; ``--baseline`` seconds of that alone,
then ``manage.py fairqueue prune``'s pruner, in a process of its own, deletes the old rows
while it goes on. A sampler reads the recorder's lag (the age of the oldest unrecorded event,
as the ``fairqueue_oldest_unrecorded_event_age_seconds`` gauge does) every 50 ms: a recording
stall shows as a lag that grows past the recorder's usual wait for a batch (acceptance: no
stall over 1 s, so the lag stays under 1 s more than its baseline's worst).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

from bench._common import ROOT, percentile, redis_server, workers
from bench.recording import DB_PORT_ENV, bench_database, configure_django
from tests.harness import PostgresServer


def fill(rows: int) -> None:
    """``rows`` succeeded jobs with an attempt each, finished 30 days ago, in one statement
    each."""
    from django.db import connection

    from celery_fairqueue.contrib.django.models import Attempt, Job

    jobs, attempts = Job._meta.db_table, Attempt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {jobs} (job_key, task_id, delivery_id, task, queue, account, status, "
            "attempts, args, args_text, enqueued_at, finished_at, last_error, dead_reason, "
            "external_id, worker, updated_at) SELECT 'old-' || i, 'old-' || i, 'old-' || i || "
            "':0', 'bench.app.fair_noop', 'celery', 'acct' || (i %% 200), 'succeeded', 1, "
            "'{}'::jsonb, '', now() - interval '31 days', now() - interval '30 days' + i * "
            "interval '1 ms', '', '', '', 'w', now() FROM generate_series(1, %s) AS i", [rows])
        cursor.execute(
            f"INSERT INTO {attempts} (job_id, number, delivery_id, worker, started_at, "
            "finished_at, outcome, error) SELECT id, 1, delivery_id, 'w', finished_at, "
            f"finished_at, 'succeeded', '' FROM {jobs}")
        cursor.execute("VACUUM ANALYZE")
        for table in (jobs, attempts):
            cursor.execute(f"SELECT pg_total_relation_size('{table}')")
            print(f"{table}: {cursor.fetchone()[0] / rows:.0f} B a row, indexes included")


def pruner_child() -> None:
    """The pruner as ``manage.py fairqueue prune`` runs it; prints the jobs deleted."""
    configure_django(os.environ[DB_PORT_ENV], "fqbench")
    from bench import app
    from celery_fairqueue.contrib.django.recording.pruner import Pruner

    print(Pruner(app.app).prune(), flush=True)


def produce(rate: float, stop: threading.Event) -> None:
    """Enqueue ``rate`` fair jobs a second until ``stop``."""
    from bench import app

    n, started = 0, time.monotonic()
    while not stop.is_set():
        app.fair_noop.delay(f"acct{n % 200}")
        n += 1
        time.sleep(max(0.0, started + n / rate - time.monotonic()))


def sample(lags: list[tuple[float, float]], stop: threading.Event) -> None:
    """The recorder's lag every 50 ms: (when, the oldest unrecorded event's age)."""
    from bench import app
    from celery_fairqueue.store import EventReader, store_for

    reader = EventReader(store_for(app.app), "bench")
    while not stop.wait(0.05):
        lags.append((time.monotonic(), max(lag.oldest_age for lag in reader.lag())))


def run(server, postgres: PostgresServer, options: argparse.Namespace) -> None:
    from bench import app
    from celery_fairqueue.contrib.django.models import Job
    from celery_fairqueue.store import EventReader, store_for

    started = time.monotonic()
    fill(options.rows)
    print(f"filled {options.rows} old jobs in {time.monotonic() - started:.0f} s", flush=True)
    store = store_for(app.app)
    EventReader(store, "bench").ensure_group()
    store.forget_recording()
    env = {**os.environ, DB_PORT_ENV: str(postgres.port), "PYTHONPATH": str(ROOT)}
    recorder = subprocess.Popen([sys.executable, "-m", "bench.recording", "--child", "rec"],
                                cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    stop, lags = threading.Event(), []
    threads = [threading.Thread(target=produce, args=(options.rate, stop)),
               threading.Thread(target=sample, args=(lags, stop))]
    try:
        assert recorder.stdout is not None and recorder.stdout.readline().strip() == "ready"
        assert recorder.stdin is not None
        recorder.stdin.write("go\n")
        recorder.stdin.flush()
        with workers(server, 1, pool="threads", concurrency=8):
            for thread in threads:
                thread.start()
            time.sleep(options.baseline)
            pruning = time.monotonic()
            pruned = subprocess.run([sys.executable, "-m", "bench.pruning", "--child"],
                                    cwd=ROOT, env=env, capture_output=True, text=True,
                                    check=True)
            pruned_at = time.monotonic()
            stop.set()
            for thread in threads:
                thread.join()
    finally:
        recorder.terminate()
        recorder.wait(30)
    deleted = int(pruned.stdout.strip().splitlines()[-1])
    left = Job.objects.filter(job_key__startswith="old-").count()
    before = [age for at, age in lags if at < pruning]
    during = [age for at, age in lags if pruning <= at <= pruned_at]
    seconds = pruned_at - pruning
    print(f"\npruning while recording: {options.rows - left} of {options.rows} old jobs (with "
          f"an attempt each) deleted, {deleted} of them by the pruner in {seconds:.0f} s "
          f"({deleted / seconds:.0f} jobs/s), the rest by the recorder in its idle time, while "
          f"a worker ran {options.rate:.0f} jobs/s and the recorder recorded them")
    print(f"    recorder lag before pruning: median {percentile(before, 50):.2f} s, worst "
          f"{max(before):.2f} s ({len(before)} samples)")
    print(f"    recorder lag while pruning:  median {percentile(during, 50):.2f} s, p99 "
          f"{percentile(during, 99):.2f} s, worst {max(during):.2f} s ({len(during)} samples)")
    stall = max(during) - max(before)
    print(f"    longest stall beyond the usual wait: {max(stall, 0):.2f} s (acceptance: <= 1 s)"
          f"; old jobs left: {left}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=300.0, help="jobs enqueued a second")
    parser.add_argument("--baseline", type=float, default=10.0,
                        help="seconds of recording before the pruner starts")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        pruner_child()
        return
    with bench_database() as postgres, redis_server() as server:
        run(server, postgres, options)


if __name__ == "__main__":
    main()
