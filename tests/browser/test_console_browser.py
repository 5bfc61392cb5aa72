"""The support console in a real browser: "why hasn't account X sent anything?" answered by the
account page, one scenario each, against real workers, a real Redis and the recorded jobs.

Each scenario saves a screenshot under artifacts/screenshots/ (gitignored) and prints its path.
"""

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from playwright.sync_api import Page

from celery_fairqueue import set_account_limit
from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.store import StoreInspector
from tests.browser.conftest import (
    APP,
    ARTIFACTS,
    browser_page,
    log_in,
    replay_and_wait_for_success,
    staff_user,
)
from tests.harness import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PERMISSIONS = ["view_job", "view_deadjob", "view_account", "view_accountlimit", "pause_account",
               "resume_account", "replay_job", "cancel_job", "run_job_now",
               "edit_account_limit"]


@pytest.fixture
def support() -> str:
    return staff_user(*PERMISSIONS).username


@pytest.fixture
def console(chromium, live_server, support) -> Callable[[str], Any]:
    """``with console(account) as page``: logged in, on the account's page, 1366 px wide.
    Query the database before or after: not while the browser's event loop runs."""

    @contextlib.contextmanager
    def open_account(account: str) -> Iterator[Page]:
        with browser_page(chromium) as page:
            page.set_viewport_size({"width": 1366, "height": 900})
            log_in(page, live_server, support)
            page.goto(live_server.url + str(account_url(account)))
            yield page

    return open_account


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def done(ledger) -> int:
    return sum(ledger.counts().values())


def state_of(rel, account: str) -> str:
    return StoreInspector(rel.app).console.account_state(account, ["celery"])[0].reason


def row_text(page: Page, queue: str = "celery") -> str:
    """The queue row as read, after its reason's name (the badge shows its words)."""
    row = page.locator(f"tr.fq-queue-row[data-queue='{queue}']")
    return f"{row.get_attribute('data-reason')} {row.inner_text()}"


def reload_until(page: Page, text: str, timeout: float = 15) -> str:
    """Reload the page until its queue row says ``text``; returns the row."""

    def says() -> bool:
        page.reload()
        return text in row_text(page)

    assert wait_until(says, timeout=timeout, interval=0.5), row_text(page)
    return row_text(page)


def test_window_closed_says_when_it_reopens(rel, console, celery_worker_factory):
    berlin = ZoneInfo("Europe/Berlin")
    opens = (datetime.now(berlin) + timedelta(hours=2)).replace(minute=0, second=0,
                                                                microsecond=0)
    window = f"{opens:%H:%M}-{opens + timedelta(hours=1):%H:%M}"
    set_account_limit(rel.app, "night owl", window=window, tz="Europe/Berlin")
    celery_worker_factory(APP)
    rel.send_message.delay("night owl", 1)
    assert wait_until(lambda: state_of(rel, "night owl") == "window_closed", timeout=10)

    with console("night owl") as page:
        row = row_text(page)
        assert "window_closed" in row
        assert f"window closed until {opens:%H:%M} Europe/Berlin" in row
        assert f"{window} Europe/Berlin (own)" in row  # the limit in force, own
        assert "until " in page.locator(".fq-until").inner_text()  # the reopening time, exact
        screenshot(page, "window-closed")


def test_rate_limited_says_when_the_next_token_comes(rel, console, celery_worker_factory,
                                                     ledger):
    set_account_limit(rel.app, "chatty", rate="2/m", burst=1)
    celery_worker_factory(APP)
    for lead in range(3):
        rel.send_message.delay("chatty", lead)
    assert wait_until(lambda: done(ledger) >= 1 and state_of(rel, "chatty") == "rate_limited",
                      timeout=15)

    with console("chatty") as page:
        row = row_text(page)
        assert "rate_limited" in row and "rate limit: next token in" in row
        assert "2/m burst 1 (own)" in row
        screenshot(page, "rate-limited")


def test_concurrency_cap_says_how_many_run(rel, console, celery_worker_factory):
    set_account_limit(rel.app, "one-at-a-time", concurrency=1)
    celery_worker_factory(APP, concurrency=3)
    for lead in range(3):
        rel.send_then_linger.delay("one-at-a-time", lead, 20)
    assert wait_until(lambda: state_of(rel, "one-at-a-time") == "concurrency_cap", timeout=15)

    with console("one-at-a-time") as page:
        row = row_text(page)
        assert "concurrency_cap" in row and "concurrency cap: 1 of 1 running" in row
        assert page.locator("#fq-live-jobs").inner_text().count("running") >= 1
        screenshot(page, "concurrency-cap")


def test_operator_pauses_and_resumes_from_the_page(rel, console, celery_worker_factory,
                                                   ledger, support):
    celery_worker_factory(APP)
    rel.send_message.delay("warm-up", 0)  # the queue exists and its worker is live
    assert wait_until(lambda: done(ledger) == 1, timeout=15)

    with console("held back") as page:
        page.fill("#fq-pause-reason", "customer asked to hold sends")
        page.click("#fq-pause-all")
        assert "Paused account 'held back'" in page.locator("ul.messagelist").inner_text()
        rel.send_message.delay("held back", 1)
        row = reload_until(page, "1 ready")
        assert "paused" in row and f"paused by {support}" in row
        assert "customer asked to hold sends" in row
        assert done(ledger) == 1  # its job waits: nothing ran
        screenshot(page, "paused")

        page.click("#fq-resume-all")
        assert "Resumed account 'held back'" in page.locator("ul.messagelist").inner_text()
        assert wait_until(lambda: done(ledger) == 2, timeout=15)
        row = reload_until(page, "no ready jobs")
        assert "paused by" not in row
        screenshot(page, "resumed")


def test_no_worker_on_the_queue_is_named_and_warned(rel, recorder, console, live_server):
    rel.send_message.delay("lonely", 1)
    assert wait_until(lambda: Job.objects.filter(account="lonely").exists(), timeout=10)
    with console("lonely") as page:
        row = row_text(page)
        assert "no_worker" in row and "no worker consumes this queue" in row
        screenshot(page, "no-worker")
        page.goto(live_server.url + reverse("admin:celery_fairqueue_account_changelist"))
        warning = page.locator(".fq-unserved").inner_text()
        assert "Queue “celery” has ready jobs but no live worker consumes it." in warning
        assert page.locator("#result_list [data-reason='no_worker']").inner_text() == \
            "No worker"
        screenshot(page, "overview-no-worker")
        # it refreshes itself in place: no reload (the marker stays), new accounts appear
        page.evaluate("window.fqMarker = 1")
        rel.send_message.delay("latecomer", 2)
        page.wait_for_selector("#result_list >> text=latecomer", timeout=15_000)
        assert page.evaluate("window.fqMarker") == 1


def test_everything_dead_lettered_shows_why_and_replays_from_the_detail_page(
        rel, recorder, console, celery_worker_factory, redis_client, ledger, live_server):
    redis_client.set("fail:1", "permanent")
    redis_client.set("fail:2", "retry:9")  # more failures than the policy's 4 attempts
    celery_worker_factory(APP)
    rel.send_message.delay("doomed", 1)
    rel.send_message.delay("doomed", 2)
    assert wait_until(lambda: Job.objects.filter(account="doomed", status="dead").count() == 2,
                      timeout=30)
    permanent = Job.objects.get(account="doomed", args__lead_id=1)
    exhausted = Job.objects.get(account="doomed", args__lead_id=2)
    redis_client.delete("fail:1")  # the lead is back: a replay can succeed

    with console("doomed") as page:
        row = row_text(page)
        # nothing ready, and every recent job dead-lettered: failing, not "no ready jobs"
        assert "failing" in row and "failing: 2 dead letters in the last hour" in row
        assert page.locator("#fq-recent .fq-dead").count() == 2
        cells = page.locator("tr.fq-queue-row td").all_inner_texts()
        assert cells[7] == "2"  # dead letters in the last hour
        screenshot(page, "all-dead")

        page.goto(live_server.url + reverse("admin:celery_fairqueue_deadjob_changelist"))
        listing = page.locator("#result_list").inner_text()
        assert "permanent" in listing and "gave up after 4 attempts" in listing
        clipped = page.evaluate("""() => { const t = document.querySelector('#result_list');
            return t.scrollWidth > t.parentElement.clientWidth; }""")
        assert not clipped  # no column clipped at 1366 px
        screenshot(page, "dead-letters")
        page.goto(live_server.url + reverse("admin:celery_fairqueue_job_changelist"))
        assert not page.evaluate("""() => { const t = document.querySelector('#result_list');
            return t.scrollWidth > t.parentElement.clientWidth; }""")
        screenshot(page, "jobs")

        page.goto(live_server.url + reverse("admin:celery_fairqueue_deadjob_change",
                                            args=[exhausted.pk]))
        assert "gave up after 4 attempts" in page.locator(".field-reason_text").inner_text()
        assert "TimeoutError" in page.locator(".fq-traceback").inner_text()
        assert page.locator(".fq-attempts tr.fq-attempt").count() == 4

        page.goto(live_server.url + reverse("admin:celery_fairqueue_deadjob_change",
                                            args=[permanent.pk]))
        reason = page.locator(".field-reason_text").inner_text()
        assert "lead 1 was deleted" in reason and "permanent" in reason
        assert "Traceback (most recent call last)" in page.locator(".fq-traceback").inner_text()
        screenshot(page, "dead-letter-detail")
        replay_and_wait_for_success(page, interval=0.5)
        runs = page.locator("h3.fq-run").all_inner_texts()
        assert runs[0].startswith("First run") and runs[1].startswith("Replay 1")
        screenshot(page, "replayed")
        assert ledger.counts() == {"doomed:1": 1}
