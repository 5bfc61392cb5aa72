"""A store of layout format 1, written and worked by the release before format 2 with its own
code: the package as it was at ``FORMAT1_COMMIT``, taken out of the repository's history with
``git archive`` and run in subprocesses (``Format1Process``). The upgrade test and
``bench.upgrade`` build their stores with it, so what they upgrade is what users have."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The last commit of layout format 1 (main before issue 46).
FORMAT1_COMMIT = "cf21614a8da0e5b98e14c711e4f4764d26960be7"

#: What a process of the old release does, by its first argument (the rest is JSON):
#: ``fill`` stores jobs over accounts (every ``delayed_every``-th one due ``delay`` s later,
#: each with a business key; ``limited`` accounts get a rate of 10 a second, so that its claims
#: defer them), then claims up
#: to ``leased`` of them with ``lease`` s leases and leaves them so (a worker that died), and
#: buries ``dead`` more (dead letters); ``work`` claims and acks for ``seconds``, as a worker
#: does; both print the job ids they ran or left, as JSON.
SCRIPT = r'''
import json, sys, time
from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store.shards.opening import open_store

action, options = sys.argv[1], json.loads(sys.argv[2])
settings = FairqueueSettings(redis_url=options["url"], shards_check_interval=1.0,
                             lease_seconds=options.get("lease", 30.0))
store = open_store(settings)
NO_LIMIT = AccountLimit().pack(0)

def job(n):
    account = f"acct-{n % options['accounts']}"
    task_id = f"old-{n}"
    envelope = Envelope(body="[[], {}, {}]", headers={
        "task": "t", "id": task_id, "fairqueue_account": account})
    delayed = options.get("delayed_every") and n % options["delayed_every"] == 0
    return dict(queue="default", account=account, job_id=delivery_id(task_id, 0),
                envelope=envelope.to_json(), job_key=f"key-{n}",
                due=time.time() + options.get("delay", 2.0) if delayed else None)

if action == "fill":
    for n in range(options.get("limited", 0)):
        store.set_limit(f"acct-{n}", AccountLimit(rate="10/s", burst=1))
    shard = store.shards[0]
    jobs = range(options["jobs"])
    for start in range(0, len(jobs), 1000):
        calls = [([shard.keys.queue("default")], shard._enqueue_args(**job(n)))
                 for n in jobs[start:start + 1000]]
        list(shard._run_many("enqueue", calls, 1000))
    leased, dead = [], []
    while len(leased) < options.get("leased", 0):
        got = store.claim(["default"], min(50, options["leased"] - len(leased)),
                          "old-worker", NO_LIMIT).leases
        if not got:
            break
        leased += got
    for lease in leased[:options.get("dead", 0)]:
        store.bury(lease.job_id, "PermanentError: old", {"account": lease.account})
        store.ack(lease)
        dead.append(lease.job_id)
    print(json.dumps({"leased": [l.job_id for l in leased[len(dead):]], "dead": dead}))
elif action == "work":
    ran, until = [], time.monotonic() + options["seconds"]
    while time.monotonic() < until:
        got = store.claim(["default"], 8, "old-worker-2", NO_LIMIT).leases
        for lease in got:
            store.ack(lease)
            ran.append(lease.job_id)
        if not got:
            time.sleep(0.05)
    print(json.dumps({"ran": ran}))
'''


def format1_tree(into: Path) -> Path:
    """The old release's package under ``into`` (made once), for PYTHONPATH."""
    if not (into / "celery_fairqueue").is_dir():
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", FORMAT1_COMMIT,
             "celery_fairqueue"], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    return into


class Format1Process:
    """The old release's code, run on the store at ``url`` (a worker or a producer of it)."""

    def __init__(self, tree: Path, url: str) -> None:
        self.tree = tree
        self.env = {**os.environ, "PYTHONPATH": str(tree)}
        self.url = url

    def start(self, action: str, **options: Any) -> subprocess.Popen[str]:
        """Start ``action`` (from the old tree, so that it, not the checkout, is imported)."""
        return subprocess.Popen(
            [sys.executable, "-c", SCRIPT, action, json.dumps({"url": self.url, **options})],
            env=self.env, cwd=str(self.tree), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    def run(self, action: str, timeout: float = 300.0, **options: Any) -> dict[str, Any]:
        """Run ``action`` to its end; what it printed."""
        process = self.start(action, **options)
        out, err = process.communicate(timeout=timeout)
        if process.returncode:
            raise RuntimeError(f"the format-1 process failed ({process.returncode}): "
                               f"{err[-2000:]}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

