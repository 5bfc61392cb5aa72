"""The jobs search in a real browser: a support engineer finds a job by its business key's parts
(the "Find a job by its business key" form) and by an argument (the search box), and never sees
a redacted value. Screenshots go under artifacts/screenshots/ (gitignored)."""

import pytest
from django.urls import reverse

from celery_fairqueue.contrib.django.models import Job
from tests.browser.conftest import ARTIFACTS, browser_page, log_in, staff_user
from tests.harness import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "ann@example.com"


def test_support_finds_a_job_by_its_key_parts_and_by_an_argument(
        rel, recorder, chromium, live_server):
    staff_user("view_job")
    for account, lead, step in (("acme", 1, "intro"), ("acme", 12, "intro email"),
                                ("beta", 1, "intro")):
        rel.send_step.delay(account, lead, step, 3, email=SECRET)  # no worker: they stay ready
    assert wait_until(lambda: Job.objects.filter(task__endswith="send_step").count() == 3,
                      timeout=20)
    key = rel.send_step.business_key("acme", ("acme", 12, "intro email", 3), {})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    jobs_url = live_server.url + reverse("admin:celery_fairqueue_job_changelist")

    with browser_page(chromium) as page:
        log_in(page, live_server, "support")
        page.goto(jobs_url)
        assert SECRET not in page.content()
        page.click("details.fq-key-search summary")
        form = page.locator('form.fq-key-form[data-task="tests.apps.reliable.send_step"]')
        form.locator("input[name=account_id]").fill("acme")
        form.locator("input[name=lead_id]").fill("12")
        form.locator("input[name=step]").fill("intro email")
        form.locator("input[name=campaign_rev]").fill("3")
        page.screenshot(path=str(ARTIFACTS / "search-by-key-form.png"), full_page=True)
        form.locator("input[type=submit]").click()
        page.wait_for_url("**q=**")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 1 and "lead_id=12" in rows.inner_text()
        assert key in page.locator("ul.messagelist").inner_text()
        assert page.input_value("#searchbar") == (
            'tests.apps.reliable.send_step account_id=acme lead_id=12 step="intro email" '
            "campaign_rev=3")
        page.screenshot(path=str(ARTIFACTS / "search-by-key-found.png"), full_page=True)

        page.fill("#searchbar", "lead_id=1")
        page.press("#searchbar", "Enter")
        page.wait_for_url("**q=lead_id**")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 2
        assert sorted(rows.nth(i).locator(".field-account_page").inner_text().strip()
                      for i in range(2)) == ["acme", "beta"]
        assert "email=***" in rows.first.inner_text()
        page.screenshot(path=str(ARTIFACTS / "search-by-argument.png"), full_page=True)

        page.fill("#searchbar", SECRET)
        page.press("#searchbar", "Enter")
        page.wait_for_url("**q=ann**")
        assert page.locator("#result_list tbody tr").count() == 0
        assert SECRET not in page.locator("#changelist").inner_text().replace(
            page.input_value("#searchbar"), "")
