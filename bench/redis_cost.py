"""What a job costs Redis: plain Celery beside FairTask, on one Redis, one run.

    .venv/bin/python -m bench.redis_cost [--quick] [--workers N --concurrency C]
        [--only cpu|pickup|enqueue|bulk|idle|script|commands|memory]

Plain Celery runs in ``bench.plain_app`` (nothing of this package installed); FairTask in
``bench.app`` with the package's default poll interval (30 s: a fallback, the store wakes idle
workers). Both kinds' workers run with the harness flags (no gossip, mingle or heartbeat).

(1) Redis CPU per job: Redis's own ``used_cpu_user + used_cpu_sys`` around an enqueue loop and
    around ``--workers`` workers (threads, ``--concurrency`` slots each; 1 and 4 by default)
    draining it; no-op tasks with a business key. FairTask without and with the recorder's
    event stream (the stream exists; nobody reads it). Prints microseconds per job and the
    implied jobs/s per Redis core, the best of three runs each, and Redis commands per job
    (those inside scripts counted); then how much of each kind's CPU went to running scripts
    (commandstats) and how much to the rest, and the enqueue phase's CPU beside plain's.
(2) Idle pickup: one job at a time to an idle worker; p50/p99 from ``.delay()`` to the start.
(3) Enqueue: ``.delay()`` calls/s from one thread; (3b) a ``group`` of keyed tasks, its wall time
    and Redis CPU per job.
(4) Idle Redis commands/s with 4 and 16 idle workers (threads -c 4 each).
(5) What a script call costs Redis before its first command: an empty script, and one that only
    defines the library helpers (``scripts/lib``), each given the keys and arguments of an enqueue;
    then the enqueue script beside its floor (``FLOOR``: the six commands of a keyed enqueue
    into an account with ready jobs, every string built by the producer, no check and no
    helper) and an LPUSH of the same message, one call at a time after a producer's work, in
    turns of ``TURN`` calls each, on one Redis.
(6) and (7): the exact commands of each script call, and the bytes of a pending job
    (``bench.script_cost``).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import NamedTuple

from bench._common import fresh, percentile, ratio, redis_server, runs, workers
from bench.script_cost import report_commands, report_memory
from celery_fairqueue.settings import FairqueueSettings

# the package's default fallback poll, for the workers and the app (bench.app polls every 50 ms)
os.environ["FQ_POLL_INTERVAL"] = str(FairqueueSettings().poll_interval)
FLAGS = {"pool": "threads", "concurrency": 4}
KINDS = ("plain", "fair", "fair+stream")
ROUNDS = 3


def redis_cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def app_of(kind: str):
    """The bench app module of ``kind``: its tasks and its worker's ``-A``."""
    if kind == "plain":
        from bench import plain_app
        return plain_app
    from bench import app
    return app


class Cost(NamedTuple):
    enqueue: float  # Redis CPU seconds per job
    drain: float
    commands: float  # Redis commands per job, enqueue to drained, those inside scripts counted
    scripts: float  # of the Redis CPU, seconds per job spent running scripts (commandstats)

    @property
    def total(self) -> float:
        return self.enqueue + self.drain


def commands_processed(client) -> int:
    return int(client.info("stats")["total_commands_processed"])


SCRIPT_COMMANDS = ("evalsha", "eval", "fcall")


def command_seconds(client, names: tuple[str, ...] = SCRIPT_COMMANDS) -> float:
    """Seconds Redis spent in the commands ``names`` since the last ``CONFIG RESETSTAT``; for
    the script commands, the whole script calls (their inner commands included)."""
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in names) / 1e6


class Shape(NamedTuple):
    """The draining workers of the CPU phase: how many, and the threads of each."""
    workers: int
    concurrency: int

    def __str__(self) -> str:
        return f"{self.workers}x{self.concurrency}"

    @property
    def limit(self) -> float:
        """fair/plain Redis CPU accepted: many slots let each claim carry several jobs and
        acks, so the fixed cost of a script call is shared (2x8: 1.3); few slots share less."""
        return 1.3 if self.workers * self.concurrency >= 16 else 1.5


def cpu_phase(server, kind: str, jobs: int, shape: Shape) -> Cost:
    """What ``jobs`` cost Redis: enqueued, then drained by the workers of ``shape``."""
    module = app_of(kind)
    task = module.plain_keyed_noop if kind == "plain" else module.fair_keyed_noop
    client = fresh(server, kind)
    client.config_resetstat()
    commands = commands_processed(client)
    before = redis_cpu(client)
    for n in range(jobs):
        task.delay(f"acct{n % 10}", n)
    enqueue = (redis_cpu(client) - before) / jobs
    before = redis_cpu(client)
    with workers(server, shape.workers, app=module.__name__, pool="threads",
                 concurrency=shape.concurrency):
        deadline = time.monotonic() + 300
        while int(client.get("done") or 0) < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind}: only {client.get('done')} of {jobs} done")
            time.sleep(0.05)
        drain = (redis_cpu(client) - before) / jobs
        commands = commands_processed(client) - commands
    return Cost(enqueue, drain, commands / jobs, command_seconds(client) / jobs)


def report_cpu(server, quick: bool, shape: Shape) -> bool:
    """Each kind's best of ``ROUNDS`` runs, the kinds taking turns: a busy machine only adds
    CPU time, so the least of several runs is the figure that other work disturbed least.
    Commands per job do not depend on the machine: they say where the time goes."""
    jobs = 2000 if quick else 10000
    runs_of: dict[str, list[Cost]] = {kind: [] for kind in KINDS}
    for _ in range(ROUNDS):
        for kind in KINDS:
            runs_of[kind].append(cpu_phase(server, kind, jobs, shape))
    results = {kind: min(costs, key=lambda cost: cost.total) for kind, costs in runs_of.items()}
    print(f"\n(1) Redis CPU per job, {jobs} no-op jobs with a business key; drain by "
          f"{shape.workers} worker(s), threads -c {shape.concurrency} ({shape}); best of "
          f"{ROUNDS} runs each, taking turns")
    print(f"    {'':12}{'enqueue':>10}{'drain':>10}{'total':>10}{'jobs/s per Redis core':>24}"
          f"{'commands/job':>14}")
    plain_total = results["plain"].total
    for kind, cost in results.items():
        print(f"    {kind:12}{cost.enqueue * 1e6:8.0f}us{cost.drain * 1e6:8.0f}us"
              f"{cost.total * 1e6:8.0f}us{1 / cost.total:24.0f}{cost.commands:14.1f}"
              f"   fair/plain {ratio(cost.total, plain_total):.2f}")
    print("    where it goes: in scripts (their commands and Lua) / the rest (other commands, "
          "reading requests, writing replies)")
    for kind, cost in results.items():
        rest = cost.total - cost.scripts
        print(f"    {kind:12}{cost.scripts * 1e6:8.0f}us{rest * 1e6:10.0f}us")
    # the enqueue loop's own best: it runs before the drain, alone, in every round
    enqueues = {kind: min(cost.enqueue for cost in costs) for kind, costs in runs_of.items()}
    print("    enqueue phase alone (best of its rounds): "
          + "   ".join(f"{kind} {enqueues[kind] * 1e6:.0f}us" for kind in KINDS))
    worst = max(ratio(results[kind].total, plain_total) for kind in KINDS[1:])
    worst_enqueue = max(ratio(enqueues[kind], enqueues["plain"]) for kind in KINDS[1:])
    most = max(results[kind].commands for kind in KINDS[1:])
    print(f"    acceptance: fair/plain Redis CPU, with and without the stream, <= "
          f"{shape.limit} for {shape}: {worst:.2f}")
    print(f"    acceptance: enqueue fair/plain Redis CPU <= 2.0: {worst_enqueue:.2f}")
    print(f"    acceptance: fair commands per job, with and without the stream, <= 30: "
          f"{most:.1f}")
    return worst <= shape.limit and worst_enqueue <= 2.0 and most <= 30


def pickup_phase(server, kind: str, samples: int) -> list[float]:
    module = app_of(kind)
    task = module.plain_job if kind == "plain" else module.fair_job
    client = fresh(server, kind)
    with workers(server, 1, app=module.__name__, **FLAGS):
        time.sleep(1)
        for n in range(samples):
            time.sleep(random.uniform(0.05, 0.15))  # an idle worker, at a random phase
            task.delay("acct", time.time(), 0.0)
            deadline = time.monotonic() + 10
            while client.llen("runs") <= n and time.monotonic() < deadline:
                time.sleep(0.001)
    return [started - enqueued for _, enqueued, started, _ in runs(client)]


def report_pickup(server, quick: bool) -> bool:
    samples = 50 if quick else 200
    plain, fair = (pickup_phase(server, kind, samples) for kind in ("plain", "fair"))
    print(f"\n(2) idle pickup, {samples} jobs one at a time: .delay() to task start")
    for kind, waits in (("plain", plain), ("fair", fair)):
        print(f"    {kind:6} p50 {percentile(waits, 50) * 1e3:6.1f} ms   p99 "
              f"{percentile(waits, 99) * 1e3:6.1f} ms")
    p50 = (percentile(fair, 50) - percentile(plain, 50)) * 1e3
    p99 = (percentile(fair, 99) - percentile(plain, 99)) * 1e3
    print(f"    fair - plain: p50 {p50:+.1f} ms (acceptance <= +2), p99 {p99:+.1f} ms "
          "(acceptance <= +10)")
    return p50 <= 2 and p99 <= 10


def enqueue_phase(server, kind: str, calls: int) -> tuple[float, float]:
    """``.delay()`` calls a second, and the Redis time of the call that stores each job (plain
    Celery's LPUSH, the fair enqueue script) in seconds."""
    module = app_of(kind)
    task = module.plain_keyed_noop if kind == "plain" else module.fair_keyed_noop
    client = fresh(server, kind)
    client.config_resetstat()
    started = time.perf_counter()
    for n in range(calls):
        task.delay(f"acct{n % 10}", n)
    rate = calls / (time.perf_counter() - started)
    return rate, command_seconds(client, ("lpush",) if kind == "plain" else SCRIPT_COMMANDS) / calls


def report_enqueue(server, quick: bool) -> bool:
    calls = 2000 if quick else 10000
    best = {kind: max(enqueue_phase(server, kind, calls) for _ in range(2)) for kind in KINDS}
    rates = {kind: rate for kind, (rate, _) in best.items()}
    print(f"\n(3) enqueue, {calls} .delay() calls from one thread (best of 2); Redis time of the "
          "call that stores the job")
    for kind, (rate, redis_time) in best.items():
        print(f"    {kind:12}{rate:8.0f} calls/s   fair/plain {ratio(rate, rates['plain']):.2f}"
              f"{redis_time * 1e6:10.1f} us in Redis")
    worst = min(ratio(rates[kind], rates["plain"]) for kind in KINDS[1:])
    print(f"    acceptance: fair/plain, with and without the stream, >= 0.9: {worst:.2f}")
    return worst >= 0.9


def bulk_phase(server, kind: str, jobs: int) -> tuple[float, float]:
    """A ``group`` of ``jobs`` keyed no-op tasks over 100 accounts, sent: the wall seconds of
    its ``apply_async``, and Redis CPU seconds per job."""
    from celery import group
    module = app_of(kind)
    task = module.plain_keyed_noop if kind == "plain" else module.fair_keyed_noop
    client = fresh(server, kind)
    jobs_group = group(task.s(f"acct{n % 100}", n) for n in range(jobs))
    before = redis_cpu(client)
    started = time.perf_counter()
    jobs_group.apply_async()
    wall = time.perf_counter() - started
    return wall, (redis_cpu(client) - before) / jobs


def report_bulk(server, quick: bool) -> bool:
    """Each kind's best of ``ROUNDS`` groups, the kinds taking turns."""
    jobs = 2000 if quick else 10000
    runs_of: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for _ in range(ROUNDS):
        for kind in KINDS:
            runs_of[kind].append(bulk_phase(server, kind, jobs))
    walls = {kind: min(wall for wall, _ in costs) for kind, costs in runs_of.items()}
    cpus = {kind: min(cpu for _, cpu in costs) for kind, costs in runs_of.items()}
    print(f"\n(3b) bulk: group(...).apply_async() of {jobs} keyed no-op tasks over 100 "
          f"accounts (best of {ROUNDS} each, taking turns)")
    for kind in KINDS:
        print(f"    {kind:12}{walls[kind]:8.2f} s  {jobs / walls[kind]:8.0f} jobs/s   "
              f"plain/fair wall {ratio(walls['plain'], walls[kind]):.2f}"
              f"{cpus[kind] * 1e6:8.1f} us Redis CPU/job   fair/plain "
              f"{ratio(cpus[kind], cpus['plain']):.2f}")
    faster = min(ratio(walls["plain"], walls[kind]) for kind in KINDS[1:])
    cpu = max(ratio(cpus[kind], cpus["plain"]) for kind in KINDS[1:])
    print(f"    acceptance: fair group at least 2x faster than plain's: {faster:.2f}x; "
          f"Redis CPU/job fair/plain <= 1.0: {cpu:.2f}")
    return faster >= 2.0 and cpu <= 1.0


def idle_phase(server, kind: str, count: int, seconds: float) -> float:
    client = fresh(server, kind)
    with workers(server, count, app=app_of(kind).__name__, **FLAGS):
        time.sleep(3)  # past start-up
        before = int(client.info("stats")["total_commands_processed"])
        time.sleep(seconds)
        return (int(client.info("stats")["total_commands_processed"]) - before - 2) / seconds


def report_idle(server, quick: bool) -> bool:
    seconds = 5.0 if quick else 10.0
    print(f"\n(4) idle Redis commands/s over {seconds:.0f} s (threads -c 4 workers)")
    ok = True
    for count in (4, 16):
        plain = idle_phase(server, "plain", count, seconds)
        fair = idle_phase(server, "fair", count, seconds)
        print(f"    {count:2} workers: plain {plain:7.1f}/s   fair {fair:7.1f}/s   fair/plain "
              f"{ratio(fair, plain):.2f}")
        ok &= count != 16 or fair <= 1.5 * plain
    print("    acceptance: 16 idle fair workers <= 1.5x plain's (the queue's time keeper waits "
          "and sweeps every 0.5 s)")
    return ok


def report_script(server, quick: bool) -> None:
    from bench import app
    from celery_fairqueue.store import store_for
    from celery_fairqueue.store.connection.door import wire
    from celery_fairqueue.store.connection.lua import LIBRARY_END, load_script

    store = store_for(app.app)
    keys = store._keys_for("enqueue", [store.keys.queue("celery")])
    args = [wire(a) for a in store._enqueue_args(queue="celery", account="acct0", job_id="job",
                                                 envelope="x" * 900, job_key="key")]
    source = load_script("enqueue").source
    helpers = source[:source.index(LIBRARY_END)]
    calls = 5000 if quick else 20000
    print(f"\n(5) a script call's cost before its first command, {calls} calls given the "
          f"{len(keys) + len(args)} keys and arguments of an enqueue")
    for name, body in (("empty script", "return 1"), ("library helpers", helpers + "return 1")):
        client = fresh(server, "fair")
        sha = client.script_load(body)
        client.config_resetstat()
        for _ in range(calls):
            client.evalsha(sha, len(keys), *keys, *args)
        print(f"    {name:18}{command_seconds(client) / calls * 1e6:6.1f} us a call")
    report_floor(server, store, calls // 4)


#: What an enqueue script cannot do without: the commands of a keyed enqueue into an account
#: with ready jobs, the event stream on (enqueue.lua's count), given every string but those
#: made of Redis's clock. KEYS: records, stats, the account's FIFO in the queue, the event
#: stream, the business key's string; ARGV: job id, account, the record's head and tail, the
#: event's task name and arguments, queue, business key.
FLOOR = """
local t = redis.call('TIME')
local seq = '0' .. t[1] .. string.format('%06d', t[2])
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3] .. seq .. ARGV[4]) == 0 then return {0} end
redis.call('SET', KEYS[5], ARGV[1], 'NX')
redis.call('ZCARD', KEYS[3])
redis.call('ZADD', KEYS[3], 0, seq .. '|' .. ARGV[1])
redis.call('XADD', KEYS[4], 'NOMKSTREAM', 'MAXLEN', '~', 1000000, '*', 'e', 'enqueued',
           'job', ARGV[1], 'q', ARGV[7], 'a', ARGV[2], 'k', ARGV[8], 't', ARGV[5],
           'args', ARGV[6], 'at', seq, 'due', seq)
return {1, ARGV[1]}
"""
TURN = 250


def report_floor(server, store, calls: int) -> None:
    """The enqueue script's Redis time a call beside ``FLOOR``'s and an LPUSH's, each call
    after building a Celery message as ``.delay()`` does (the producer's work, between the
    calls of a real producer, is part of the regime: it leaves Redis's caches cold)."""
    import json
    import uuid

    from bench import app
    from bench._common import message

    client = fresh(server, "fair+stream")
    shard = store.shards[0]
    shard.forget_recording()
    enqueue = shard._scripts["enqueue"]
    floor_sha = client.script_load(FLOOR)
    queue = store.keys.queue("celery")
    spent = {"enqueue script": 0.0, "floor": 0.0, "LPUSH": 0.0}

    def call(kind: str, n: int) -> None:
        task_id = str(uuid.uuid4())
        body = app.app.amqp.as_task_v2(task_id, "bench.app.fair_keyed_message",
                                       args=(f"acct{n % 10}", n, message(n))).body
        args = shard._enqueue_args(queue="celery", account=f"acct{n % 10}",
                                   job_id=f"{task_id}:0", envelope=json.dumps(body),
                                   job_key=task_id, task="bench.app.fair_keyed_message",
                                   shown_args='{"n": 1}')
        if kind == "LPUSH":
            client.lpush("celery", args[-1])
        elif kind == "floor":
            client.evalsha(floor_sha, 5, store.keys.records, store.keys.stats,
                           queue.fifo(args[1]), store.keys.events, store.keys.job_key(task_id),
                           f"{task_id}:0",
                           args[1], args[3], args[-1], args[7], args[8], args[2], args[5])
        else:
            enqueue(keys=shard._keys_for("enqueue", [queue]),
                    args=shard._args_for("enqueue", [*args, ""]), client=client)

    for turn in range(calls // TURN):
        for kind in spent:
            client.config_resetstat()
            for n in range(turn * TURN, (turn + 1) * TURN):
                call(kind, n)
            spent[kind] += command_seconds(client, ("lpush",) if kind == "LPUSH"
                                           else SCRIPT_COMMANDS)
    done = calls // TURN * TURN
    # each script stored every job and wrote its event: the full path was measured
    assert client.hlen(store.keys.records) == client.xlen(store.keys.events) == 2 * done
    print(f"    one enqueue at a time, {done} calls each, in turns of {TURN}, the event stream on:")
    for kind, seconds in spent.items():
        print(f"    {kind:18}{seconds / done * 1e6:6.1f} us a call   "
              f"enqueue script / this {spent['enqueue script'] / seconds:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--workers", type=int, default=1, help="draining workers in (1)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="threads of each draining worker in (1)")
    parser.add_argument("--only", choices=["cpu", "pickup", "enqueue", "bulk", "idle",
                                           "script", "commands", "memory"])
    options = parser.parse_args()
    ok = True
    with redis_server() as server:
        if options.only in (None, "cpu"):
            ok &= report_cpu(server, options.quick, Shape(options.workers, options.concurrency))
        if options.only in (None, "pickup"):
            ok &= report_pickup(server, options.quick)
        if options.only in (None, "enqueue"):
            ok &= report_enqueue(server, options.quick)
        if options.only in (None, "bulk"):
            ok &= report_bulk(server, options.quick)
        if options.only in (None, "idle"):
            ok &= report_idle(server, options.quick)
        if options.only in (None, "script"):
            report_script(server, options.quick)
        if options.only in (None, "commands"):
            ok &= report_commands(server)
        if options.only in (None, "memory"):
            report_memory(server)
    print("\nall acceptance figures met" if ok else "\nSOME ACCEPTANCE FIGURES NOT MET")


if __name__ == "__main__":
    main()
