"""The console's last mile in Chromium (issue 26, item 6), with screenshots: the help text
keeps ``task:<id>``, runs are labelled for what they are, the attempts table shows its TOOK
column at 1366 px, a 1,000-character id takes one line, badges show words, an account whose
jobs all dead-letter is failing in red, and the workers table shows what each worker runs."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page

from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.store import WorkerRegistration, store_for
from tests.browser.conftest import (
    APP,
    ARTIFACTS,
    browser_page,
    log_in,
    staff_user,
)
from tests.harness.store_tools import hold_lease

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 1366
LONG = "x" * 1000


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"polish-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def job(n: int, account: str, status: str, **fields) -> Job:
    now = timezone.now()
    values = {"job_key": f"key-{n}", "task_id": f"t{n}", "delivery_id": f"t{n}:0",
              "task": f"{APP}.send_message", "queue": "celery", "account": account,
              "status": status, "enqueued_at": now - timedelta(minutes=5),
              "finished_at": now, "args": {"account_id": account, "lead_id": n}}
    return Job.objects.create(**{**values, **fields})


@pytest.fixture
def staff() -> str:
    return staff_user("view_job", "view_deadjob", "view_account", "replay_job").username


def test_the_console_pages_read_well_at_1366_px(rel, chromium, live_server, staff):
    store = store_for(rel.app)
    store.register_worker("tok", WorkerRegistration(
        "celery@busy", ("celery",), 4, started=store.server_time() - 3725, succeeded=12,
        failed=3))
    # registered for an hour, not the test app's 3 s: a loaded machine takes longer to the page
    store.client.zadd(store.keys.workers, {"tok": store.server_time() + 3600}, xx=True)
    hold_lease(store, "job-1:0", "tok")
    rel.send_message.apply_async(("doomed", 9), countdown=3600)  # in the store, none ready
    dead = job(1, "doomed", "dead", dead_reason="permanent: lead 1 was deleted",
               worker="celery@" + "w" * 80)
    first = f"{LONG}:0"
    Attempt.objects.create(job=dead, number=1, delivery_id=first, outcome="succeeded",
                           worker=dead.worker, started_at=dead.enqueued_at,
                           finished_at=dead.finished_at)
    Attempt.objects.create(job=dead, number=1, delivery_id="again:0", outcome="dead",
                           worker=dead.worker, error="PermanentError: " + "lead gone " * 40,
                           started_at=dead.enqueued_at, finished_at=dead.finished_at)
    job(2, "doomed", "dead")
    job(3, LONG, "succeeded")

    with browser_page(chromium) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        log_in(page, live_server, staff)

        page.goto(live_server.url + reverse("admin:celery_fairqueue_deadjob_change",
                                            args=[dead.pk]))
        assert "or task:<id>." in page.locator(".field-job_key .help").inner_text()
        runs = [r.split(" (")[0] for r in page.locator("h3.fq-run").all_inner_texts()]
        assert runs == ["First run", "Run 2, enqueued again"]
        took = page.locator("table.fq-attempts th").last
        assert took.inner_text().strip().lower() == "took"
        box = took.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTH  # TOOK shows, not cut
        screenshot(page, "dead-letter-page")
        shown = page.locator("table.fq-attempts tr.fq-attempt td").nth(1).locator(".fq-id")
        assert shown.bounding_box()["height"] < 30  # one line, not forty
        assert shown.get_attribute("title") == first

        page.goto(live_server.url + str(account_url("doomed")))
        badge = page.locator("tr.fq-queue-row .fq-badge")
        assert (badge.inner_text(), badge.get_attribute("data-reason")) == ("Failing", "failing")
        assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(176, 0, 32)"
        assert page.locator(".fq-failing-text").inner_text() == \
            "failing: 2 dead letters in the last hour"
        screenshot(page, "failing-account")

        page.goto(live_server.url + reverse("admin:celery_fairqueue_account_changelist"))
        screenshot(page, "overview-workers")
        link = page.locator("#result_list a.fq-account", has_text="xxx")
        assert link.get_attribute("title") == LONG
        assert link.bounding_box()["height"] < 40
        doomed = page.locator("#result_list tr", has_text="doomed").locator(".fq-badge")
        assert (doomed.inner_text(), doomed.get_attribute("data-reason")) == ("Failing",
                                                                              "failing")
        worker = page.locator("tr.fq-worker td").all_inner_texts()
        assert worker[0] == "celery@busy" and worker[2].startswith("1 of 4")
        assert "job-1:0" in worker[2] and worker[3:6] == ["12", "3", "1h 02m"]
        screenshot(page, "overview-workers")
