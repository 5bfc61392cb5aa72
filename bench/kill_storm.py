"""Kill storm: SIGKILLed workers and a primary's failover while jobs stream in; none is lost,
none has its side effect twice.

    .venv/bin/python -m bench.kill_storm [--cluster] [--shards 16] [--kills 10] [--rate 50]

A producer enqueues ``--rate`` jobs a second over 20 accounts (``.delay()`` made again with the
same business key when the store refuses it), two workers (threads, 4 slots) run them, and
every ``--every`` seconds one worker is SIGKILLed (its whole process group) and started again.
With ``--cluster`` the fair store is a Redis Cluster of 3 primaries with a replica each and
``fairqueue_wait_replicas=1``; halfway through the kills, the primary of the store's home shard
is SIGKILLed too, its replica takes over, and the old primary rejoins as a replica. Leases are
5 s, so a killed worker's jobs run again within seconds; the job's reconciliation
(``already_applied``) finds a side effect written before a crash and skips it.

Prints lost (acknowledged by ``.delay()``, never run), duplicated (side effect written twice)
and phantom (run, never acknowledged) jobs; exits non-zero unless all three are 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._common import redis_server, workers
from bench.environment import SHARDS_ENV, STORE_URL_ENV
from celery_fairqueue.store.formats.keys import Keys
from tests.harness import wait_until
from tests.harness.producer import Producer
from tests.harness.redis_cluster import ClusterGroup

STORM_ENV = {"FQ_LEASE_SECONDS": "5", "FQ_HEARTBEAT_SECONDS": "1", "FQ_POLL_INTERVAL": "0.5"}
ACCOUNTS = 20


@contextlib.contextmanager
def cluster_store(enabled: bool) -> Iterator[ClusterGroup | None]:
    """A cluster of 3 primaries with a replica each as the fair store (``$FQ_BENCH_STORE_URL``),
    every enqueue confirmed by a replica; or nothing (the bench's redis-server)."""
    if not enabled:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="fq-storm-cluster-") as folder:
        group = ClusterGroup(Path(folder))
        os.environ.update({STORE_URL_ENV: group.url, "FQ_WAIT_REPLICAS": "1"})
        try:
            yield group
        finally:
            group.stop()


def fail_over(cluster: ClusterGroup) -> float:
    """SIGKILL the primary of the home shard, wait for its replica to take over, restart the
    old one (it rejoins as a replica); the seconds until the cluster was whole again."""
    key = Keys().records
    primary = cluster.owner(key)
    began = time.monotonic()
    primary.kill()

    def promoted() -> bool:
        with contextlib.suppress(RuntimeError):
            return cluster.owner(key) is not primary and cluster.state_ok()
        return False

    if not wait_until(promoted, 30, 0.1):
        raise RuntimeError(f"no replica took over:\n{cluster.log_tail()}")
    took = time.monotonic() - began
    primary.start()
    return took


def stored_jobs(store) -> int:
    return sum(int(store.client.hlen(shard.keys.records)) for shard in store.shards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", action="store_true", help="the store on a Redis Cluster")
    parser.add_argument("--shards", type=int, default=1, help="fairqueue_shards of the store")
    parser.add_argument("--kills", type=int, default=10, help="worker SIGKILLs")
    parser.add_argument("--every", type=float, default=4.0, help="seconds between kills")
    parser.add_argument("--rate", type=float, default=50, help="jobs enqueued per second")
    options = parser.parse_args()
    os.environ.update({**STORM_ENV, SHARDS_ENV: str(options.shards)})
    rng = random.Random(3)
    with redis_server() as server, cluster_store(options.cluster) as cluster:
        from bench import app  # reads the URLs and settings from the environment
        from celery_fairqueue import store_for

        client = server.client(decode_responses=True)
        store = store_for(app.app)
        failover = None
        with workers(server, 2, pool="threads", concurrency=4) as running:
            producer = Producer(app.storm_job, options.rate, ACCOUNTS)
            started = time.monotonic()
            producer.start()
            for kill in range(1, options.kills + 1):
                time.sleep(options.every)
                victim = running[rng.randrange(len(running))]
                victim.kill()
                victim.start(60)
                print(f"  {time.monotonic() - started:5.1f} s  SIGKILL {kill}: "
                      f"{victim.hostname}; {client.hlen('storm:done')} jobs done", flush=True)
                if cluster is not None and kill == options.kills // 2:
                    failover = fail_over(cluster)
                    print(f"  {time.monotonic() - started:5.1f} s  the home shard's primary "
                          f"SIGKILLed; its replica took over in {failover:.1f} s", flush=True)
            time.sleep(options.every)
            producer.finish()
            drained = wait_until(lambda: stored_jobs(store) == 0, 120, 0.5)
            time.sleep(1)  # a job acked in the store has written its side effect before
            reaped = store.stats().get("reaped", 0)
            reconciled = int(client.get("storm:reconciled") or 0)
        done = {key: int(count) for key, count in client.hgetall("storm:done").items()}
    acked = set(producer.acked)
    lost = sorted(acked - set(done))
    duplicated = sorted(key for key, count in done.items() if count > 1)
    phantom = sorted(set(done) - acked)
    where = (f"a Redis Cluster of 3 primaries + 3 replicas, fairqueue_wait_replicas=1, one "
             f"primary failover ({failover:.1f} s)" if cluster is not None and failover
             else "one redis-server")
    print(f"\nkill storm: {options.shards} shard(s) on {where}; {options.kills} worker SIGKILLs; "
          f"{len(acked)} jobs acknowledged, {len(done)} run, {len(lost)} lost, "
          f"{len(duplicated)} duplicated side effects, {len(phantom)} phantom; "
          f"{len(producer.errors)} enqueues refused and made again; {reaped} leases of killed "
          f"workers reaped, {reconciled} runs skipped by the reconciliation (side effect "
          f"already written); store drained: {drained}")
    if lost or duplicated or phantom or not drained:
        print(f"lost {lost[:10]}, duplicated {duplicated[:10]}, phantom {phantom[:10]}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
