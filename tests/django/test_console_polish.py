"""The console's last mile (issue 26, item 6), each guarantee on the pages as served: help text
that survives HTML, runs labelled for what they are, words on the badges, an account whose
jobs all dead-letter called failing, ids that take one line, the workers' running jobs."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.store import WorkerRegistration, store_for
from tests.harness.store_tools import hold_lease

pytestmark = pytest.mark.django_db

APP = "tests.apps.reliable"
VIEWER = ("view_job", "view_deadjob", "view_accountlimit", "view_account")



@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue", codename__in=VIEWER))
    client.force_login(user)
    return client


def job(n: int, account: str = "acme", status: str = "succeeded", **fields) -> Job:
    values = {"job_key": f"key-{n}", "task_id": f"t{n}", "delivery_id": f"t{n}:0",
              "task": f"{APP}.send_message", "queue": "celery", "account": account,
              "status": status, "enqueued_at": timezone.now() - timedelta(minutes=5)}
    return Job.objects.create(**{**values, **fields})


def attempt(row: Job, delivery: str, outcome: str, **fields) -> Attempt:
    return Attempt.objects.create(job=row, number=int(delivery.rsplit(":", 1)[1]) + 1,
                                  delivery_id=delivery, outcome=outcome, **fields)


def page(client, name: str, *args) -> str:
    response = client.get(reverse(f"admin:celery_fairqueue_{name}", args=args))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("name", ["job_change", "deadjob_change"])
def test_the_job_key_help_text_shows_task_id_on_the_job_and_dead_letter_pages(viewer, rel,
                                                                                 name):
    row = job(1, status="dead")
    assert "or task:&lt;id&gt;." in page(viewer, name, row.pk)


def test_only_a_dead_letter_replay_is_labelled_a_replay(viewer, rel):
    row = job(2)
    attempt(row, "first:0", "succeeded")
    attempt(row, "second:0", "dead")  # the same key enqueued again, after the first succeeded
    attempt(row, "third:0", "succeeded")  # its dead letter replayed
    runs = re.findall(r'<h3 class="fq-run">([^(<]*)', page(viewer, "job_change", row.pk))
    assert [r.strip() for r in runs] == ["First run", "Run 2, enqueued again",
                                         "Replay 1"]


def test_a_long_id_takes_one_line_with_the_whole_id_in_its_title(viewer, rel):
    account = "a" * 1000
    row = job(3, account=account, delivery_id=f"{'d' * 1000}:0")
    attempt(row, f"{'d' * 1000}:0", "succeeded")
    listing = viewer.get(reverse("admin:celery_fairqueue_job_changelist")).content.decode()
    assert f'title="{account}">{"a" * 39}…</span>' in listing
    assert f">{account}<" not in listing
    detail = page(viewer, "job_change", row.pk)
    assert f'title="{"d" * 1000}:0">{"d" * 19}…</span>' in detail


def test_badges_show_words_and_keep_the_reason_name_in_an_attribute(viewer, rel):
    rel.send_message.delay("acme", 1)  # ready, and no worker consumes the queue
    job(4)
    text = viewer.get(str(account_url("acme"))).content.decode()
    assert re.search(r'data-reason="no_worker"[^>]*>No worker</span>', text)
    overview = viewer.get(reverse("admin:celery_fairqueue_account_changelist")).content.decode()
    assert re.search(r'data-reason="no_worker"[^>]*>No worker</span>', overview)
    assert ">no_worker<" not in text + overview


def test_an_account_whose_recent_jobs_all_dead_letter_is_failing_in_red(viewer, rel):
    store_for(rel.app).register_worker("w", WorkerRegistration("celery@w", ("celery",), 1))
    rel.send_message.apply_async(("doomed", 9), countdown=3600)  # in the store, nothing ready
    for n in (5, 6):
        job(n, account="doomed", status="dead", finished_at=timezone.now())
    text = viewer.get(str(account_url("doomed"))).content.decode()
    assert re.search(r'class="fq-badge fq-failing" data-reason="failing"[^>]*>Failing<', text)
    assert ('<div class="fq-reason-text fq-failing-text">failing: 2 dead letters in the last '
            'hour</div>') in text
    overview = viewer.get(reverse("admin:celery_fairqueue_account_changelist")).content.decode()
    assert re.search(r'data-reason="failing"[^>]*>Failing</span> <span class="fq-muted '
                     r'fq-failing-text">celery: failing: 2 dead letters', overview)
    job(7, account="doomed", finished_at=timezone.now())  # a success in the hour: not failing
    assert "data-reason=\"failing\"" not in viewer.get(str(account_url("doomed"))).content.decode()


def test_the_workers_table_shows_running_jobs_counts_and_uptime(viewer, rel):
    store = store_for(rel.app)
    started = store.server_time() - 3725
    store.register_worker("tok", WorkerRegistration("celery@busy", ("celery",), 4,
                                                    started=started, succeeded=12, failed=3))
    hold_lease(store, "job-1:0", "tok")
    overview = viewer.get(reverse("admin:celery_fairqueue_account_changelist")).content.decode()
    [row] = re.findall(r'<tr class="fq-worker">(.*?)</tr>', overview, re.S)
    cells = [re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                      row, re.S)]
    assert cells[0] == ["celery@busy"]
    assert cells[2] == ["1", "of", "4", "job-1:0"]
    assert cells[3:6] == [["12"], ["3"], ["1h", "02m"]]
