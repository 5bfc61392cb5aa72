"""Store helpers only tests and benches use: load jobs in bulk, claim as a plain list, settle in
bulk. They are not the store's public API (``celery_fairqueue.testing`` is the users' one)."""

from collections.abc import Iterable, Sequence
from typing import Any

from celery_fairqueue.store import Ack, ClaimedJob, EnqueueResult, FairStore


def enqueue_many(store: FairStore, jobs: Iterable[dict[str, Any]], chunk: int = 1000
                 ) -> list[EnqueueResult]:
    """``store.enqueue`` for each mapping of its keywords, ``chunk`` jobs a round trip, for
    loading many stored jobs at once (the scale test, the benches' backlogs). Each job is
    stored atomically; a failure part-way leaves the earlier chunks stored."""
    calls = (([store.keys.queue(job["queue"])], store._enqueue_args(**job)) for job in jobs)
    return [EnqueueResult.from_reply(reply) for reply in store._run_many("enqueue", calls, chunk)]


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
