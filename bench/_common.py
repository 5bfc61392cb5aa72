"""What every bench shares: a throwaway redis-server, real workers, percentiles, printing."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

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
def workers(server: RedisServer, count: int = 1, app: str = "bench.app",
            **options: object) -> Iterator[list[WorkerProcess]]:
    """``count`` real ``celery -A <app> worker`` processes with the same flags."""
    started: list[WorkerProcess] = []
    folder = Path(tempfile.mkdtemp(prefix="fq-bench-workers-"))
    try:
        for n in range(count):
            worker = WorkerProcess(app, redis_url=server.url, cwd=ROOT,
                                   log_path=folder / f"worker-{n}.log",
                                   hostname=f"bench{n}-{os.getpid()}@localhost", **options)
            started.append(worker.start(60))
        yield started
    finally:
        for worker in started:
            worker.stop()


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
