"""The jobs search of the console: a job found by its key's parts and by its arguments, on
SQLite and PostgreSQL, through the real producer and recorder; a redacted value never matches
and never shows."""


import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse

from celery_fairqueue.contrib.django.models import Job

pytestmark = pytest.mark.django_db

APP = "tests.apps.reliable"
SECRET = "ann@example.com"



@pytest.fixture
def viewer(client):
    user = User.objects.create_user("support", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue", codename="view_job"))
    client.force_login(user)
    return user


@pytest.fixture
def jobs(rel, database, make_recorder):
    """Three recorded send_step jobs (no worker: they stay ready), the first with a secret."""
    recorder = make_recorder(rel.app)
    rel.send_step.delay("acme", 1, "intro", 3, email=SECRET)
    rel.send_step.delay("acme", 12, "intro email", 3)
    rel.send_step.delay("beta", 1, "intro", 3)
    rel.send_message.delay("acme", 1)
    while recorder.run_once():
        pass
    assert Job.objects.count() == 4
    return rel


def search(client, q):
    response = client.get(reverse("admin:celery_fairqueue_job_changelist"), {"q": q})
    assert response.status_code == 200
    found = sorted((job.task.rsplit(".", 1)[-1], job.account, job.args.get("lead_id"))
                   for job in response.context["cl"].result_list)
    return found, [str(m) for m in get_messages(response.wsgi_request)], response


def test_searching_a_tasks_key_parts_finds_the_job_by_the_key_the_task_computed(
        client, viewer, jobs):
    found, said, _ = search(client, "send_step account_id=acme lead_id=1 step=intro "
                                    "campaign_rev=3")
    assert found == [("send_step", "acme", 1)]
    key = jobs.send_step.business_key("acme", ("acme", 1, "intro", 3), {})
    assert Job.objects.get(job_key=key).args["lead_id"] == 1
    assert any(key in message for message in said)
    # the account as account=, a quoted part with a space, the full task name
    assert search(client, f'{jobs.send_step.name} account=acme lead_id=12 '
                          'step="intro email" campaign_rev=3')[0] == [("send_step", "acme", 12)]
    # typed as JSON: the string "1" is another lead, whose key no job has
    assert search(client, 'send_step account=acme lead_id="1" step=intro campaign_rev=3'
                  )[0] == []


def test_the_find_by_key_form_sends_its_parts_as_that_search(client, viewer, jobs):
    page = client.get(reverse("admin:celery_fairqueue_job_changelist"))
    assert b'data-task="tests.apps.reliable.send_step"' in page.content
    response = client.get(reverse("admin:celery_fairqueue_job_by_key"), {
        "task": jobs.send_step.name, "account_id": "acme", "lead_id": "12",
        "step": "intro email", "campaign_rev": "3"}, follow=True)
    assert [(j.account, j.args["lead_id"]) for j in response.context["cl"].result_list] == [
        ("acme", 12)]


def test_parts_that_make_no_key_are_refused_with_a_clear_message(client, viewer, jobs):
    found, said, _ = search(client, "send_step account=acme lead_id=NaN step=intro "
                                    "campaign_rev=3")
    assert found == [] and any("NaN is not a JSON value" in m for m in said)
    # not all the parts: the task's jobs that have the arguments given
    found, said, _ = search(client, "send_step lead_id=1")
    assert found == [("send_step", "acme", 1), ("send_step", "beta", 1)]
    assert any("the key needs" in m for m in said)


def test_searching_an_argument_value_finds_the_jobs_that_have_it(client, viewer, jobs):
    assert search(client, "lead_id=1")[0] == [
        ("send_message", "acme", 1), ("send_step", "acme", 1), ("send_step", "beta", 1)]
    assert search(client, 'step="intro email"')[0] == [("send_step", "acme", 12)]
    assert search(client, "lead 12")[0] == [("send_step", "acme", 12)]  # a part of one
    assert search(client, "acme lead_id=1 send_step")[0] == [("send_step", "acme", 1)]


def test_a_redacted_arguments_value_never_matches_and_never_shows(client, viewer, jobs):
    for q in (SECRET, "ann@", f"email={SECRET}", "example.com"):
        assert search(client, q)[0] == [], q
    _, _, page = search(client, "lead_id=1")
    assert b"email=***" in page.content  # the list shows the arguments, the secret masked
    assert SECRET.encode() not in page.content
    assert SECRET not in Job.objects.get(args__lead_id=1, account="acme",
                                         task__endswith="send_step").args_text


def test_the_list_shows_each_jobs_arguments(client, viewer, jobs):
    page = client.get(reverse("admin:celery_fairqueue_job_changelist"))
    assert "lead_id=12 \u00b7 step=intro email \u00b7 campaign_rev=3" in page.content.decode()


def test_postgres_serves_the_argument_search_from_a_trigram_index(database, jobs):
    if database != "postgres":
        pytest.skip("the trigram index is PostgreSQL's")
    from django.db import connections

    query = Job.objects.using(database).filter(args_text__icontains="\nstep=intro\n")
    with connections[database].cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # four rows: else a scan is cheaper
        sql, params = query.query.get_compiler(using=database).as_sql()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "fq_job_args_trgm" in plan, plan
