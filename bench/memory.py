"""Redis memory per fair job, measured: pending (beside plain Celery's), done, dead-lettered.

``python -m bench.memory [--jobs 20000] [--accounts 200]`` starts throwaway redis-servers (the
fair store alone on one, broker and ledger on another, so the store's ``used_memory`` counts the
store only), enqueues ``--jobs`` real ``.delay()`` calls of a task with a business key and a
realistic payload (an outreach e-mail step: subject, a body of 300 to 800 characters, a few
fields; ``bench._common.message``), and reads the store's ``used_memory`` before and after.
First, the baseline: plain Celery (an app without ``install``, the default Redis transport, no
result backend, so an enqueue writes nothing but the message and kombu's binding set) sends the
same task name, arguments and messages, as many ``.delay()`` calls, to a redis-server of its
own; its ``used_memory`` before and after is plain Celery's bytes per pending job, which the
fair one is compared with (the difference and the ratio; acceptance: plain + 400 B at most).
Real workers then run the fair jobs (what is left per job is its done marker and business key,
kept for ``fairqueue_job_retention``; the store's Redis CPU time from enqueue to done is read
too), and as many jobs of a task that raises ``PermanentError`` become dead letters: all phases
take ``--jobs`` jobs, as 20,000 of each take about a minute and a half on 2 cores. No recorder
runs, so there is no event stream (it is trimmed as the recorder writes, and small while it
keeps up). Last, the floor: the same messages, read back from the store, each in one hash under
a job id's length and nothing else (``bench._common.floor_bytes``), beside the bytes per
pending job.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery

import celery_fairqueue
from bench._common import floor_bytes, message, ratio, stored_messages, used_memory
from bench.environment import STORE_URL_ENV
from celery_fairqueue import FairTask, PermanentError
from tests.harness import REDIS_URL_ENV, RedisServer, WorkerProcess, wait_until

ROOT = Path(__file__).resolve().parent.parent
KEY = ("account_id", "lead_id", "step", "campaign_rev")

app = Celery("memory", broker=os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:1/0"))
app.conf.update(
    task_serializer="json", accept_content=["json"], task_ignore_result=True,
    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
    fairqueue_redis_url=os.environ.get(STORE_URL_ENV, "redis://127.0.0.1:1/0"),
    fairqueue_poll_interval=0.05,
)
celery_fairqueue.install(app)


@app.task(base=FairTask, account_arg="account_id", job_key=KEY)
def send_step(account_id: str, lead_id: int, step: str, campaign_rev: int,
              message: dict[str, Any]) -> None:
    """The side effect would be an API call; here the work is nothing."""


@app.task(base=FairTask, account_arg="account_id", job_key=KEY)
def send_step_fails(account_id: str, lead_id: int, step: str, campaign_rev: int,
                    message: dict[str, Any]) -> None:
    raise PermanentError("lead deleted")


def cpu(client: redis.Redis) -> float:
    """CPU seconds the store's redis-server has used (user and system, main thread included)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def enqueue(task: Any, jobs: int, accounts: int, step: str) -> None:
    for n in range(jobs):
        task.delay(f"account-{n % accounts}", n, step, 3, message(n))


def plain_pending(folder: Path, like: Any, jobs: int, accounts: int) -> tuple[float, float]:
    """Plain Celery's bytes per pending job, and the mean size of the message in kombu's list:
    ``like``'s name and arguments sent by an app without ``install`` (so its own Task class,
    nothing of this package) to a redis-server of its own, which then holds only what plain
    Celery keeps for a pending job."""
    server = RedisServer(folder / "plain").start()
    plain = Celery("memory_plain", broker=server.url, set_as_current=False)
    plain.conf.update({key: app.conf[key] for key in (
        "task_serializer", "accept_content", "task_ignore_result",
        "broker_connection_retry_on_startup")})
    task = plain.task(name=like.name)(like.run)
    client = server.client()
    try:
        empty = used_memory(client)
        enqueue(task, jobs, accounts, "intro")
        per_job = (used_memory(client) - empty) / jobs
        stored = client.lrange(plain.conf.task_default_queue, 0, -1)
        assert len(stored) == jobs, f"{len(stored)} of {jobs} plain messages in the list"
        return per_job, sum(map(len, stored)) / len(stored)
    finally:
        plain.close()
        client.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--accounts", type=int, default=200)
    options = parser.parse_args()
    jobs = options.jobs
    with tempfile.TemporaryDirectory(prefix="fq-bench-memory-") as folder:
        store_server = RedisServer(Path(folder) / "store").start()
        broker = RedisServer(Path(folder) / "broker").start()
        os.environ[REDIS_URL_ENV], os.environ[STORE_URL_ENV] = broker.url, store_server.url
        bench: Any = importlib.import_module("bench.memory")  # this module, set up for them
        store = store_server.client()
        workers = []
        try:
            plain, plain_message = plain_pending(Path(folder), bench.send_step, jobs,
                                                 options.accounts)
            print(f"plain: {plain:.0f} B of Redis memory per pending plain Celery job (the same "
                  f"{jobs} .delay() calls, to its own Redis; the message in kombu's list "
                  f"{plain_message:.0f} B of it)")
            empty, cpu_before = used_memory(store), cpu(store)
            enqueue(bench.send_step, jobs, options.accounts, "intro")
            pending = (used_memory(store) - empty) / jobs
            messages = stored_messages(store)
            print(f"pending: {pending:.0f} B of Redis memory per job ({jobs} real .delay() jobs "
                  f"over {options.accounts} accounts; the stored Celery message "
                  f"{sum(map(len, messages)) / len(messages):.0f} B of it)")
            print(f"vs plain: a pending fair job is plain + {pending - plain:.0f} B, "
                  f"{ratio(pending, plain):.2f}x plain's")
            print(f"acceptance: a pending job <= plain + 400 B: plain + {pending - plain:.0f} B")
            ok = pending - plain <= 400
            for n in range(2):
                workers.append(WorkerProcess(
                    "bench.memory", redis_url=broker.url, cwd=ROOT, concurrency=8,
                    log_path=Path(folder) / f"worker{n}.log", hostname=f"mem{n}@localhost",
                    env={STORE_URL_ENV: store_server.url}).start(60))
            started = time.monotonic()
            assert wait_until(lambda: store.hlen("{fairqueue}:records") == 0, 600), "jobs left"
            ran = time.monotonic() - started
            done, cpu_used = used_memory(store), cpu(store) - cpu_before
            print(f"done: {(done - empty) / jobs:.0f} B per finished job (its done marker and "
                  f"business key, kept for fairqueue_job_retention; {jobs} jobs ran in "
                  f"{ran:.1f} s on 2 workers)")
            print(f"redis cpu: {cpu_used / jobs * 1e6:.0f} us of the store's Redis CPU per job, "
                  f"enqueue to done marker (one Redis core: about {jobs / cpu_used:.0f} jobs/s)")
            enqueue(bench.send_step_fails, jobs, options.accounts, "dead")
            assert wait_until(lambda: store.zcard("{fairqueue}:deadindex") >= jobs, 600)
            assert wait_until(lambda: store.hlen("{fairqueue}:records") == 0, 60)
            dead = used_memory(store)
            print(f"dead letter: {(dead - done) / jobs:.0f} B per dead-lettered job (the "
                  "letter with its message, reason and error, and its business key)")
            floor = floor_bytes(store, messages)
            print(f"floor: {floor:.0f} B per message held alone in one hash under a "
                  f"38-character id; a pending job is {pending - floor:.0f} B above it")
        finally:
            for worker in workers:
                worker.stop()
            store.close()
            store_server.stop()
            broker.stop()
    print("\nall acceptance figures met" if ok else "\nSOME ACCEPTANCE FIGURES NOT MET")


if __name__ == "__main__":
    main()
