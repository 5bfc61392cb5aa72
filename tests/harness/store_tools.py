"""Store helpers only tests and benches use: claim as a plain list, settle in bulk."""

from collections.abc import Iterable, Sequence

from celery_fairqueue.store import Ack, ClaimedJob, FairStore


def claim_jobs(store: FairStore, queues: Sequence[str], want: int, token: str,
               default_limit: str) -> list[ClaimedJob]:
    """The jobs of one claim, as a worker's dispatcher would get them."""
    return store.claim(queues, want, token, default_limit).jobs


def ack_many(store: FairStore, jobs: Iterable[ClaimedJob], token: str,
             chunk: int = 1000) -> list[bool]:
    """Ack each claimed job, ``chunk`` a round trip, for tests that claim and settle in bulk
    without a worker (the scale test)."""
    calls = (([store.keys.queue(job.queue)],
              [token, *Ack(job.queue, job.account, job.job_id, job.stored_key).args(1)])
             for job in jobs)
    return [bool(done) for done in store._run_many("ack", calls, chunk)]
