"""Recording cost: the same fair workload with job state recorded into PostgreSQL, and without.

    .venv/bin/python -m bench.recording [--jobs 3000] [--accounts 20] [--rounds 5]

One redis-server and one throwaway PostgreSQL cluster; one worker (prefork, 2 processes) runs a
backlog of short fair jobs spread over the accounts, enqueued first. With recording on, a
recorder (as ``manage.py fairqueue_recorder`` runs it, here in a thread of this process) reads
the event stream into the Job and Attempt tables while the worker runs. Runs come in pairs,
off and on back to back in alternating order, and the verdict is the median of the pairs'
ratios (acceptance: >= 0.8): a 2-core machine shared with other work drifts more from one
minute to the next than within a pair. Also prints how long after the last job its row was
written.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import django
from django.conf import settings

from bench._common import ratio, redis_server, workers
from tests.harness import PostgresServer, find_postgres_bindir

FLAGS = {"pool": "prefork", "concurrency": 2}


def setup_django(postgres: PostgresServer, name: str) -> None:
    """Django with only the fair-queue app, on a new database of the cluster, migrated."""
    from django.core.management import call_command

    postgres.create_database(name)
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": "postgres",
                "HOST": "127.0.0.1", "PORT": postgres.port}
    settings.configure(DATABASES={"default": database}, USE_TZ=True,
                       INSTALLED_APPS=["celery_fairqueue.contrib.django"],
                       CELERY_FAIRQUEUE_APP="bench.app.app")
    django.setup()
    call_command("migrate", verbosity=0)


def phase(server, jobs: int, accounts: int, record: bool) -> tuple[float, float | None]:
    """jobs/s of one worker over the backlog; with ``record``, also the recorder's lag."""
    from bench import app
    from celery_fairqueue.contrib.django.models import Job
    from celery_fairqueue.contrib.django.recorder import Recorder
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--accounts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="pairs of runs, off and on")
    options = parser.parse_args()
    bindir = find_postgres_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found; run `make services`")
    folder = Path(tempfile.mkdtemp(prefix="fq-bench-pg-"))
    postgres = PostgresServer(bindir, folder).start()
    try:
        setup_django(postgres, "fqbench")
        with redis_server() as server:
            off, on, lags = [], [], []
            for n in range(options.rounds):
                # a pair per round, in alternating order: drift and a busy neighbour hit both
                for record in (False, True) if n % 2 == 0 else (True, False):
                    rate, lag = phase(server, options.jobs, options.accounts, record)
                    (on if record else off).append(rate)
                    if lag is not None:
                        lags.append(lag)
    finally:
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)
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
