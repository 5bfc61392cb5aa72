"""Throughput, memory and claim cost: plain Celery beside FairTask, on one Redis, one run.

    .venv/bin/python -m bench.throughput [--quick] [--only noop|rss|claim]

(2) No-op tasks: jobs/s of one worker (prefork, 2 processes), the backlog enqueued first.
(4) Worker RSS with 100,000 delayed jobs (countdown one hour) waiting: plain Celery holds eta
    tasks in worker memory, FairTask leaves them in Redis. Also Redis memory per pending job.
(5) Claim cost: p50/p99 of one claim call with 10 accounts vs 100,000 accounts holding ready
    jobs (claim + ack per job, timed at the client, same Redis).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench._common import percentile, ratio, redis_server, workers

FLAGS = {"pool": "prefork", "concurrency": 2}


def noop_phase(server, kind: str, jobs: int) -> float:
    from bench import app

    task = app.fair_noop if kind == "fair" else app.plain_noop
    client = server.client()
    client.flushall()
    for n in range(jobs):
        task.delay(f"acct{n % 10}")
    with workers(server, 1, **FLAGS):
        deadline = time.monotonic() + 300
        while int(client.get("done") or 0) < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind}: only {client.get('done')} of {jobs} done")
            time.sleep(0.05)
    return jobs / (float(client.get("last")) - float(client.get("first")))


def report_noop(server, quick: bool) -> bool:
    jobs = 2000 if quick else 10000
    rounds = 1 if quick else 2
    plain = max(noop_phase(server, "plain", jobs) for _ in range(rounds))
    fair = max(noop_phase(server, "fair", jobs) for _ in range(rounds))
    print(f"\n(2) no-op throughput, {jobs} jobs, worker --pool prefork -c 2 (best of {rounds})")
    print(f"    plain {plain:8.0f} jobs/s\n    fair  {fair:8.0f} jobs/s\n    ratio fair/plain "
          f"{ratio(fair, plain):.2f} (acceptance: >= 0.9)")
    return ratio(fair, plain) >= 0.9


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss_phase(server, kind: str, jobs: int) -> tuple[int, int, float]:
    """Worker RSS (KiB) with ``jobs`` delayed jobs waiting, baseline RSS, Redis bytes per job."""
    from bench import app

    task = app.fair_job if kind == "fair" else app.plain_job
    client = server.client()
    client.flushall()
    with workers(server, 1, pool="threads", concurrency=4) as [idle]:
        time.sleep(2)
        baseline = rss_kib(idle.pid)
    before = int(client.info("memory")["used_memory"])
    for n in range(jobs):
        task.apply_async(args=(f"acct{n % 1000}", time.time(), 0.0), countdown=3600)
    per_job = (int(client.info("memory")["used_memory"]) - before) / jobs
    with workers(server, 1, pool="threads", concurrency=4) as [worker]:
        deadline = time.monotonic() + 180
        while client.llen("celery") > 0 and time.monotonic() < deadline:
            time.sleep(0.5)  # plain Celery pulls every eta task into the worker
        time.sleep(3)
        return rss_kib(worker.pid), baseline, per_job


def report_rss(server, quick: bool) -> bool:
    jobs = 20000 if quick else 100000
    plain, plain_base, plain_bytes = rss_phase(server, "plain", jobs)
    fair, fair_base, fair_bytes = rss_phase(server, "fair", jobs)
    print(f"\n(4) worker RSS with {jobs} delayed jobs waiting (countdown 1 h), threads -c 4")
    print(f"    plain {plain / 1024:8.1f} MiB (idle {plain_base / 1024:.1f} MiB); Redis "
          f"{plain_bytes:.0f} B/job\n    fair  {fair / 1024:8.1f} MiB (idle {fair_base / 1024:.1f}"
          f" MiB); Redis {fair_bytes:.0f} B/job")
    print(f"    fair worker grows {(fair - fair_base) / 1024:.1f} MiB, plain grows "
          f"{(plain - plain_base) / 1024:.1f} MiB")
    return fair - fair_base < 20 * 1024


def claim_latencies(server, accounts: int, jobs: int, samples: int) -> tuple[list[float], float]:
    from celery_fairqueue.envelope import Envelope
    from celery_fairqueue.limits import AccountLimit
    from celery_fairqueue.settings import FairqueueSettings
    from celery_fairqueue.store import FairStore
    from celery_fairqueue.store.connection.connect import make_client
    from celery_fairqueue.store.formats.keys import Keys
    from tests.harness.store_tools import claim_jobs, enqueue_many

    client = server.client()
    client.flushall()
    settings = FairqueueSettings(redis_url=server.url)
    store = FairStore(make_client(server.url), Keys(), settings)
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "bench", "id": "x"}).to_json()
    before = int(client.info("memory")["used_memory"])
    enqueue_many(store, (dict(queue="celery", account=f"account-{n % accounts}",
                              job_id=f"job-{n}:0", envelope=envelope) for n in range(jobs)))
    per_job = (int(client.info("memory")["used_memory"]) - before) / jobs
    no_limit = AccountLimit().pack(0)
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        [job] = claim_jobs(store, ["celery"], 1, "bench", no_limit)
        latencies.append(time.perf_counter() - started)
        store.ack(job)
    return latencies, per_job


def report_claim(server, quick: bool) -> bool:
    many = 20000 if quick else 100000
    samples = 2000
    few, _ = claim_latencies(server, 10, samples + 10, samples)
    lots, per_job = claim_latencies(server, many, many, samples)
    p99_few, p99_lots = percentile(few, 99), percentile(lots, 99)
    print(f"\n(5) claim latency (one job per call, client-side, {samples} calls)")
    print(f"    {10:>7} accounts: p50 {percentile(few, 50) * 1e3:.3f} ms, p99 "
          f"{p99_few * 1e3:.3f} ms")
    print(f"    {many:>7} accounts: p50 {percentile(lots, 50) * 1e3:.3f} ms, p99 "
          f"{p99_lots * 1e3:.3f} ms; Redis {per_job:.0f} B per pending job")
    print(f"    p99 ratio {ratio(p99_lots, p99_few):.2f} (acceptance: <= 2)")
    return p99_lots <= 2 * p99_few


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--only", choices=["noop", "rss", "claim"])
    options = parser.parse_args()
    ok = True
    with redis_server() as server:
        if options.only in (None, "noop"):
            ok &= report_noop(server, options.quick)
        if options.only in (None, "claim"):
            ok &= report_claim(server, options.quick)
        if options.only in (None, "rss"):
            ok &= report_rss(server, options.quick)
    print("\nall acceptance figures met" if ok else "\nSOME ACCEPTANCE FIGURES NOT MET")


if __name__ == "__main__":
    main()
