"""The query API: per-account jobs, the oldest ready age (the alerting signal), the overview."""

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.contrib.django.queries import (
    account_overview,
    jobs_for,
    oldest_ready_age,
    oldest_ready_age_by_queue,
)

pytestmark = pytest.mark.django_db

Status = Job.Status
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count()


def job(account="acme", status=Status.READY, queue="celery", age=0.0, **fields):
    n = next(_ids)
    return Job.objects.create(job_key=f"k{n}", task_id=f"t{n}", task="proj.send", queue=queue,
                              account=account, status=status,
                              enqueued_at=NOW - timedelta(seconds=age), **fields)


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


def test_account_overview_is_one_query_with_counts_ages_next_run_and_last_error(
        database, django_assert_num_queries):
    job(age=60)
    job(age=10)
    job(status=Status.DEFERRED, next_run_at=NOW + timedelta(minutes=5))
    job(status=Status.DEFERRED, next_run_at=NOW + timedelta(minutes=1))
    job(status=Status.RUNNING)
    job(status=Status.SUCCEEDED)
    job(status=Status.FAILED, last_error="old failure", finished_at=NOW - timedelta(hours=1))
    job(status=Status.DEAD, last_error="HTTP 404", finished_at=NOW - timedelta(minutes=1))
    job(account="quiet", status=Status.SUCCEEDED)
    with django_assert_num_queries(1, using=database):
        acme, quiet = account_overview(now=NOW)
    assert acme == {
        "account": "acme", "ready": 2, "deferred": 2, "running": 1, "succeeded": 1,
        "failed": 1, "dead": 1, "oldest_ready_age": 60.0,
        "next_run_at": NOW + timedelta(minutes=1),
        "last_failed_at": NOW - timedelta(minutes=1), "last_error": "HTTP 404"}
    assert quiet["account"] == "quiet" and quiet["succeeded"] == 1
    assert quiet["oldest_ready_age"] is None and quiet["next_run_at"] is None
    assert quiet["last_error"] == "" and quiet["last_failed_at"] is None
