"""What every bench shares: a throwaway redis-server, real workers, percentiles, printing."""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from tests.harness import REDIS_URL_ENV, RedisServer, WorkerProcess

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free port, exported to the bench app through the environment."""
    with tempfile.TemporaryDirectory(prefix="fq-bench-") as folder:
        server = RedisServer(Path(folder)).start()
        os.environ[REDIS_URL_ENV] = server.url
        try:
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def workers(server: RedisServer, count: int = 1, app: str = "bench.app", *,
            parallel: bool = False, **options: Any) -> Iterator[list[WorkerProcess]]:
    """``count`` real ``celery -A <app> worker`` processes with the same flags (``parallel``:
    started side by side, for a fleet)."""
    started: list[WorkerProcess] = []
    folder = Path(tempfile.mkdtemp(prefix="fq-bench-workers-"))
    try:
        made = [WorkerProcess(app, redis_url=server.url, cwd=ROOT,
                              log_path=folder / f"worker-{n}.log",
                              hostname=f"bench{n}-{os.getpid()}@localhost", **options)
                for n in range(count)]
        for worker in made:  # from this thread: a worker dies with the thread that made it
            if parallel:
                worker.launch()
            else:
                worker.start(60)
            started.append(worker)
        for worker in made if parallel else ():
            worker.wait_for_log(f"{worker.hostname} ready.", 120)
        yield started
    finally:
        for worker in started if parallel else ():
            if worker.is_alive():
                worker.process.terminate()  # type: ignore[union-attr]
        for worker in started:
            worker.stop()


def fresh(server: RedisServer, kind: str) -> redis.Redis:
    """A flushed Redis; for ``fair+stream`` with the event stream a recorder would create."""
    from bench import app
    from celery_fairqueue.store import EventReader, store_for

    client = server.client()
    client.flushall()
    if kind == "fair+stream":
        EventReader(store_for(app.app), "bench").ensure_group()
    return client


def runs(client) -> list[list[float]]:
    return [json.loads(r) for r in client.lrange("runs", 0, -1)]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def message(n: int) -> dict[str, Any]:
    """A realistic payload (an outreach e-mail step) whose body is 300 to 800 characters long,
    drawn by a generator seeded with ``n``: the same messages every run, and sizes spread over
    jemalloc's size classes, so that one size sitting just past a class boundary does not
    decide the bytes per job."""
    length = random.Random(n).randint(300, 800)
    return {"to": f"lead{n}@example.com", "from": "sales@example.org",
            "subject": f"Following up on our call, lead {n}",
            "body": ("Hello, thank you for your time yesterday. " * 20)[:length],
            "template": "follow-up-2", "locale": "en-GB"}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def stored_messages(client: redis.Redis, prefix: str = "{fairqueue}:") -> list[bytes]:
    """The Celery messages the fair store holds, read without knowing its layout: the values
    longer than 500 bytes of its hashes, each from its first ``{`` (a record may open with a
    header line before the JSON message)."""
    found: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        if client.type(key) != b"hash":
            continue
        for value in client.hvals(key):
            start = value.find(b"{")
            if len(value) > 500 and start >= 0:
                found.append(value[start:])
    return found


def floor_bytes(client: redis.Redis, messages: Sequence[bytes]) -> float:
    """Redis memory per message when Redis holds nothing else: each in one hash under a
    38-character id, the least any layout that keeps the message can take. Flushes the
    server, before and after."""
    client.flushall()
    before = used_memory(client)
    pipe = client.pipeline(transaction=False)
    for n, body in enumerate(messages):
        pipe.hset("floor", f"{n:038x}", body)
    pipe.execute()
    used = used_memory(client) - before
    client.flushall()
    return used / len(messages)
