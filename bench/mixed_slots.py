"""How soon a waiting fair job takes a slot that a plain Celery task frees, beside one that a
fair job frees, on one worker serving both.

    .venv/bin/python -m bench.mixed_slots [--runs 20]

One ``celery worker --pool threads -c 2``. Each run: 10 plain tasks of 100 ms (the worker
reserves them from the broker), then 2 fair jobs wait in the store; the first fair job may start
once the ninth plain task ends (one reserved plain task left, one slot free). Its delay from that
end is the plain-freed figure. Beside it, 4 fair jobs of 100 ms on the same worker: the third
starts in the slot the first frees, and its delay from that end is the fair-freed figure. No
ring says that a broker task ended: the worker looks at its slots every 25 ms while they are
full (worker/doorbell.py's ``BUSY_SECONDS``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench._common import percentile, redis_server, workers
from celery_fairqueue.settings import FairqueueSettings

# the package's default fallback poll (30 s; bench.app polls every 50 ms unless told)
os.environ["FQ_POLL_INTERVAL"] = str(FairqueueSettings().poll_interval)
JOB_SECONDS = 0.1


def records(client) -> list[list]:
    return [json.loads(r) for r in client.lrange("runs", 0, -1)]


def wait_for(client, count: int) -> None:
    deadline = time.monotonic() + 30
    while client.llen("runs") < count and time.monotonic() < deadline:
        time.sleep(0.005)


def plain_freed(client, app) -> float:
    client.delete("runs")
    for _ in range(10):
        app.plain_job.delay("plain", time.time(), JOB_SECONDS)
    time.sleep(0.05)  # reserved by the worker
    for _ in range(2):
        app.fair_job.delay("fair", time.time(), 0.0)
    wait_for(client, 12)
    runs = records(client)
    ends = sorted(end for account, _, _, end in runs if account == "plain")
    first_fair = min(start for account, _, start, _ in runs if account == "fair")
    return first_fair - ends[8]


def fair_freed(client, app) -> float:
    client.delete("runs")
    for n in range(4):
        app.fair_job.delay(f"f{n}", time.time(), JOB_SECONDS)
    wait_for(client, 4)
    runs = sorted(records(client), key=lambda run: run[2])
    return runs[2][2] - min(run[3] for run in runs[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    with redis_server() as server:
        from bench import app
        client = server.client()
        with workers(server, 1, pool="threads", concurrency=2):
            time.sleep(2)
            plain = [plain_freed(client, app) * 1e3 for _ in range(options.runs)]
            fair = [fair_freed(client, app) * 1e3 for _ in range(options.runs)]
    print(f"\nbench.mixed_slots: a waiting fair job takes a freed slot, {options.runs} runs, "
          "one worker (threads -c 2)")
    for name, delays in (("slot freed by a plain task", plain), ("slot freed by a fair job", fair)):
        print(f"    {name:27} p50 {percentile(delays, 50):6.1f} ms   p99 "
              f"{percentile(delays, 99):6.1f} ms")
    ok = percentile(plain, 50) <= 50
    print(f"    acceptance: plain-freed p50 <= 50 ms: {'met' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
