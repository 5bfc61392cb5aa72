"""The Django side on a store of four shards: the recorder reads every shard's event stream,
an account's page shows the jobs its shard holds, and ``manage.py fairqueue`` adds the shards
up."""

import importlib
import io

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import store_for
from celery_fairqueue.store.shards.placement import account_shard
from celery_fairqueue.store.shards.reshard import Resharder
from tests.harness import wait_until
from tests.harness.store_tools import claim_jobs

QUEUE = "celery"
Status = Job.Status


@pytest.fixture
def sharded(redis_server, redis_client, settings):
    """The sharded test app as the Django app's Celery app, on the flushed session Redis."""
    settings.CELERY_FAIRQUEUE_APP = "tests.apps.sharded.app"
    module = importlib.import_module("tests.apps.sharded")
    module.fresh()
    return module


def drain(recorder) -> int:
    total = 0
    while applied := recorder.run_once():
        total += applied
    return total


@pytest.mark.django_db(transaction=True)
def test_the_recorder_records_the_jobs_of_every_shard(database, sharded, make_recorder):
    recorder = make_recorder(sharded.app)
    accounts = [sharded.on_shard(k)[0] for k in range(sharded.SHARDS)]
    results = {account: sharded.job.delay(account, 1) for account in accounts}
    assert drain(recorder) == 4
    assert dict(Job.objects.values_list("account", "status")) == {
        account: Status.READY for account in accounts}
    store = store_for(sharded.app)
    leases = claim_jobs(store, [QUEUE], 4, "test-worker", AccountLimit().pack(0))
    assert len(leases) == 4
    assert drain(recorder) == 4  # each claim, on its shard's stream
    assert set(Job.objects.values_list("status", flat=True)) == {Status.RUNNING}
    for lease in leases[:2]:  # as the task does, on its account's shard
        store.shard_for(lease.account).emit("succeeded", job=lease.job_id)
        lease.store.ack(lease)
    assert drain(recorder) >= 2  # the successes (and what the acks write)
    statuses = dict(Job.objects.values_list("delivery_id", "status"))
    assert [statuses[lease.job_id] for lease in leases] == [Status.SUCCEEDED] * 2 + [
        Status.RUNNING] * 2
    assert {job.id for job in results.values()} == set(
        Job.objects.values_list("task_id", flat=True))
    assert recorder.reader.backlog() == 0


def viewer() -> Client:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue",
        codename__in=["view_job", "view_deadjob", "view_accountlimit", "view_account"]))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_page_of_an_account_on_shard_3_shows_its_jobs(sharded):
    account = sharded.on_shard(3)[0]
    jobs = [sharded.job.delay(account, n) for n in range(2)]
    sharded.job.delay(sharded.on_shard(0)[0], 0)
    response = viewer().get(account_url(account))
    assert response.status_code == 200
    assert response.context["live_error"] is None
    shown = [row["job"] for row in response.context["live_jobs"]]
    assert sorted(job.task_id for job in shown) == sorted(job.id for job in jobs)
    [row] = response.context["rows"]
    assert (row["queue"], row["state"].ready) == (QUEUE, 2)


@pytest.mark.django_db
def test_the_overview_and_the_management_command_add_up_the_shards(sharded):
    accounts = [sharded.on_shard(k)[0] for k in range(sharded.SHARDS)]
    for account in accounts:
        sharded.job.delay(account, 1)
    store = store_for(sharded.app)
    store.bury("dead:0", "permanent: no", record={"task": sharded.job.name,
                                                  "account": accounts[1], "args": []})
    user = User.objects.create_superuser("admin")
    out = io.StringIO()
    call_command("fairqueue", "status", stdout=out)
    [row] = [line.split() for line in out.getvalue().splitlines() if line.startswith("celery ")]
    assert row[:5] == ["celery", "4", "0", "0", "4"]
    assert "Dead letters: 1" in out.getvalue()
    out = io.StringIO()
    call_command("fairqueue", "jobs", "--account", accounts[2], stdout=out)
    assert out.getvalue().count("ready") >= 1 and "tests.apps.sharded.job" in out.getvalue()
    client = Client()
    client.force_login(user)
    response = client.get(reverse("admin:celery_fairqueue_account_changelist"))
    assert response.status_code == 200
    [queue] = response.context["queues"]
    assert queue["status"].ready == 4


@pytest.mark.django_db(transaction=True)
def test_the_recorder_follows_a_reshard_and_records_the_jobs_of_the_new_shards(
        database, sharded, make_recorder):
    sharded.app.conf.fairqueue_shards_check_interval = 0.2
    for cached in ("_fairqueue_settings", "_fairqueue_store"):
        sharded.app.__dict__.pop(cached, None)
    try:
        sharded.fresh()
        recorder = make_recorder(sharded.app, lock_seconds=0.6)
        assert drain(recorder) == 0 and len(recorder.reader.streams) == 4
        Resharder(settings_for(sharded.app), 8, settle=0, timeout=5).run()
        accounts = [f"acct-{n}" for n in range(40) if account_shard(f"acct-{n}", 8) >= 4][:3]
        for account in accounts:
            sharded.job.delay(account, 1)

        def recorded() -> bool:
            drain(recorder)
            return Job.objects.filter(account__in=accounts).count() == 3

        assert wait_until(recorded, timeout=5)
        assert len(recorder.reader.streams) == 8
        assert set(Job.objects.values_list("status", flat=True)) == {Status.READY}
    finally:
        sharded.app.conf.fairqueue_shards_check_interval = 60.0
        for cached in ("_fairqueue_settings", "_fairqueue_store"):
            sharded.app.__dict__.pop(cached, None)
