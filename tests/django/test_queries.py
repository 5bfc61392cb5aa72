"""The query API: per-account jobs, the oldest ready age (the alerting signal)."""

import pytest

from celery_fairqueue.contrib.django.console.queries import (
    jobs_for,
    oldest_ready_age,
    oldest_ready_age_by_queue,
)
from tests.django.rows import NOW, Status, job

pytestmark = pytest.mark.django_db


def test_jobs_for_an_account_and_status(database):
    mine = [job(), job(status=Status.DEAD)]
    job(account="other")
    assert set(jobs_for("acme")) == set(mine)
    assert list(jobs_for("acme", Status.DEAD)) == [mine[1]]
    assert not jobs_for("nobody").exists()


def test_oldest_ready_age_counts_only_ready_jobs(database):
    assert oldest_ready_age(now=NOW) is None
    job(age=30)
    job(age=90, queue="critical", account="other")
    job(age=999, status=Status.DEFERRED)
    job(age=999, status=Status.RUNNING)
    assert oldest_ready_age(now=NOW) == 90
    assert oldest_ready_age(queue="celery", now=NOW) == 30
    assert oldest_ready_age(account="other", now=NOW) == 90
    assert oldest_ready_age(queue="celery", account="other", now=NOW) is None
    assert oldest_ready_age_by_queue(now=NOW) == {"celery": 30, "critical": 90}
