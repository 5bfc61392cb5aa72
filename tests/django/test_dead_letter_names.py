"""One name for a dead letter everywhere: every command of both command lines, the admin's
dead-letter actions and its letter links take the letter's id, the Celery task id and the
worker log's ``task.name[task id]`` (store/readers/letter_names.py), on a real redis-server."""

import html
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Job
from tests.django.test_cli import SEND, bury, celery, manage

TASK_ID = "3f2a-77"
LETTER = f"{TASK_ID}:2"
FORMS = (LETTER, TASK_ID, f"{SEND}[{TASK_ID}]", f" {SEND}[{TASK_ID}]: ")



@pytest.mark.slow
@pytest.mark.parametrize("name", FORMS)
def test_every_dlq_command_takes_every_id_form_show_takes(rel, redis_url, name):
    letters = DeadLetters(rel.app)
    bury(rel, LETTER, lead=9)
    shown = celery("dlq", "show", name, redis_url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert "permanent: lead 9 was deleted" in shown.stdout

    replayed = celery("dlq", "replay", name, redis_url=redis_url)
    assert replayed.returncode == 0, replayed.stderr
    assert f"replayed {LETTER} as task " in replayed.stdout
    assert letters.count() == 0

    bury(rel, LETTER, lead=9)
    listed = celery("dlq", "list", redis_url=redis_url)
    assert LETTER in listed.stdout
    purged = celery("dlq", "purge", name, "--yes", redis_url=redis_url)
    assert purged.returncode == 0, purged.stderr
    assert "purged 1 dead letter" in purged.stdout
    assert letters.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("name", FORMS)
def test_manage_dlq_commands_take_every_id_form(rel, name):
    holder = User.objects.create_user("bob")
    holder.user_permissions.set(Permission.objects.filter(
        codename__in=["replay_job", "purge_job"], content_type__app_label="celery_fairqueue"))
    bury(rel, LETTER, lead=9)
    assert "permanent: lead 9 was deleted" in manage("dlq", "show", name)
    assert re.search(rf"replayed {LETTER} as task \S+",
                     manage("dlq", "replay", name, "--user", "bob"))
    bury(rel, LETTER, lead=9)
    assert "purged 1 dead letters" in manage("dlq", "purge", name, "--user", "bob")
    assert DeadLetters(rel.app).count() == 0


@pytest.mark.slow
@pytest.mark.django_db
def test_a_task_id_with_several_letters_is_shown_whole_and_refused_for_a_change(rel, redis_url):
    bury(rel, f"{TASK_ID}:0", lead=1)  # the task, then its replacement (Task.replace)
    bury(rel, f"{TASK_ID}~1:0", lead=2)
    shown = celery("dlq", "show", TASK_ID, redis_url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert f"{TASK_ID!r} names 2 dead letters" in shown.stdout
    assert shown.stdout.index("lead 1 was") < shown.stdout.index("lead 2 was")

    for command in (("replay",), ("purge", "--yes")):
        refused = celery("dlq", *command, TASK_ID, redis_url=redis_url)
        assert refused.returncode == 1
        assert f"names 2 dead letters ({TASK_ID}:0, {TASK_ID}~1:0): name one by its id" \
            in refused.stderr
    assert DeadLetters(rel.app).count() == 2
    purged = celery("dlq", "purge", f"{TASK_ID}~1:0", "--yes", redis_url=redis_url)
    assert purged.returncode == 0, purged.stderr
    assert [d.job_id for d in DeadLetters(rel.app).named(TASK_ID)] == [f"{TASK_ID}:0"]


def dead_row(letter_id: str = LETTER) -> Job:
    return Job.objects.create(job_key="task:" + TASK_ID, task_id=TASK_ID, delivery_id=letter_id,
                              task=SEND, queue="celery", account="acme", status="dead",
                              finished_at=timezone.now(), dead_reason="permanent: lead 9")


@pytest.mark.django_db
@pytest.mark.parametrize("name", FORMS)
def test_the_admin_links_to_a_dead_letter_by_every_id_form(rel, admin_client, name):
    bury(rel, LETTER, lead=9)
    row = dead_row()
    page = admin_client.get(reverse("admin:celery_fairqueue_deadjob_letter", args=[name]))
    assert page.status_code == 302
    assert page.url == reverse("admin:celery_fairqueue_deadjob_change", args=[row.pk])


@pytest.mark.django_db
def test_the_admin_link_to_a_missing_dead_letter_says_so(rel, admin_client):
    page = admin_client.get(reverse("admin:celery_fairqueue_deadjob_letter", args=[TASK_ID]),
                            follow=True)
    assert f"No dead letter {TASK_ID!r}" in html.unescape(page.content.decode())


@pytest.mark.django_db
def test_the_admins_replay_finds_the_letter_when_the_row_holds_the_task_id(rel, admin_client):
    bury(rel, LETTER, lead=9)
    row = dead_row(TASK_ID)  # a row that names its letter by the task id alone
    page = admin_client.post(reverse("admin:celery_fairqueue_deadjob_replay", args=[row.pk]),
                             follow=True)
    assert "Replayed 1 of 1 dead letters." in page.content.decode()
    assert DeadLetters(rel.app).count() == 0

