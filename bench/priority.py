"""Celery's ``priority`` under FairTask and plain Celery, the same backlog, one run.

    .venv/bin/python -m bench.priority

The backlog is enqueued before the worker starts (1 worker, 4 threads, 10 ms jobs):
"calm" sends 10 jobs at priority 9; "busy" sends 200 at priority 9, then one urgent job at
priority 0; "pushy" sends 200 at priority 0. Prints, for each kind, where busy's urgent job
started among busy's own jobs (priority orders jobs within an account) and when calm's last
job started (a priority must not let one account jump the rotation).
"""

from __future__ import annotations

import time

from bench._common import redis_server, runs, workers
from bench.fairness import wait_for_runs

SLOTS = 4
JOB_SECONDS = 0.01
CALM, BUSY, PUSHY = 10, 200, 200


def priority_run(server, kind: str) -> dict:
    from bench import app

    task = app.fair_job if kind == "fair" else app.plain_job
    client = server.client()
    client.flushall()
    for _ in range(CALM):
        task.apply_async(("calm", time.time(), JOB_SECONDS), priority=9)
    for _ in range(BUSY):
        task.apply_async(("busy", time.time(), JOB_SECONDS), priority=9)
    urgent_at = time.time()
    task.apply_async(("busy", urgent_at, JOB_SECONDS), priority=0)
    for _ in range(PUSHY):
        task.apply_async(("pushy", time.time(), JOB_SECONDS), priority=0)
    total = CALM + BUSY + 1 + PUSHY
    with workers(server, 1, pool="threads", concurrency=SLOTS):
        wait_for_runs(client, total, timeout=120)
    started = sorted(runs(client), key=lambda r: r[2])
    busy = [r for r in started if r[0] == "busy"]
    calm_positions = [n for n, r in enumerate(started) if r[0] == "calm"]
    return {"urgent_among_busy": next(n for n, r in enumerate(busy) if r[1] == urgent_at),
            "calm_last": calm_positions[-1], "total": total}


def main() -> None:
    with redis_server() as server:
        results = {kind: priority_run(server, kind) for kind in ("plain", "fair")}
    print(f"\npriority: calm {CALM} jobs at 9, busy {BUSY} at 9 then 1 at 0, pushy {PUSHY} at 0; "
          f"backlog first; 1 worker, threads, {SLOTS} slots, {JOB_SECONDS * 1000:.0f} ms jobs")
    print(f"    {'':8}{'urgent job starts':>20}{'calm last job starts':>24}")
    for kind, r in results.items():
        print(f"    {kind:8}{'#' + str(r['urgent_among_busy'] + 1) + f' of busy {BUSY + 1}':>20}"
              f"{'#' + str(r['calm_last'] + 1) + ' of ' + str(r['total']):>24}")
    fair = results["fair"]
    ok = fair["urgent_among_busy"] < SLOTS and fair["calm_last"] < 3 * CALM + SLOTS
    print(f"    acceptance (fair): the urgent job among busy's first {SLOTS} (before its earlier "
          f"priority-9 jobs), calm done within its {CALM} rotations of 3 accounts: "
          f"{'met' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
