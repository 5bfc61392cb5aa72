"""The admin in a real browser: Debian's Chromium, driven by Playwright, against a live server.

A staff user replays a dead letter from the admin and watches the job succeed: a real worker
runs it, and the recorder (in a thread, as a deployment runs it) brings the row to succeeded.
"""

from pathlib import Path

import pytest
from django.urls import reverse

from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Job
from tests.browser.conftest import APP, PASSWORD, browser_page, staff_user
from tests.harness import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = Path("/tmp/fairqueue-admin-dead-letters.png")


def test_staff_replays_a_dead_letter_and_sees_the_job_succeed(
        rel, recorder, chromium, celery_worker_factory, redis_client, ledger, live_server):
    staff_user("view_job", "view_deadjob", "replay_job")
    celery_worker_factory(APP)
    for account, lead in (("acme", 21), ("beta", 22)):
        redis_client.set(f"fail:{lead}", "permanent")
        rel.send_message.delay(account, lead)
    assert wait_until(lambda: Job.objects.filter(status="dead").count() == 2, timeout=20)
    job = Job.objects.get(account="acme")
    redis_client.delete("fail:21")  # the lead is back: the job can succeed now

    job_url = live_server.url + reverse("admin:celery_fairqueue_job_change", args=[job.pk])

    with browser_page(chromium) as page:
        page.goto(f"{live_server.url}{reverse('admin:login')}")
        page.fill("#id_username", "support")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{live_server.url}{reverse('admin:index')}")
        page.goto(f"{live_server.url}{reverse('admin:celery_fairqueue_deadjob_changelist')}")
        assert page.locator("#result_list tbody tr").count() == 2

        # the account filter's box (a business-key form above the list may ask for one too)
        page.fill(".fq-input-filter input[name=account]", "acme")
        page.press(".fq-input-filter input[name=account]", "Enter")
        page.wait_for_url("**account=acme**")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 1 and "acme" in rows.inner_text()
        page.check("#result_list tbody input.action-select")
        page.select_option("select[name=action]", "replay")
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        page.click("button[name=index]")
        assert "Replayed 1 of 1 dead letters." in page.locator("ul.messagelist").inner_text()
        assert page.locator("#result_list tbody tr").count() == 0
        status = page.locator(".field-status_badge .readonly")

        def succeeded() -> bool:
            page.goto(job_url)
            return status.inner_text().strip() == "succeeded"

        assert wait_until(succeeded, timeout=20, interval=0.3), status.inner_text()
        page.screenshot(path=str(SCREENSHOT.with_name("fairqueue-admin-job.png")),
                        full_page=True)
    assert ledger.counts() == {"acme:21": 1}
    assert [d.account for d in DeadLetters(rel.app).list()] == ["beta"]
