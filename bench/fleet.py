"""What a trickling job costs Redis as the fleet of idle workers grows: plain Celery beside
FairTask, on one Redis, in one run.

    .venv/bin/python -m bench.fleet [--workers 2,8,24] [--shards 1,16] [--jobs 100]
        [--modes trickle,delayed] [--simulate 500] [--idle]

For each fleet size W, W real ``celery worker --pool threads -c 2`` processes of each kind
idle, then jobs trickle in, one every 50 ms over 5 accounts: ``trickle`` (ready at once) and
``delayed`` (``countdown=0.5``). Redis's own counters (``total_commands_processed``,
``used_cpu_user + used_cpu_sys``) are read around the trickle, the idle fleet's own load
(measured over the seconds just before and after, averaged) taken off, and divided by the
jobs: commands and Redis CPU per job. Pickup is from ``.delay()`` (plus the countdown) to the
task's start.
FairTask runs at each ``--shards`` (``fairqueue_shards``), on one Redis or, ``--cluster``,
on a Redis Cluster of 3 primaries (every node's counters summed).

``--breakdown``: each fair trickle's commands per job by name (Redis's ``commandstats``
around the trickle, the idle fleet's rate of each taken off), to see where a job's commands go.

``--simulate N``: N waiters run the worker's real idle path in light threads of one process
(worker/doorbell.py's ``Doorbell``, the store's BZPOPMIN and claim, the claim settling the
previous job), without a Celery consumer, pool or broker connection: what N idle nodes cost
per trickling job. ``--idle``: Redis commands a second of an idle fleet of 24 of each kind.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from bench._common import percentile, ratio, redis_server, workers
from bench.environment import SHARDS_ENV, STORE_URL_ENV
from bench.fairness import fair_store
from celery_fairqueue.settings import FairqueueSettings

# the package's default fallback poll (bench.app polls every 50 ms unless told)
os.environ["FQ_POLL_INTERVAL"] = str(FairqueueSettings().poll_interval)
ACCOUNTS = [f"acct{n}" for n in range(5)]
GAP_SECONDS = 0.05  # one job every 50 ms
COUNTDOWN = 0.5
IDLE_SECONDS = 5.0  # the idle fleet's load, measured just before and after each trickle


class Cost(NamedTuple):
    commands: float  # Redis commands per job, the idle load taken off
    cpu_us: float  # Redis CPU per job, microseconds, the idle load taken off
    p50_ms: float
    p99_ms: float


#: Every Redis whose counters are read: the bench's redis-server, and the fair store's cluster
#: primaries with ``--cluster`` (each its own counters, summed).
NODES: list = []
#: With ``--breakdown``: (monotonic time, calls by command name) at each reading of counters().
READINGS: list[tuple[float, Counter[str]]] | None = None


def counters(client) -> tuple[int, float]:
    commands, cpu, calls = 0, 0.0, Counter[str]()
    sections = ["stats", "cpu", *(["commandstats"] if READINGS is not None else [])]
    for node in [client, *NODES]:
        info = node.info(*sections)
        commands += int(info["total_commands_processed"])
        cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        calls.update({name.removeprefix("cmdstat_"): int(stat["calls"])
                      for name, stat in info.items() if name.startswith("cmdstat_")})
    if READINGS is not None:
        READINGS.append((time.monotonic(), calls))
    return commands, cpu


def breakdown(jobs: int) -> str:
    """The commands per job by name of the trickle just run (READINGS: the idle fleet's two
    readings before it, its own two, the idle fleet's two after), the idle rate taken off."""
    assert READINGS is not None
    (t0, a0), (t1, a1), (t2, a2), (t3, a3), (t4, a4), (t5, a5) = READINGS[-6:]
    per_job = {}
    for name in a5:
        idle = ((a1[name] - a0[name]) / (t1 - t0) + (a5[name] - a4[name]) / (t5 - t4)) / 2
        per_job[name] = (a3[name] - a2[name] - idle * (t3 - t2)) / jobs
    shown = sorted(((n, v) for n, v in per_job.items() if abs(v) >= 0.05), key=lambda p: -p[1])
    return ", ".join(f"{name} {value:.2f}" for name, value in shown)


def app_of(kind: str):
    if kind == "plain":
        from bench import plain_app
        return plain_app
    from bench import app
    return app


def idle_load(client) -> tuple[float, float]:
    """Redis commands and CPU seconds a second of the fleet as it idles now."""
    commands, cpu = counters(client)
    time.sleep(IDLE_SECONDS)
    after_commands, after_cpu = counters(client)
    return ((after_commands - commands - 1 - len(NODES)) / IDLE_SECONDS,
            (after_cpu - cpu) / IDLE_SECONDS)


def trickle(client, kind: str, mode: str, jobs: int) -> Cost:
    """``jobs`` jobs, one every GAP_SECONDS, to the idle fleet running now; their cost."""
    module = app_of(kind)
    task = module.plain_job if kind == "plain" else module.fair_job
    client.delete("runs")
    before = idle_load(client)
    commands, cpu = counters(client)
    started = time.monotonic()
    countdown = COUNTDOWN if mode == "delayed" else 0.0
    for n in range(jobs):
        account = ACCOUNTS[n % len(ACCOUNTS)]
        enqueued = time.time() + countdown
        if countdown:
            task.apply_async((account, enqueued, 0.0), countdown=countdown)
        else:
            task.delay(account, enqueued, 0.0)
        time.sleep(GAP_SECONDS)
    deadline = time.monotonic() + 60
    polls = 1  # the bench's own LLEN calls are Redis commands too: counted off
    while client.llen("runs") < jobs and time.monotonic() < deadline:
        polls += 1
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    after_commands, after_cpu = counters(client)
    done = client.llen("runs")
    after = idle_load(client)  # the idle fleet's load, before and after the trickle, averaged
    idle_rate = ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2)
    records = [json.loads(r) for r in client.lrange("runs", 0, -1)]
    waits = [(started_at - enqueued) * 1e3 for _, enqueued, started_at, _ in records]
    used = after_commands - commands - idle_rate[0] * elapsed - polls - 1 - len(NODES)
    if READINGS is not None and kind == "fair":
        print(f"    {mode}, S = {os.environ[SHARDS_ENV]}, per job: {breakdown(done)}")
    return Cost(used / max(done, 1), (after_cpu - cpu - idle_rate[1] * elapsed) / max(done, 1)
                * 1e6, percentile(waits, 50), percentile(waits, 99))


def start_fleet(server, kind: str, count: int, shards: int):
    """``count`` idle workers of ``kind``, started side by side (a context manager)."""
    env = {SHARDS_ENV: str(shards)}
    return workers(server, count, app=app_of(kind).__name__, pool="threads", concurrency=2,
                   env=env, parallel=True)


def run_fleet(server, kind: str, count: int, shards: int, modes: Sequence[str],
              jobs: int) -> dict[str, Cost]:
    client = server.client()
    client.flushall()
    os.environ[SHARDS_ENV] = str(shards)
    _reset_stores()
    if NODES:  # the fair store on the cluster: emptied, with the number of shards it had
        for node in NODES:
            node.flushall()
    with start_fleet(server, kind, count, shards):
        time.sleep(3)  # past start-up: first claims, heartbeats, the keeper's election
        return {mode: trickle(client, kind, mode, jobs) for mode in modes}


def _reset_stores() -> None:
    """The bench app's store follows ``fairqueue_shards`` of a new store: forget the old one."""
    from bench import app
    app.app.conf.fairqueue_shards = int(os.environ[SHARDS_ENV])
    for attribute in ("_fairqueue_settings", "_fairqueue_store"):
        if hasattr(app.app, attribute):
            delattr(app.app, attribute)


def simulate(server, waiters: int, modes: Sequence[str], jobs: int) -> dict[str, Cost]:
    """``waiters`` simulated idle workers (the real Doorbell and claim, no Celery consumer),
    and one real worker keeping the time for the delayed mode; see the module's docstring."""
    from bench import app
    from celery_fairqueue.settings import settings_for
    from celery_fairqueue.store import open_store
    from celery_fairqueue.worker.doorbell import Doorbell

    client = server.client()
    client.flushall()
    os.environ[SHARDS_ENV] = "1"
    _reset_stores()
    settings = settings_for(app.app)
    store = open_store(settings)
    stop = threading.Event()
    queues = ["celery"]

    def waiter(n: int) -> None:
        woken = threading.Event()
        bell = Doorbell(store, queues, woken.set)
        bell.keeps = []  # the simulated waiters keep no time (the real worker does)
        bell.idle.set()
        bell.start()
        token = f"sim{n}"
        try:
            while not stop.is_set():
                if not woken.wait(1.0):
                    continue
                woken.clear()
                bell.take_rings()
                for lease in store.claim(queues, 1, token, "", keeps_time=False).leases:
                    _run(client, lease)
                    lease.success = True  # its ack goes alone, as a drained worker's does
                    store.claim([], 0, token, "", acks=[lease])
        except Exception as exc:  # a bench: say it, do not hide it
            print(f"simulated waiter {n} failed: {exc!r}")
        finally:
            bell.stop()

    results: dict[str, Cost] = {}
    with workers(server, 1, app=app.__name__, pool="threads", concurrency=2), \
            ThreadPoolExecutor(waiters) as pool:
        for n in range(waiters):
            pool.submit(waiter, n)
        time.sleep(5)
        for mode in modes:
            results[mode] = trickle(client, "fair", mode, jobs)
        stop.set()
    return results


def _run(client, lease) -> None:
    """A simulated waiter runs the job as the task would: it records its start."""
    from celery_fairqueue.worker.channel import read_envelope

    args = json.loads(read_envelope(lease).body)[0]
    client.rpush("runs", json.dumps([args[0], args[1], time.time(), time.time()]))


def _cluster_nodes() -> list:
    """A client of each primary of the cluster the store is on (bench.fairness.fair_store:
    three primaries, no replicas, each a startup node of its URL)."""
    import redis

    return [redis.Redis.from_url(url.replace("redis+cluster://", "redis://"))
            for url in os.environ[STORE_URL_ENV].split(";")]


def idle_rates(server, count: int, seconds: float = 10.0) -> dict[str, float]:
    rates = {}
    for kind in ("plain", "fair"):
        client = server.client()
        client.flushall()
        with start_fleet(server, kind, count, 1):
            time.sleep(5)
            before, _ = counters(client)
            time.sleep(seconds)
            after, _ = counters(client)
        rates[kind] = (after - before - 1) / seconds
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="2,8,24")
    parser.add_argument("--shards", default="1,16")
    parser.add_argument("--modes", default="trickle,delayed")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--simulate", type=int, default=0)
    parser.add_argument("--idle", action="store_true")
    parser.add_argument("--cluster", action="store_true",
                        help="the fair store on a Redis Cluster of 3 primaries")
    parser.add_argument("--breakdown", action="store_true",
                        help="each fair trickle's commands per job, by name")
    options = parser.parse_args()
    global READINGS
    READINGS = [] if options.breakdown else None
    fleet = [int(w) for w in options.workers.split(",") if w]
    shard_counts = [int(s) for s in options.shards.split(",") if s]
    modes = options.modes.split(",")
    ok = True
    with redis_server() as server, fair_store(options.cluster):
        if options.cluster:
            NODES.extend(_cluster_nodes())
        table: dict[tuple[str, int, int], dict[str, Cost]] = {}
        for count in fleet:
            table["plain", count, 1] = run_fleet(server, "plain", count, 1, modes, options.jobs)
            for shards in shard_counts:
                table["fair", count, shards] = run_fleet(server, "fair", count, shards, modes,
                                                         options.jobs)
        print(f"\nbench.fleet: {options.jobs} jobs, one every {GAP_SECONDS * 1e3:.0f} ms over "
              f"{len(ACCOUNTS)} accounts, to W idle workers (threads -c 2); the idle load "
              "taken off")
        for mode in modes:
            print(f"\n  {mode}{f' (countdown {COUNTDOWN} s)' if mode == 'delayed' else ''}")
            print("    kind   S    W   commands/job   Redis CPU/job   pickup p50    p99   "
                  "CPU fair/plain")
            for (kind, count, shards), costs in table.items():
                cost = costs[mode]
                plain = table["plain", count, 1][mode]
                print(f"    {kind:5} {shards:2} {count:4}   {cost.commands:10.1f}   "
                      f"{cost.cpu_us:10.0f} us   {cost.p50_ms:7.1f} ms {cost.p99_ms:6.1f} ms   "
                      f"{ratio(cost.cpu_us, plain.cpu_us):5.2f}")
            ok &= _acceptance(table, mode, fleet, shard_counts)
        if options.simulate:
            simulated = simulate(server, options.simulate, modes, options.jobs)
            for mode, cost in simulated.items():
                base = table.get(("fair", min(fleet), 1), {}).get(mode)
                growth = f", {ratio(cost.commands, base.commands):.2f}x W = {min(fleet)}" \
                    if base else ""
                print(f"\n  {options.simulate} simulated waiters, {mode}: {cost.commands:.1f} "
                      f"commands/job{growth}, pickup p50 {cost.p50_ms:.1f} ms, p99 "
                      f"{cost.p99_ms:.1f} ms")
                ok &= not base or ratio(cost.commands, base.commands) <= 1.5
        if options.idle:
            rates = idle_rates(server, 24)
            print(f"\n  idle fleet of 24: plain {rates['plain']:.1f} commands/s, fair "
                  f"{rates['fair']:.1f}/s, fair/plain {ratio(rates['fair'], rates['plain']):.2f}"
                  " (acceptance <= 1.5)")
            ok &= ratio(rates["fair"], rates["plain"]) <= 1.5
    print("\nALL ACCEPTANCE FIGURES MET" if ok else "\nSOME ACCEPTANCE FIGURES NOT MET")


def _acceptance(table, mode: str, fleet: Sequence[int], shard_counts: Sequence[int]) -> bool:
    ok = True
    small, big = min(fleet), max(fleet)
    for shards in shard_counts:
        low, high = table["fair", small, shards][mode], table["fair", big, shards][mode]
        plain_high = table["plain", big, 1][mode]
        growth = ratio(high.commands, low.commands)
        most = max(table["fair", w, shards][mode].commands for w in fleet)
        cpu = ratio(high.cpu_us, plain_high.cpu_us)
        cpu_growth = ratio(high.cpu_us, low.cpu_us)
        p50 = max(table["fair", w, shards][mode].p50_ms - table["plain", w, 1][mode].p50_ms
                  for w in (small, big))
        p99 = max(table["fair", w, shards][mode].p99_ms - table["plain", w, 1][mode].p99_ms
                  for w in (small, big))
        print(f"    S = {shards}: commands W {big}/W {small} {growth:.2f} (<= 1.2), most "
              f"{most:.1f} (<= 45); Redis CPU W {big} fair/plain {cpu:.2f} (<= 2.5), "
              f"fair W {big}/W {small} {cpu_growth:.2f} (<= 1.2); pickup fair - plain p50 "
              f"{p50:+.1f} ms, p99 {p99:+.1f} ms "
              f"({'<= +2 / +5' if mode == 'trickle' else 'p99 <= +50'})")
        ok &= growth <= 1.2 and most <= 45 and cpu <= 2.5 and cpu_growth <= 1.2
        ok &= (p50 <= 2 and p99 <= 5) if mode == "trickle" else p99 <= 50
    return ok


if __name__ == "__main__":
    main()
