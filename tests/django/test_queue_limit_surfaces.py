"""Where a queue's limits show and change (issue 45, item 4): `celery fairqueue limits --queue`,
`fairqueue status`, `manage.py fairqueue limits ... --user NAME` with the queue limit's own
permission, and the admin's queue-limit pages."""

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError
from django.urls import reverse

import celery_fairqueue
from celery_fairqueue import AccountLimit
from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import QueueLimit
from celery_fairqueue.store import WorkerRegistration, store_for
from tests.django.test_admin import login  # noqa: F401  (the fixture)
from tests.django.test_cli import celery, manage
from tests.django.test_console import VIEWER, logged_in, staff

pytestmark = pytest.mark.django_db


@pytest.mark.slow
def test_celery_fairqueue_limits_queue_sets_shows_and_clears_a_queues_limits(rel, redis_url):
    shared = celery("limits", "--queue", "linkedin", "--rate", "1000/m", "--burst", "50",
                    "--concurrency", "50", redis_url=redis_url)
    assert shared.returncode == 0, shared.stderr
    assert re.search(r"linkedin\s+shared by its accounts\s+1000/m burst 50, 50 at once",
                     shared.stdout), shared.stdout
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") == AccountLimit(
        rate="1000/m", burst=50, concurrency=50)
    per_account = celery("limits", "--queue", "linkedin", "--account", "acme", "--rate", "100/d",
                         redis_url=redis_url)
    assert "Account 'acme' in queue 'linkedin': 100/d" in per_account.stdout
    default = celery("limits", "--queue", "linkedin", "--default", "--rate", "200/d",
                     redis_url=redis_url)
    assert re.search(r"linkedin\s+default for its accounts\s+200/d", default.stdout)
    listing = celery("limits", redis_url=redis_url).stdout
    for row in (r"linkedin\s+account acme\s+100/d", r"linkedin\s+shared by its accounts"):
        assert re.search(row, listing), listing
    status = celery("status", redis_url=redis_url).stdout
    assert re.search(r"linkedin\s+1000/m burst 50, 50 at once", status), status
    refused = celery("limits", "--queue", "linkedin", "--window", "09:00-17:00",
                     redis_url=redis_url)
    assert refused.returncode != 0 and "--window" in refused.stderr
    bad = celery("limits", "--queue", "linkedin", "--rate", "often", redis_url=redis_url)
    assert bad.returncode != 0 and "queue 'linkedin'" in bad.stderr and "rate" in bad.stderr
    cleared = celery("limits", "--queue", "linkedin", "--clear", redis_url=redis_url)
    assert cleared.returncode == 0, cleared.stderr
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") is None
    assert celery("limits", "--queue", "linkedin", "--default", "--clear",
                  redis_url=redis_url).returncode == 0
    assert celery_fairqueue.get_default_limit(rel.app, queue="linkedin") is None


def test_manage_limits_queue_needs_the_queue_limits_own_permission(rel):
    editor = User.objects.create_user("ann")
    editor.user_permissions.set(Permission.objects.filter(codename="edit_account_limit"))
    with pytest.raises(CommandError, match="lacks the permission"):
        manage("limits", "--queue", "linkedin", "--rate", "5/s", "--user", "ann")
    assert "Account 'acme' in queue 'linkedin': 5/s" in manage(
        "limits", "--queue", "linkedin", "--account", "acme", "--rate", "5/s", "--user", "ann")
    boss = User.objects.create_user("bob")
    boss.user_permissions.set(Permission.objects.filter(codename="change_queuelimit"))
    assert "shared by its accounts" in manage("limits", "--queue", "linkedin", "--rate", "5/s",
                                              "--user", "bob")
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") == AccountLimit(rate="5/s")
    with pytest.raises(CommandError, match=r"queue 'linkedin'.*burst"):
        manage("limits", "--queue", "linkedin", "--burst", "-1", "--user", "bob")
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") == AccountLimit(rate="5/s")


QUEUE_LIMIT_EDITOR = ("view_queuelimit", "add_queuelimit", "change_queuelimit",
                      "delete_queuelimit")


def test_the_admins_queue_limit_pages_need_their_own_permission_and_push_to_redis(
        client, login, rel, django_capture_on_commit_callbacks):  # noqa: F811
    login("view_accountlimit", "add_accountlimit", "change_accountlimit")
    assert client.get(reverse("admin:celery_fairqueue_queuelimit_add")).status_code == 403
    login(*QUEUE_LIMIT_EDITOR)
    page = client.post(reverse("admin:celery_fairqueue_queuelimit_add"),
                       {"queue": "linkedin", "rate": "fast"})
    assert page.status_code == 200 and "is not in Celery&#x27;s format" in page.content.decode()
    assert not QueueLimit.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:celery_fairqueue_queuelimit_add"),
                               {"queue": "linkedin", "rate": "1000/m", "concurrency": "50"})
    assert response.status_code == 302
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") == AccountLimit(
        rate="1000/m", concurrency=50)
    celery_fairqueue.set_queue_limit(rel.app, "email", rate="500/m")  # set from code: mirrored
    listing = client.get(reverse("admin:celery_fairqueue_queuelimit_changelist"))
    assert b"email" in listing.content and b"500/m" in listing.content
    row = QueueLimit.objects.get(queue="linkedin")
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("admin:celery_fairqueue_queuelimit_delete", args=[row.pk]),
                    {"post": "yes"})
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") is None


def test_the_account_page_says_it_waits_for_its_queues_shared_limit_and_the_next_token(rel):
    store = store_for(rel.app)
    store.register_worker("w1", WorkerRegistration("celery@test", ("celery",), 4))
    celery_fairqueue.set_queue_limit(rel.app, "celery", rate="60/h", burst=1)
    rel.send_message.delay("acme", 1)
    rel.send_message.delay("beta", 2)
    [lease] = store.claim(["celery"], 5, "w", AccountLimit().pack(0)).leases
    waiting = "beta" if lease.account == "acme" else "acme"
    page = logged_in(staff(*VIEWER)).get(account_url(waiting)).content.decode()
    assert "Waiting: its queue is at its shared limit" in page and "fq-queue_quota" in page
    assert "queue celery is at its shared limit of 60/h; next token" in page
