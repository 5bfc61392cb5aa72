"""How long ``fairqueue reshard`` takes: a store of 4 shards moved to 16, on one redis-server.

``python -m bench.reshard [--jobs 10000] [--accounts 1000] [--done 5000]`` loads ``--jobs``
waiting jobs over ``--accounts`` accounts (each with a business key and a realistic payload,
``bench._common.message``; one in five delayed), after ``--done`` jobs that ran (their done
markers, which a reshard moves with their accounts), then moves the store to 16 shards with no
process running (no settle wait) and prints how long it took, what moved, and Redis's CPU time.
"""

from __future__ import annotations

import argparse
import json
import time

from bench._common import message, redis_server
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore, open_store
from celery_fairqueue.store.shards.reshard import Resharder
from tests.harness.store_tools import ack_many, enqueue_many


def load(store: FairStore, jobs: int, accounts: int, first: int = 0) -> None:
    now = time.time()
    by_shard: dict[int, list[dict[str, object]]] = {}
    for n in range(first, first + jobs):
        account = f"account-{n % accounts}"
        job = {"queue": "celery", "account": account, "job_id": f"job-{n}:0",
               "envelope": json.dumps(message(n)), "job_key": f"key-{n}",
               "due": now + 3600 if n % 5 == 4 else None}
        shard = store.shards.index(store.shard_for(account))
        by_shard.setdefault(shard, []).append(job)
    for shard, shard_jobs in by_shard.items():
        enqueue_many(store.shards[shard], shard_jobs)


def run_done(store: FairStore) -> int:
    """Claim and ack every ready job: what is left of each is its done marker."""
    done = 0
    for shard in store.shards:
        while leases := shard.claim(["celery"], 64, "bench", "0 1 0 - 1").leases:
            done += sum(ack_many(shard, leases))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--accounts", type=int, default=1_000)
    parser.add_argument("--done", type=int, default=5_000)
    options = parser.parse_args()
    with redis_server() as server:
        # the bench's own reading of the store's layout lapses at once: no fleet to wait for
        settings = FairqueueSettings(redis_url=server.url, shards=4, shards_check_interval=0.01)
        store = open_store(settings)
        store.check_shards()
        load(store, options.done, options.accounts, first=options.jobs)
        done = run_done(store)
        load(store, options.jobs, options.accounts)
        client = server.client(decode_responses=True)
        cpu_before = float(client.info("cpu")["used_cpu_sys"]) + \
            float(client.info("cpu")["used_cpu_user"])
        report = Resharder(settings, 16, settle=0).run()
        cpu = float(client.info("cpu")["used_cpu_sys"]) + \
            float(client.info("cpu")["used_cpu_user"]) - cpu_before
        print(f"reshard 4 -> 16 of {options.jobs} waiting jobs ({done} done markers) over "
              f"{options.accounts} accounts: {report.seconds:.2f} s, {report.accounts} accounts "
              f"and {report.jobs} jobs moved ({1000 * report.seconds / report.accounts:.1f} ms "
              f"an account), Redis CPU {cpu:.2f} s")


if __name__ == "__main__":
    main()
