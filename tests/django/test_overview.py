"""The one account overview (overview.py), which the console's accounts page and the
``fairqueue recorded`` command both read: its rows in one query, and the console's paging."""

from datetime import timedelta

import pytest
from django.utils import timezone

from celery_fairqueue.contrib.django.console import overview
from celery_fairqueue.contrib.django.console.overview import account_overview
from celery_fairqueue.contrib.django.models import Job
from tests.django.rows import NOW, Status, job

pytestmark = pytest.mark.django_db

SEND = "tests.apps.reliable.send_message"


def test_account_overview_is_one_query_with_counts_ages_next_run_and_last_error(
        database, django_assert_num_queries):
    job(age=60, waiting_since=NOW - timedelta(seconds=60))
    job(age=10, waiting_since=NOW - timedelta(seconds=10))
    job(status=Status.DEFERRED, next_run_at=NOW + timedelta(minutes=5))
    job(status=Status.DEFERRED, next_run_at=NOW + timedelta(minutes=1),
        waiting_since=NOW + timedelta(minutes=1))  # a countdown: not waiting yet
    job(status=Status.RUNNING)
    job(status=Status.SUCCEEDED, finished_at=NOW - timedelta(minutes=2))
    job(status=Status.FAILED, last_error="old failure", finished_at=NOW - timedelta(hours=1))
    job(status=Status.DEAD, last_error="HTTP 404", finished_at=NOW - timedelta(minutes=1))
    job(account="quiet", status=Status.SUCCEEDED)
    with django_assert_num_queries(1, using=database):
        acme, quiet = account_overview(now=NOW)
    assert acme == {
        "account": "acme", "ready": 2, "deferred": 2, "running": 1, "succeeded": 1,
        "failed": 1, "dead": 1, "oldest_ready_age": 60.0,
        "oldest_waiting": NOW - timedelta(seconds=60), "oldest_waiting_age": 60.0,
        "next_run_at": NOW + timedelta(minutes=1),
        "last_success": NOW - timedelta(minutes=2),
        "last_failed_at": NOW - timedelta(minutes=1), "last_error": "HTTP 404"}
    assert quiet["account"] == "quiet" and quiet["succeeded"] == 1
    assert quiet["oldest_ready_age"] is None and quiet["next_run_at"] is None
    assert quiet["last_error"] == "" and quiet["last_failed_at"] is None
    assert quiet["oldest_waiting_age"] is None and quiet["last_success"] is None


def test_account_overview_of_some_accounts_or_a_search_is_still_one_query(
        database, django_assert_num_queries):
    for account in ("acme", "beta", "betamax", "gamma"):
        job(account=account)
    with django_assert_num_queries(1, using=database):
        rows = account_overview(now=NOW, accounts=["gamma", "acme", "nobody"])
    assert [row["account"] for row in rows] == ["acme", "gamma"]
    assert [row["account"] for row in account_overview(now=NOW, search="bet")] == [
        "beta", "betamax"]
    with django_assert_num_queries(0, using=database):
        assert account_overview(now=NOW, accounts=[]) == []


@pytest.mark.parametrize("walk", [True, False])
def test_overview_pages_accounts_by_oldest_waiting_job_then_the_rest(monkeypatch, walk):
    if not walk:  # the database groups every page
        monkeypatch.setattr(overview, "WALK_ACCOUNTS", 0)
    now = timezone.now()
    expected = []
    for n in range(70):  # ties every 7: broken by account id
        since = now - timedelta(minutes=100 - n // 7)
        for k in range(2):  # two waiting jobs, the later one must not matter
            Job.objects.create(job_key=f"w{n}-{k}", task_id=f"w{n}-{k}", delivery_id="x:0",
                               task=SEND, queue="celery", account=f"w{n:02d}", status="ready",
                               waiting_since=since + timedelta(minutes=k * 50))
        expected.append((since, f"w{n:02d}"))
    for n in range(15):
        Job.objects.create(job_key=f"d{n}", task_id=f"d{n}", delivery_id="x:0", task=SEND,
                           queue="celery", account=f"done{n:02d}", status="succeeded")
        Job.objects.create(job_key=f"f{n}", task_id=f"f{n}", delivery_id="x:0", task=SEND,
                           queue="celery", account=f"done{n:02d}", status="deferred",
                           waiting_since=now + timedelta(hours=1))  # a countdown: not waiting
    order = [a for _, a in sorted(expected)] + [f"done{n:02d}" for n in range(15)]
    pages = [overview.overview_page("oldest", "", p, 20, now) for p in range(1, 6)]
    assert [a for page in pages for a in page.accounts] == order
    assert [page.has_next for page in pages] == [True, True, True, True, False]
    assert pages[3].waiting_accounts == 70
