"""Store helpers only tests and benches use: load jobs in bulk, claim as a plain list, settle in
bulk. They are not the store's public API (``celery_fairqueue.testing`` is the users' one)."""

from collections.abc import Iterable, Sequence
from typing import Any

from celery_fairqueue.store import EnqueueResult, FairStore, Lease
from celery_fairqueue.store.records import JobRecord
from celery_fairqueue.store.shards import account_shard


def enqueue_many(store: FairStore, jobs: Iterable[dict[str, Any]], chunk: int = 1000
                 ) -> list[EnqueueResult]:
    """``store.enqueue`` for each mapping of its keywords, ``chunk`` jobs a round trip, for
    loading many stored jobs at once (the scale test, the benches' backlogs). Each job is
    stored atomically; a failure part-way leaves the earlier chunks stored."""
    calls = (([store.keys.queue(job["queue"])], store._enqueue_args(**job)) for job in jobs)
    return [EnqueueResult.from_reply(reply) for reply in store._run_many("enqueue", calls, chunk)]


def claim_jobs(store: FairStore, queues: Sequence[str], want: int, token: str,
               default_limit: str) -> list[Lease]:
    """The leases of one claim, as a worker's dispatcher would get them."""
    return store.claim(queues, want, token, default_limit).leases


def ack_many(store: FairStore, leases: Iterable[Lease], chunk: int = 1000) -> list[bool]:
    """Ack each lease, ``chunk`` a round trip, for tests that claim and settle in bulk
    without a worker (the scale test)."""
    retention = store.settings.job_retention
    calls = (([store.keys.queue(lease.queue)], [lease.token, retention, *lease.ack_args(1)])
             for lease in leases)
    return [bool(done) for done in store._run_many("ack", calls, chunk)]


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
