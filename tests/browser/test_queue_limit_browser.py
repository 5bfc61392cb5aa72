"""A queue's shared limit edited in the admin, in Debian's Chromium (issue 45): the form refuses
a rate Celery cannot read, saves a good one to the fair store, and lists limits set from code."""

import pytest
from django.urls import reverse

import celery_fairqueue
from celery_fairqueue import AccountLimit
from tests.browser.conftest import ARTIFACTS, browser_page, log_in, staff_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_sets_a_queues_shared_limit_in_the_admin_form(rel, chromium, live_server):
    staff_user("view_queuelimit", "add_queuelimit", "change_queuelimit")
    celery_fairqueue.set_queue_limit(rel.app, "email", rate="500/m")
    add = live_server.url + reverse("admin:celery_fairqueue_queuelimit_add")
    listing = live_server.url + reverse("admin:celery_fairqueue_queuelimit_changelist")
    with browser_page(chromium) as page:
        log_in(page, live_server, "support")
        page.goto(add)
        page.fill("#id_queue", "linkedin")
        page.fill("#id_rate", "lots")
        page.click("input[name=_save]")
        assert "is not in Celery's format" in page.locator(".errorlist").inner_text()
        page.fill("#id_rate", "1000/m")
        page.fill("#id_burst", "50")
        page.fill("#id_concurrency", "50")
        page.click("input[name=_save]")
        page.wait_for_url(listing)
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 2, rows.all_inner_texts()
        assert "500/m" in rows.nth(0).inner_text() and "1000/m" in rows.nth(1).inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "admin-queue-limits.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
    assert celery_fairqueue.get_queue_limit(rel.app, "linkedin") == AccountLimit(
        rate="1000/m", burst=50, concurrency=50)
