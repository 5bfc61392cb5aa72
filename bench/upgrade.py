"""Upgrading a live store from layout format 1 to 2, at size (issue 46).

    .venv/bin/python -m bench.upgrade [--jobs 100000] [--accounts 1000] [--kill]

The store of format 1 is written and worked by the release before format 2, its own code out
of the repository's history (tests/harness/format1.py): ``--jobs`` pending jobs over
``--accounts`` accounts, one in ten delayed, some leased by a worker that then died, some
dead-lettered, a few accounts rate-limited (deferred). Then, on the same Redis: a worker of the
old release runs for a while beside a producer of this version (which writes as format 1 does
while the store is at 1), and ``fairqueue upgrade`` (FormatUpgrader) converts it while the
producer goes on enqueuing; ``--kill`` runs it in a subprocess, SIGKILLs it halfway and runs it
again. ``SLOWLOG`` logs every call meanwhile (threshold 0): the bench prints the longest call of
the conversion (upgrade_fifo.lua) and of all calls. Last, this version's store API drains the
store and checks that every job ran once: none lost, none twice.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench._common import ROOT, redis_server
from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store.shards.format_upgrade import FormatUpgrader
from celery_fairqueue.store.shards.opening import open_store
from celery_fairqueue.store.shards.sharded import ShardedStore
from tests.harness.format1 import Format1Process, format1_tree

READY = "{fairqueue}:queue:default:ready"
NO_LIMIT = AccountLimit().pack(0)
SLOW_MS = 50.0  # the acceptance: no call of the conversion over 50 ms


def settings(url: str) -> FairqueueSettings:
    return FairqueueSettings(redis_url=url, shards_check_interval=1.0)


def put(store: ShardedStore, n: int, accounts: int) -> str:
    account, task_id = f"acct-{n % accounts}", f"new-{n}"
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "t", "id": task_id,
                                                        "fairqueue_account": account})
    return store.enqueue(queue="default", account=account, job_id=delivery_id(task_id, 0),
                         envelope=envelope.to_json(), job_key=f"newkey-{n}").job_id


def upgrade(url: str, kill: bool, client) -> float:
    """Run the upgrade (``kill``: in a subprocess, SIGKILLed once a third is converted, then
    again here); its seconds."""
    started = time.monotonic()
    if kill:
        script = ("import sys; from celery_fairqueue.settings import FairqueueSettings; "
                  "from celery_fairqueue.store.shards.format_upgrade import FormatUpgrader; "
                  "FormatUpgrader(FairqueueSettings(redis_url=sys.argv[1], "
                  "shards_check_interval=1.0), settle=0.5).run()")
        child = subprocess.Popen([sys.executable, "-c", script, url], cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        ready = client.zcard(READY)
        while client.zcard(READY) > ready * 2 / 3 and child.poll() is None:
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        print(f"  killed the upgrade with {client.zcard(READY)} of {ready} jobs left to "
              f"convert (format {client.get('{fairqueue}:format')})")
    FormatUpgrader(settings(url), settle=0.5, say=lambda line: print("  " + line)).run()
    return time.monotonic() - started


def slowest(client, sha: str) -> tuple[float, float, int]:
    """The longest conversion call, the longest call of all (ms), and how many conversion
    calls SLOWLOG holds."""
    entries = client.slowlog_get(1_000_000)
    ours = [e["duration"] / 1000 for e in entries
            if any(sha in (part.decode() if isinstance(part, bytes) else str(part))
                   for part in (e.get("command") or "").split()[:2])]
    return max(ours, default=0.0), max((e["duration"] / 1000 for e in entries),
                                       default=0.0), len(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--accounts", type=int, default=1_000)
    parser.add_argument("--kill", action="store_true")
    options = parser.parse_args()
    tree = format1_tree(Path(tempfile.mkdtemp(prefix="fq-format1-")))
    with redis_server() as server:
        client = server.client(decode_responses=True)
        old = Format1Process(tree, server.url)
        started = time.monotonic()
        left = old.run("fill", jobs=options.jobs, accounts=options.accounts, delayed_every=10,
                       delay=5.0, leased=200, dead=50, limited=10, lease=2.0, timeout=900)
        print(f"format 1, by the old release: {options.jobs} jobs over {options.accounts} "
              f"accounts in {time.monotonic() - started:.1f} s; {client.zcard(READY)} ready, "
              f"{len(left['leased'])} leased by a worker gone, {len(left['dead'])} dead")
        stored = {delivery_id(f"old-{n}", 0) for n in range(options.jobs)} - set(left["dead"])

        producer = open_store(settings(server.url))
        mine = {put(producer, n, options.accounts) for n in range(1000)}
        old_ran = set(old.run("work", seconds=2.0)["ran"])
        print(f"  the old worker ran {len(old_ran)} jobs beside a producer of this version")

        live: list[str] = []
        stop = threading.Event()

        def feed() -> None:
            while not stop.is_set():
                live.append(put(producer, 10_000_000 + len(live), options.accounts))

        feeder = threading.Thread(target=feed)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        client.slowlog_reset()
        feeder.start()
        try:
            seconds = upgrade(server.url, options.kill, client)
        finally:
            stop.set()
            feeder.join()
        client.config_set("slowlog-log-slower-than", 10_000)
        longest, longest_any, calls = slowest(client, producer.shards[0]._scripts[
            "upgrade_fifo"].sha)
        print(f"upgraded in {seconds:.1f} s (waits for the fleet included); {calls} conversion "
              f"calls, the longest {longest:.1f} ms; the longest call of all meanwhile "
              f"{longest_any:.1f} ms; {len(live)} jobs enqueued during it")

        worker = open_store(settings(server.url))
        expected = (stored | mine | set(live)) - old_ran
        ran: list[str] = []
        acks: list = []
        give_up = time.monotonic() + 600
        while len(ran) < len(expected) and time.monotonic() < give_up:
            leases = worker.claim(["default"], 100, "new-worker", NO_LIMIT, acks=acks).leases
            for lease in leases:
                lease.succeeded()
            acks = leases
            ran += [lease.job_id for lease in leases]
            if not leases:
                worker.reap()
                time.sleep(0.05)
        worker.claim(["default"], 0, "new-worker", NO_LIMIT, acks=acks)
        twice = sum(1 for n in Counter(ran).values() if n > 1) + len(set(ran) & old_ran)
        lost = len(expected - set(ran))
        print(f"drained by this version: {len(ran)} jobs; lost {lost}, run twice {twice}")
        ok = lost == 0 and twice == 0 and longest <= SLOW_MS
        print(f"acceptance: 0 lost, 0 run twice, the longest conversion call <= {SLOW_MS:g} ms: "
              f"{lost} lost, {twice} twice, {longest:.1f} ms")
        print("\nall acceptance figures met" if ok else "\nSOME ACCEPTANCE FIGURES NOT MET")


if __name__ == "__main__":
    main()
