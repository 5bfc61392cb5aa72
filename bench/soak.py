"""Soak: a steady multi-account workload for a long time, workers SIGKILLed now and then.

    .venv/bin/python -m bench.soak [--minutes 30] [--rate 100] [--accounts 1000]
                                   [--kill-every 60]

One redis-server (AOF, ``appendfsync everysec``) and two workers (threads, 4 slots each). A
producer enqueues ``--rate`` fair jobs a second over ``--accounts`` accounts, a third of them
for one whale account; jobs take 2-20 ms, one in 50 times out once and is retried, one in 500
fails for good. Every ``--kill-every`` seconds one worker is SIGKILLed and started again.
Leases are 5 s and business keys are kept 120 s, so the store should reach a steady size.

Prints a line a minute (jobs done, backlog, wait p99, the fair store's memory in Redis, keys,
worker RSS) and at the end the verdict: every job ran exactly once or was dead-lettered, and
neither the store nor the workers kept growing. Exits non-zero on a lost or duplicated job.
Not part of the test suite: it takes as long as you ask.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time

from bench._common import percentile, redis_server, workers
from bench.throughput import rss_kib
from celery_fairqueue.store import store_for
from tests.harness import child_pids

SOAK_ENV = {"FQ_LEASE_SECONDS": "5", "FQ_HEARTBEAT_SECONDS": "1", "FQ_JOB_RETENTION": "120"}
FLAGS = {"pool": "threads", "concurrency": 4}
DRAIN_SECONDS = 120


def produce(app, rate: float, accounts: int, stop: threading.Event, sent: list[int]) -> None:
    """Enqueue ``rate`` jobs a second until ``stop``; ``sent[0]`` counts them."""
    rng = random.Random(1)
    interval, due = 1 / rate, time.monotonic()
    while not stop.is_set():
        n = sent[0]
        account = "whale" if rng.random() < 1 / 3 else f"acct{rng.randrange(accounts)}"
        roll = rng.random()
        fail = "permanent" if roll < 0.002 else "once" if roll < 0.022 else ""
        app.soak_job.delay(account, n, time.time(), rng.uniform(0.002, 0.02), fail)
        sent[0] = n + 1
        due += interval
        time.sleep(max(0.0, due - time.monotonic()))


def worker_rss_mib(running) -> float:
    pids = [w.pid for w in running] + [c for w in running for c in child_pids(w.pid)]
    return sum(rss_kib(pid) for pid in pids) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=100, help="jobs enqueued per second")
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--kill-every", type=float, default=60, help="seconds between kills")
    options = parser.parse_args()
    os.environ.update(SOAK_ENV)
    with redis_server() as server:
        server.client().config_set("appendonly", "yes")
        from bench import app  # reads the server's URL from the environment

        client = server.client(decode_responses=True)
        store = store_for(app.app)
        rng = random.Random(2)
        stop, sent, kills = threading.Event(), [0], 0
        samples: list[tuple[float, float, int]] = []  # minute, Redis MiB, worker RSS MiB
        with workers(server, 2, **FLAGS) as running:
            producer = threading.Thread(target=produce, daemon=True,
                                        args=(app, options.rate, options.accounts, stop, sent))
            started = time.monotonic()
            producer.start()
            next_kill = started + options.kill_every
            next_report = started + 60
            end = started + options.minutes * 60
            print(f"soak: {options.minutes:g} min, {options.rate:g} jobs/s over "
                  f"{options.accounts} accounts (+ a whale), a SIGKILL every "
                  f"{options.kill_every:g} s")
            while time.monotonic() < end:
                time.sleep(0.5)
                now = time.monotonic()
                if now >= next_kill:
                    victim = rng.randrange(len(running))
                    running[victim].kill()
                    running[victim].start(60)
                    kills += 1
                    next_kill = now + options.kill_every
                if now >= next_report:
                    next_report += 60
                    samples.append(report(client, store, running, started, sent[0], kills))
            stop.set()
            producer.join()
            drain_until = time.monotonic() + DRAIN_SECONDS
            while time.monotonic() < drain_until and not settled(client, store, sent[0]):
                time.sleep(1)
            samples.append(report(client, store, running, started, sent[0], kills))
            verdict(client, store, sent[0], kills, samples)


def settled(client, store, sent: int) -> bool:
    return client.hlen("soak:done") + store.stats().get("dead", 0) >= sent


def report(client, store, running, started: float, sent: int, kills: int) -> tuple:
    minute = (time.monotonic() - started) / 60
    waits = [float(w) for w in client.lpop("soak:waits", 1_000_000) or []]
    counts = store.counts("celery")
    memory = sum(client.memory_usage(key, samples=0) or 0
                 for key in client.scan_iter(f"{store.keys.tag}*")) / 2**20
    rss = worker_rss_mib(running)
    print(f"  {minute:5.1f} min  sent {sent:7d}  done {client.hlen('soak:done'):7d}  dead "
          f"{store.stats().get('dead', 0):4d}  ready {counts['ready']:5d}  wait p99 "
          f"{percentile(waits, 99):6.3f} s  store {memory:6.1f} MiB, {client.dbsize():5d} keys"
          f"  workers {rss:6.1f} MiB  kills {kills}", flush=True)
    return minute, memory, rss


def verdict(client, store, sent: int, kills: int, samples: list[tuple]) -> None:
    done = {k: int(v) for k, v in client.hgetall("soak:done").items()}
    duplicates = sum(1 for v in done.values() if v > 1)
    dead = store.stats().get("dead", 0)
    lost = sent - len(done) - dead
    stats = store.stats()
    half = samples[len(samples) // 2]
    last = samples[-1]
    print(f"\nsoak: {sent} jobs, {kills} kills, {lost} lost, {duplicates} duplicates, "
          f"{dead} dead-lettered, {stats.get('reaped', 0)} leases reaped; fair store "
          f"{half[1]:.1f} MiB at half time, {last[1]:.1f} MiB at the end; worker RSS "
          f"{half[2]:.1f} MiB at half time, {last[2]:.1f} MiB at the end")
    raise SystemExit(0 if lost == 0 and duplicates == 0 else 1)


if __name__ == "__main__":
    main()
