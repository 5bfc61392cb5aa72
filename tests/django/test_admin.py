"""The admin on a real redis-server: browsing, filters, job pages, dead-letter replay and purge
with and without their permissions, account limits and the account overview."""

from datetime import timedelta

import pytest
from celery import Celery, signals
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

import celery_fairqueue
from celery_fairqueue import DeadLetters, get_account_limit
from celery_fairqueue.contrib.django.models import AccountLimit, Attempt, Job
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import FairStore, store_for
from celery_fairqueue.store.connection.connect import make_client
from celery_fairqueue.store.formats.keys import Keys
from tests.harness import free_port, wait_until

pytestmark = pytest.mark.django_db

APP = "tests.apps.reliable"
SEND = "tests.apps.reliable.send_message"
VIEWER = ("view_job", "view_deadjob", "view_accountlimit", "view_account")
LIMIT_EDITOR = (*VIEWER, "add_accountlimit", "change_accountlimit", "delete_accountlimit")

DEAD_URL = f"redis://127.0.0.1:{free_port()}/0"
down = Celery("down", broker=DEAD_URL)
down.conf.fairqueue_redis_url = DEAD_URL
celery_fairqueue.install(down)
# No retries against the closed port: the store's own client would back off for seconds.
down._fairqueue_store = FairStore(
    make_client(DEAD_URL, retries=0),
    Keys(), settings_for(down))



@pytest.fixture
def redis_down(settings):
    settings.CELERY_FAIRQUEUE_APP = "tests.django.test_admin.down"


@pytest.fixture
def login(client):
    """``login(*codenames)``: a staff user with those permissions, logged in."""

    def log_in(*codenames: str) -> User:
        user = User.objects.create_user(f"staff{User.objects.count()}", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(
            content_type__app_label="celery_fairqueue", codename__in=codenames))
        client.force_login(user)
        return user

    return log_in


def make_job(n: int, account: str = "acme", status: str = "ready", **fields) -> Job:
    now = timezone.now()
    values = {"job_key": f"key-{account}-{n}", "task_id": f"task-{account}-{n}",
              "delivery_id": f"task-{account}-{n}:0", "task": SEND, "queue": "celery",
              "account": account, "status": status, "enqueued_at": now - timedelta(minutes=n),
              "args": {"account_id": account, "lead_id": n}}
    return Job.objects.create(**{**values, **fields})


def dead_row(rel, letter_id: str, account: str = "acme", n: int = 1) -> Job:
    """The row the recorder writes for a dead letter (written here directly)."""
    return make_job(n, account, "dead", task_id=letter_id.rsplit(":", 1)[0],
                    delivery_id=letter_id, attempts=1, finished_at=timezone.now(),
                    last_error="PermanentError: lead was deleted")


def bury(rel, letter_id: str, account: str = "acme", lead: int = 1) -> None:
    """A dead letter as the worker writes it, without waiting for a worker to fail."""
    store_for(rel.app).bury(letter_id, f"permanent: lead {lead} was deleted", record={
        "task": SEND, "account": account,
        "args": [account, lead], "kwargs": {}, "attempts": 1,
        "error": f"PermanentError: lead {lead} was deleted"})


def run_action(client, action: str, *jobs: Job):
    url = reverse("admin:celery_fairqueue_deadjob_changelist")
    return client.post(url, {"action": action, "_selected_action": [j.pk for j in jobs]},
                       follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def listed(client, url_name: str, **query) -> list[str]:
    response = client.get(reverse(f"admin:celery_fairqueue_{url_name}_changelist"), query)
    assert response.status_code == 200
    return sorted(job.job_key for job in response.context["cl"].result_list)


def listed_by_link(client, title: str, choice: str) -> list[str]:
    """Follow the link that the filter ``title`` offers for ``choice``."""
    page = client.get(reverse("admin:celery_fairqueue_job_changelist"))
    [spec] = [s for s in page.context["cl"].filter_specs if s.title == title]
    [link] = [c["query_string"] for c in spec.choices(page.context["cl"]) if c["display"] == choice]
    response = client.get(reverse("admin:celery_fairqueue_job_changelist") + link)
    return sorted(job.job_key for job in response.context["cl"].result_list)


def test_job_list_filters_by_account_status_task_queue_date_and_searches(client, login, rel):
    login(*VIEWER)
    make_job(1, "acme")
    make_job(2, "acme", "dead")
    make_job(3, "beta", "running", task="tests.apps.reliable.plain_send", queue="critical")
    make_job(4, "beta", enqueued_at=timezone.now() - timedelta(days=40))
    assert listed(client, "job", account="beta") == ["key-beta-3", "key-beta-4"]
    assert listed(client, "job", status__exact="dead") == ["key-acme-2"]
    assert listed(client, "job", task="tests.apps.reliable.plain_send") == ["key-beta-3"]
    assert listed(client, "job", queue="critical") == ["key-beta-3"]
    assert listed(client, "job", account="acme", status__exact="ready") == ["key-acme-1"]
    assert listed_by_link(client, "enqueued at", "Past 7 days") == [
        "key-acme-1", "key-acme-2", "key-beta-3"]
    assert listed(client, "job", q="key-beta") == ["key-beta-3", "key-beta-4"]
    assert listed(client, "job", q="task-acme-2") == ["key-acme-2"]
    assert listed(client, "deadjob") == ["key-acme-2"]
    page = client.get(reverse("admin:celery_fairqueue_job_changelist"), {"account": "beta"})
    assert b'value="beta"' in page.content  # the account box keeps what was typed
    assert b"Account overview" in page.content


def test_job_page_shows_the_attempt_history_and_last_error_read_only(client, login, rel):
    login(*VIEWER)
    job = make_job(1, status="failed", attempts=2, last_error="TimeoutError: upstream")
    Attempt.objects.create(job=job, number=1, delivery_id=job.delivery_id, outcome="retrying",
                           error="TimeoutError: first try", worker="w1")
    Attempt.objects.create(job=job, number=2, delivery_id="x:1", outcome="failed",
                           error="TimeoutError: upstream", worker="w2")
    page = client.get(reverse("admin:celery_fairqueue_job_change", args=[job.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "TimeoutError: first try" in text and "retrying" in text and "w2" in text
    assert "TimeoutError: upstream" in text
    assert 'name="_save"' not in text  # read-only: nothing to save


def test_job_page_shows_the_succeeded_attempt_that_only_the_job_row_tells(client, login, rel):
    login(*VIEWER)
    started = timezone.now() - timedelta(seconds=3)
    job = make_job(1, status="succeeded", attempts=2, worker="w2", started_at=started,
                   finished_at=started + timedelta(seconds=1), delivery_id="task-acme-1:1")
    Attempt.objects.create(job=job, number=1, delivery_id="task-acme-1:0", outcome="retrying",
                           error="TimeoutError: first try", worker="w1")
    page = client.get(reverse("admin:celery_fairqueue_job_change", args=[job.pk]))
    rows = page.content.decode().split('class="fq-attempt"')[1:]
    assert len(rows) == 2
    assert "w1" in rows[0] and "retrying" in rows[0] and "TimeoutError: first try" in rows[0]
    assert "w2" in rows[1] and "succeeded" in rows[1]


def test_pages_work_with_redis_down(client, login, redis_down):
    login(*VIEWER)
    job = make_job(1, status="dead")
    AccountLimit.objects.bulk_create([AccountLimit(account="acme", rate="5/s")])
    for name in ("job_changelist", "deadjob_changelist", "accountlimit_changelist",
                 "account_changelist"):
        assert client.get(reverse(f"admin:celery_fairqueue_{name}")).status_code == 200
    page = client.get(reverse("admin:celery_fairqueue_deadjob_change", args=[job.pk]))
    assert page.status_code == 200
    account = client.get(reverse("admin:celery_fairqueue_account_page", args=["acme"]))
    assert account.status_code == 200
    assert b"the fair store cannot be read" in account.content
    overview = client.get(reverse("admin:celery_fairqueue_account_changelist"))
    assert b"cannot be read" in overview.content


def test_without_the_permissions_replay_and_purge_are_refused(client, login, rel):
    login(*VIEWER, "replay_job")
    bury(rel, "t1:0")
    row = dead_row(rel, "t1:0")
    page = client.get(reverse("admin:celery_fairqueue_deadjob_changelist"))
    choices = [name for name, _ in page.context["action_form"].fields["action"].choices]
    assert "replay" in choices and "purge" not in choices

    response = run_action(client, "purge", row)  # a forged POST
    assert "No action selected." in messages_of(response)
    assert DeadLetters(rel.app).count() == 1
    assert Job.objects.filter(pk=row.pk, status="dead").exists()

    login(*VIEWER, "purge_job")
    page = client.get(reverse("admin:celery_fairqueue_deadjob_changelist"))
    assert b'value="replay"' not in page.content
    run_action(client, "replay", row)
    assert DeadLetters(rel.app).get("t1:0").task == SEND
    assert Job.objects.get(pk=row.pk).status == "dead"


def test_replay_runs_the_dead_job_once_on_a_real_worker(client, login, rel, redis_client,
                                                        celery_worker_factory, ledger):
    login(*VIEWER, "replay_job")
    redis_client.set("fail:7", "permanent")
    celery_worker_factory(APP)
    rel.send_message.delay("acme", 7)
    dlq = DeadLetters(rel.app)
    assert wait_until(lambda: dlq.count() == 1, timeout=15)
    [letter] = dlq.list()
    row = dead_row(rel, letter.job_id, n=7)
    gone = dead_row(rel, "replayed-elsewhere:0", n=8)
    redis_client.delete("fail:7")  # the lead is back

    response = run_action(client, "replay", row, gone)
    notes = messages_of(response)
    assert "Replayed 1 of 2 dead letters." in notes
    assert ("Not replayed: send_message [acme] (replayed-elsewhere:0): not found: replayed or "
            "purged already.") in notes
    assert ledger.wait_for(1, timeout=15) == {"acme:7": 1}
    row.refresh_from_db()
    assert row.status == "ready" and row.task_id != letter.job_id.rsplit(":", 1)[0]
    assert dlq.count() == 0
    assert listed(client, "deadjob") == ["key-acme-8"]


def test_a_replay_that_loses_the_race_reports_not_found_and_the_batch_goes_on(client, login,
                                                                              rel):
    login(*VIEWER, "replay_job")
    rows = []
    for lead in (1, 2, 3):
        bury(rel, f"t{lead}:0", lead=lead)
        rows.append(dead_row(rel, f"t{lead}:0", n=lead))
    won: list[str] = []

    def replay_t2_first(body, **_) -> None:  # another admin wins t2 between read and replay
        if body[0] == ["acme", 2] and not won:
            won.append("replaying")
            won[0] = DeadLetters(rel.app).replay("t2:0").id

    signals.before_task_publish.connect(replay_t2_first, weak=False)
    try:
        response = run_action(client, "replay", *rows)
    finally:
        signals.before_task_publish.disconnect(replay_t2_first)
    assert response.status_code == 200 and won
    notes = messages_of(response)
    assert "Replayed 2 of 3 dead letters." in notes
    assert ("Not replayed: send_message [acme] (t2:0): not found: replayed or purged "
            "already.") in notes
    assert DeadLetters(rel.app).count() == 0
    assert [Job.objects.get(pk=row.pk).status for row in rows] == ["ready", "dead", "ready"]


def test_purge_deletes_the_dead_letter_and_its_row(client, login, rel):
    login(*VIEWER, "purge_job")
    bury(rel, "t1:0")
    bury(rel, "t2:0", account="beta", lead=2)
    rows = [dead_row(rel, "t1:0"), dead_row(rel, "t2:0", "beta", 2),
            dead_row(rel, "purged-before:0", n=3)]
    notes = messages_of(run_action(client, "purge", *rows))
    assert "Purged 2 of 3 dead letters." in notes
    assert any("purged-before:0" in note and "not found" in note for note in notes)
    assert DeadLetters(rel.app).count() == 0
    assert listed(client, "deadjob") == ["key-acme-3"]


def test_replay_and_purge_say_when_redis_is_down(client, login, redis_down):
    login(*VIEWER, "replay_job", "purge_job")
    row = make_job(1, status="dead")
    for action in ("replay", "purge"):
        response = run_action(client, action, row)
        assert response.status_code == 200
        assert any("cannot be reached" in note for note in messages_of(response))
        assert Job.objects.get(pk=row.pk).status == "dead"


def test_account_limit_form_shows_validation_errors(client, login, rel):
    login(*LIMIT_EDITOR)
    page = client.post(reverse("admin:celery_fairqueue_accountlimit_add"),
                       {"account": "acme", "rate": "fast", "window": "9-5"})
    assert page.status_code == 200
    assert "is not in Celery&#x27;s format" in page.content.decode()
    assert not AccountLimit.objects.exists()


def test_saving_a_limit_pushes_it_to_redis(client, login, rel,
                                           django_capture_on_commit_callbacks):
    login(*LIMIT_EDITOR)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:celery_fairqueue_accountlimit_add"),
                               {"account": "acme", "rate": "10/s", "burst": "5",
                                "concurrency": "2", "window": "09:00-17:00",
                                "tz": "Europe/Berlin"})
    assert response.status_code == 302
    limit = get_account_limit(rel.app, "acme")
    assert (limit.rate, limit.burst, limit.concurrency, limit.tz) == (
        "10/s", 5.0, 2, "Europe/Berlin")


def test_limits_are_not_saved_or_deleted_while_redis_is_down(client, login, redis_down):
    login(*LIMIT_EDITOR)
    page = client.post(reverse("admin:celery_fairqueue_accountlimit_add"),
                       {"account": "acme", "rate": "10/s"})
    assert page.status_code == 200 and b"cannot be reached" in page.content
    assert not AccountLimit.objects.exists()
    [limit] = AccountLimit.objects.bulk_create([AccountLimit(account="beta", rate="1/s")])
    response = client.post(
        reverse("admin:celery_fairqueue_accountlimit_delete", args=[limit.pk]), {"post": "yes"},
        follow=True)
    assert any("cannot be reached" in note for note in messages_of(response))
    assert AccountLimit.objects.filter(account="beta").exists()


def test_account_overview_has_a_row_per_account(client, login, rel):
    login(*VIEWER)
    make_job(1, "acme")
    make_job(2, "acme", "dead", last_error="PermanentError: gone", finished_at=timezone.now())
    make_job(3, "beta", "running")
    page = client.get(reverse("admin:celery_fairqueue_account_changelist"))
    assert page.status_code == 200
    rows = {row["account"]: row for row in page.context["rows"]}
    assert rows["acme"]["counts"] == [1, 0, 0, 0, 1]
    assert rows["beta"]["counts"] == [0, 0, 1, 0, 0]
    assert rows["acme"]["last_error"] == "PermanentError: gone"
    assert "PermanentError: gone" in page.content.decode()
    filtered = client.get(reverse("admin:celery_fairqueue_account_changelist"), {"q": "bet"})
    assert [row["account"] for row in filtered.context["rows"]] == ["beta"]


def test_the_overview_says_why_no_job_runs_on_a_store_waiting_for_its_upgrade(client, login, rel,
                                                                              redis_client):
    login(*VIEWER)
    redis_client.set("{fairqueue}:format", "1")  # as a store an earlier version wrote reads
    page = client.get(reverse("admin:celery_fairqueue_account_changelist")).content.decode()
    assert 'id="fq-layout-format"' in page and "fairqueue upgrade" in page
    redis_client.set("{fairqueue}:format", "2")
    page = client.get(reverse("admin:celery_fairqueue_account_changelist")).content.decode()
    assert 'id="fq-layout-format"' not in page


def test_account_overview_needs_the_view_permission(client, login, rel):
    login()
    assert client.get(reverse("admin:celery_fairqueue_account_changelist")).status_code == 403


def test_account_overview_pages_in_the_database(client, login, rel):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    login(*VIEWER)
    for n in range(250):
        make_job(n, f"account-{n:03d}")
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("admin:celery_fairqueue_account_changelist"), {"p": 2})
    assert [row["account"] for row in page.context["rows"]] == [
        f"account-{n:03d}" for n in range(50, 100)]
    grouped = [q["sql"] for q in queries.captured_queries if "GROUP BY" in q["sql"]]
    # every grouped query reads one page (LIMIT), the page's own accounts (IN), or counts
    assert grouped and all("LIMIT 51" in sql or " IN (" in sql or "COUNT(" in sql
                           for sql in grouped)
