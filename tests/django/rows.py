"""Job rows made directly in the database, for the tests of what reads them (the overview, the
query API): a fixed clock and one factory."""

import itertools
from datetime import UTC, datetime, timedelta

from celery_fairqueue.contrib.django.models import Job

Status = Job.Status
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count()


def job(account="acme", status=Status.READY, queue="celery", age=0.0, **fields):
    """A job row enqueued ``age`` seconds before NOW."""
    n = next(_ids)
    return Job.objects.create(job_key=f"k{n}", task_id=f"t{n}", task="proj.send", queue=queue,
                              account=account, status=status,
                              enqueued_at=NOW - timedelta(seconds=age), **fields)
