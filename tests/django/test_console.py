"""The support console on a real redis-server: the operator actions refuse users without their
own permission (403, nothing changed in Redis), need a CSRF token, and land in the admin log;
every user-supplied string is escaped; account ids of any shape get a working page."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from celery_fairqueue import get_account_limit, pause
from celery_fairqueue.contrib.django.admin.common import account_from_ref, account_ref, account_url
from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.store import StoreInspector, store_for
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.shards.account_move import AccountMover

pytestmark = pytest.mark.django_db

APP = "tests.apps.reliable"
SEND = "tests.apps.reliable.send_message"
VIEWER = ("view_job", "view_deadjob", "view_accountlimit", "view_account")
ACTION_PERMISSIONS = {"pause": "pause_account", "resume": "resume_account",
                      "cancel": "cancel_job", "run_now": "run_job_now",
                      "limit": "edit_account_limit"}
HOSTILE = "<script>alert(1)</script>"



def staff(*codenames: str, name: str = "") -> User:
    user = User.objects.create_user(name or f"staff{User.objects.count()}", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue", codename__in=codenames))
    return user


def logged_in(user: User, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def action_url() -> str:
    return reverse("admin:celery_fairqueue_account_action")


def store_snapshot(rel) -> dict:
    """What the actions could change in Redis: pauses, limits, each job's place."""
    store = store_for(rel.app)
    client, keys = store.client, store.keys
    queues = {q: (client.zrange(keys.queue(q).delayed, 0, -1), store.counts(q)["ready"])
              for q in store.known_queues()}
    return {"pauses": sorted(str(p) for p in store.pauses()),
            "limit": get_account_limit(rel.app, "acme"), "queues": queues}


def posts(rel) -> dict[str, dict[str, str]]:
    """A forged POST per action, aimed at real state: a delayed job and a paused account."""
    delayed = rel.send_message.apply_async(("acme", 1), countdown=600)
    pause(rel.app, account="beta", by="alice", reason="maintenance")
    return {"pause": {"action": "pause", "account": "acme", "reason": "forged"},
            "resume": {"action": "resume", "account": "beta"},
            "cancel": {"action": "cancel", "task_id": delayed.id},
            "run_now": {"action": "run_now", "task_id": delayed.id},
            "limit": {"action": "limit", "account": "acme", "rate": "1/m"}}


@pytest.mark.parametrize("action", sorted(ACTION_PERMISSIONS))
def test_staff_without_the_permission_cannot_act_by_forged_post(rel, action):
    forged = posts(rel)
    others = [p for a, p in ACTION_PERMISSIONS.items() if a != action]
    client = logged_in(staff(*VIEWER, *others))  # every permission but this action's own
    before = store_snapshot(rel)
    response = client.post(action_url(), forged[action])
    assert response.status_code == 403
    assert store_snapshot(rel) == before
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("action", sorted(ACTION_PERMISSIONS))
def test_each_action_with_its_permission_changes_the_store_and_is_logged(rel, action):
    forged = posts(rel)
    user = staff(*VIEWER, ACTION_PERMISSIONS[action], name="alice")
    before = store_snapshot(rel)
    response = logged_in(user).post(action_url(), forged[action])
    assert response.status_code == 302
    assert store_snapshot(rel) != before
    [entry] = LogEntry.objects.all()
    assert entry.user == user and entry.change_message


def test_actions_need_a_csrf_token_and_post(rel):
    forged = posts(rel)
    client = logged_in(staff(*VIEWER, *ACTION_PERMISSIONS.values()), csrf=True)
    before = store_snapshot(rel)
    for data in forged.values():
        assert client.post(action_url(), data).status_code == 403
    assert client.get(action_url(), forged["pause"]).status_code == 405
    assert store_snapshot(rel) == before
    page = client.get(account_url("acme"))  # the page's own forms carry the token
    token = page.context["csrf_token"]
    response = client.post(action_url(), {**forged["pause"], "csrfmiddlewaretoken": str(token)})
    assert response.status_code == 302
    assert [p.by for p in store_for(rel.app).pauses() if p.account == "acme"] == ["staff0"]


def test_pause_records_who_and_why_and_the_page_says_so(rel):
    rel.send_message.delay("acme", 1)
    user = staff(*VIEWER, "pause_account", "resume_account", name="alice")
    client = logged_in(user)
    response = client.post(action_url(), {"action": "pause", "account": "acme",
                                           "reason": "billing hold", "next": account_url("acme")})
    assert response.status_code == 302 and response["Location"] == account_url("acme")
    page = client.get(account_url("acme")).content.decode()
    assert "paused by alice" in page and "billing hold" in page
    [state] = StoreInspector(rel.app).console.account_state("acme")
    assert state.reason == "paused"
    client.post(action_url(), {"action": "resume", "account": "acme"})
    [state] = StoreInspector(rel.app).console.account_state("acme")
    assert state.reason != "paused"
    assert [e.change_message for e in LogEntry.objects.order_by("id")] == [
        "Paused account 'acme': billing hold", "Resumed account 'acme'"]


def test_an_account_a_reshard_is_moving_reads_moving_and_a_resume_is_refused_in_words(rel):
    """The reshard's own pause is no operator's: the page says "Moving to another shard",
    offers no pause or resume button for it, and a forged resume is refused with the reason."""
    rel.send_message.delay("acme", 1)
    store = store_for(rel.app)
    AccountMover(store.shards).freeze(0, {encode_id("acme"): 1})
    client = logged_in(staff(*VIEWER, "pause_account", "resume_account"))
    page = client.get(account_url("acme")).content.decode()
    assert "Moving to another shard" in page and "moving to shard 1 (fairqueue reshard" in page
    assert 'class="fq-resume"' not in page and 'class="fq-pause"' not in page
    response = client.post(action_url(), {"action": "resume", "account": "acme",
                                           "next": account_url("acme")}, follow=True)
    assert "moving it to shard 1" in response.content.decode()
    assert [p.by for p in store.pauses()] == ["fairqueue reshard"]


def test_open_redirects_are_refused(rel):
    client = logged_in(staff(*VIEWER, "pause_account"))
    response = client.post(action_url(), {"action": "pause", "account": "acme",
                                           "next": "https://evil.example/"})
    assert response["Location"] == reverse("admin:celery_fairqueue_account_changelist")


def test_every_user_supplied_string_is_escaped(rel, redis_client):
    now = timezone.now()
    job = Job.objects.create(
        job_key="k1", task_id="t1", delivery_id="t1:0", task=f"tasks.{HOSTILE}", queue="celery",
        account=HOSTILE, status="dead", attempts=1, enqueued_at=now, finished_at=now,
        last_error=f"ValueError: {HOSTILE}", dead_reason=f"permanent: {HOSTILE}")
    Attempt.objects.create(job=job, number=1, delivery_id="t1:0", outcome="dead",
                           error=f"ValueError: {HOSTILE}", worker=HOSTILE)
    rel.send_message.delay(HOSTILE, 2)
    pause(rel.app, account=HOSTILE, by=HOSTILE, reason=HOSTILE)
    client = logged_in(User.objects.create_superuser("root", "root@example.com", "x"))
    pages = [account_url(HOSTILE), reverse("admin:celery_fairqueue_account_changelist"),
             reverse("admin:celery_fairqueue_job_changelist"),
             reverse("admin:celery_fairqueue_deadjob_changelist"),
             reverse("admin:celery_fairqueue_job_change", args=[job.pk]),
             reverse("admin:celery_fairqueue_deadjob_change", args=[job.pk])]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        text = response.content.decode()
        assert "<script>alert(1)" not in text, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, url


@pytest.mark.parametrize("account", ["acme", "a b/c", "..", ".", "ünï cødé/😀", "100%", "a?b#c"])
def test_account_ids_of_any_shape_have_a_page(rel, account):
    assert account_from_ref(account_ref(account)) == account
    Job.objects.create(job_key="k", task_id="t", delivery_id="t:0", task=SEND, queue="celery",
                       account=account, status="ready", enqueued_at=timezone.now())
    client = logged_in(staff(*VIEWER))
    response = client.get(account_url(account))
    assert response.status_code == 200
    assert response.context["account"] == account


def test_attempts_are_grouped_by_run_with_replays_apart(rel):
    now = timezone.now()
    job = Job.objects.create(job_key="k", task_id="new", delivery_id="new:2", task=SEND,
                             queue="celery", account="acme", status="succeeded", attempts=3)
    for number in (1, 2, 3):  # the first run, then its replay: recorded interleaved
        for task_id in ("old", "new"):
            Attempt.objects.create(job=job, number=number, delivery_id=f"{task_id}:{number - 1}",
                                   outcome="retrying", started_at=now,
                                   finished_at=now + timedelta(milliseconds=1234))
    client = logged_in(staff(*VIEWER))
    text = client.get(reverse("admin:celery_fairqueue_job_change", args=[job.pk])
                      ).content.decode()
    first, replay = text.index("First run (task id old)"), text.index("Replay 1 (task id new)")
    assert first < replay
    assert text[first:replay].count("old:") == 3 and "new:" not in text[first:replay]
    assert "1,234 ms" in text
    assert now.strftime("%H:%M:%S") in text


def test_dead_letter_list_has_a_reason_column_and_filter(rel):
    now = timezone.now()
    for n, reason in enumerate(["permanent: lead was deleted",
                                "gave up after 3 attempts: TimeoutError"]):
        Job.objects.create(job_key=f"k{n}", task_id=f"t{n}", delivery_id=f"t{n}:0", task=SEND,
                           queue="celery", account="acme", status="dead", finished_at=now,
                           dead_reason=reason)
    client = logged_in(staff(*VIEWER))
    url = reverse("admin:celery_fairqueue_deadjob_changelist")
    text = client.get(url).content.decode()
    assert "permanent: lead was deleted" in text and "gave up after 3 attempts" in text

    def keys(**query: str) -> list[str]:
        return [job.job_key for job in client.get(url, query).context["cl"].result_list]

    assert keys(reason="gave_up") == ["k1"]
    assert keys(reason="permanent") == ["k0"]


def test_account_pages_need_a_view_permission(rel):
    client = logged_in(staff())
    assert client.get(account_url("acme")).status_code == 403
    assert client.get(reverse("admin:celery_fairqueue_account_changelist")).status_code == 403
    index = logged_in(staff("view_job")).get(reverse("admin:index")).content.decode()
    assert reverse("admin:celery_fairqueue_account_changelist") in index


def test_throughput_counts_each_minute_and_keeps_the_finished_ones(rel):
    from celery_fairqueue.contrib.django.console import history as console

    now = timezone.now().replace(second=30, microsecond=0)
    for n, (minutes_ago, status) in enumerate([(0, "succeeded"), (0, "succeeded"), (5, "dead"),
                                               (5, "succeeded"), (59, "succeeded"),
                                               (61, "succeeded")]):
        Job.objects.create(job_key=f"k{n}", task_id=f"t{n}", delivery_id=f"t{n}:0", task=SEND,
                           queue="celery", account="acme", status=status,
                           finished_at=now - timedelta(minutes=minutes_ago))
    console._MINUTES.clear()
    for _ in range(2):  # counted, then partly from the kept minutes
        series = console.throughput(now)
        assert len(series) == 60
        assert series[-1][1:] == (2, 0) and series[-6][1:] == (1, 1)
        assert series[0][1:] == (1, 0)
        assert sum(ok for _, ok, _ in series) == 4
    overview = reverse("admin:celery_fairqueue_account_changelist")
    svg = logged_in(staff(*VIEWER)).get(overview).content.decode()
    assert "<svg" in svg and "4 succeeded, 1 dead-lettered" in svg


def test_the_account_page_shows_its_weight_and_share_beside_its_entitled_share(rel):
    """acme (weight 4), beta (weight 2, mirrored in the admin) and gamma (default 1) completed
    jobs in the last hour: acme is entitled to 4/7 and got 40 of 100."""
    from celery_fairqueue import set_account_limit
    from celery_fairqueue.contrib.django.models import AccountLimit

    set_account_limit(rel.app, "acme", weight=4)
    set_account_limit(rel.app, "beta", weight=2)
    AccountLimit.mirror_store()
    now = timezone.now()
    for account, count in (("acme", 40), ("beta", 30), ("gamma", 30)):
        for n in range(count):
            Job.objects.create(job_key=f"{account}{n}", task_id=f"{account}{n}", task=SEND,
                               queue="celery", account=account, status="succeeded",
                               finished_at=now - timedelta(minutes=5))
    Job.objects.create(job_key="old", task_id="old", task=SEND, queue="celery", account="beta",
                       status="succeeded", finished_at=now - timedelta(hours=2))
    client = logged_in(staff(*VIEWER, "edit_account_limit"))
    response = client.get(account_url("acme"))
    share = response.context["share"]
    assert response.context["weight"] == 4
    assert share["share"] == pytest.approx(0.4) and share["entitled"] == pytest.approx(4 / 7)
    text = response.content.decode()
    assert "Weight 4: entitled to 0.571" in text and "got 0.400 (40 of 100 jobs)" in text
    assert 'name="weight" value="4"' in text
    response = client.post(action_url(), {"action": "limit", "account": "acme", "weight": "0"})
    assert get_account_limit(rel.app, "acme").weight == 4  # refused: weight 0
    client.post(action_url(), {"action": "limit", "account": "acme", "weight": "2"})
    assert get_account_limit(rel.app, "acme").weight == 2
