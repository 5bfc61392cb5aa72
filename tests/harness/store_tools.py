"""Store helpers only tests and benches use: load jobs in bulk, claim as a plain list, settle in
bulk. They are not the store's public API (``celery_fairqueue.testing`` is the users' one)."""

from collections.abc import Iterable, Sequence
from typing import Any

from celery_fairqueue.store import EnqueueResult, FairStore, Lease
from celery_fairqueue.store.formats.records import JobRecord
from celery_fairqueue.store.shards.placement import account_shard


def enqueue_many(store: FairStore, jobs: Iterable[dict[str, Any]], chunk: int = 1000
                 ) -> list[EnqueueResult]:
    """``store.enqueue`` for each mapping of its keywords, ``chunk`` jobs of one shard a round
    trip, for loading many stored jobs at once (the scale test, the benches' backlogs). Each job
    is stored atomically; a failure part-way leaves the earlier chunks stored. The results come
    in the order of ``jobs``."""
    by_shard: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for n, job in enumerate(jobs):
        by_shard.setdefault(id(store.shard_for(job["account"])), []).append((n, job))
    results: dict[int, EnqueueResult] = {}
    for placed in by_shard.values():
        shard = store.shard_for(placed[0][1]["account"])
        calls = (([shard.keys.queue(job["queue"])], shard._enqueue_args(**job))
                 for _, job in placed)
        for (n, _), reply in zip(placed, shard._run_many("enqueue", calls, chunk), strict=True):
            results[n] = EnqueueResult.from_reply(reply)
    return [results[n] for n in sorted(results)]


def claim_jobs(store: FairStore, queues: Sequence[str], want: int, token: str,
               default_limit: str) -> list[Lease]:
    """The leases of one claim, as a worker's dispatcher would get them."""
    return store.claim(queues, want, token, default_limit).leases


def ack_many(store: FairStore, leases: Iterable[Lease], chunk: int = 1000) -> list[bool]:
    """Ack each lease on its shard, ``chunk`` a round trip, for tests that claim and settle in
    bulk without a worker (the scale test); the outcomes in the order of ``leases``."""
    retention = store.settings.job_retention
    by_shard: dict[int, list[tuple[int, Lease]]] = {}
    for n, lease in enumerate(leases):
        by_shard.setdefault(id(lease.store), []).append((n, lease))
    done: dict[int, bool] = {}
    for placed in by_shard.values():
        shard = placed[0][1].store
        calls = (([shard.keys.queue(lease.queue)], [lease.token, retention, *lease.ack_args(1)])
                 for _, lease in placed)
        for (n, _), acked in zip(placed, shard._run_many("ack", calls, chunk), strict=True):
            done[n] = bool(acked)
    return [done[n] for n in sorted(done)]


def hold_lease(store: FairStore, job_id: str, token: str, queue: str = "celery",
               account: str = "acme") -> None:
    """A job leased to the worker ``token`` as a claim leaves it (its record names the owner,
    the lease set holds it), for console tests that show a worker's running jobs."""
    now = store.server_time()
    record = JobRecord(queue, account, "00000000000000001", deliveries=1, owner=token,
                       started=now, envelope="{}")
    store.client.hset(store.keys.records, job_id, record.build())
    store.client.zadd(store.keys.leases, {job_id: now + 3600})


def place_accounts(names: Sequence[str], shards: int, together: bool) -> list[str]:
    """An account id for each of ``names`` (``name-n``, the first n that fits) in a store of
    ``shards`` shards: each on a shard of its own, or all on the first one's (``together``)."""
    found: list[str] = []
    for name in names:
        taken = [account_shard(account, shards) for account in found]
        for n in range(100_000):
            shard = account_shard(f"{name}-{n}", shards)
            if (shard == taken[0] if together and taken else shard not in taken or shards == 1):
                found.append(f"{name}-{n}")
                break
    return found
