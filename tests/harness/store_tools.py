"""Store helpers only tests and benches use: claim as a plain list, settle in bulk."""

from collections.abc import Iterable, Sequence

from celery_fairqueue.store import FairStore, Lease


def claim_jobs(store: FairStore, queues: Sequence[str], want: int, token: str,
               default_limit: str) -> list[Lease]:
    """The leases of one claim, as a worker's dispatcher would get them."""
    return store.claim(queues, want, token, default_limit).leases


def ack_many(store: FairStore, leases: Iterable[Lease], chunk: int = 1000) -> list[bool]:
    """Ack each lease, ``chunk`` a round trip, for tests that claim and settle in bulk
    without a worker (the scale test)."""
    calls = (([store.keys.queue(lease.queue)], [lease.token, *lease.ack_args(1)])
             for lease in leases)
    return [bool(done) for done in store._run_many("ack", calls, chunk)]
