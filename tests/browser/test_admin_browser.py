"""The admin in a real browser: Debian's Chromium, driven by Playwright, against a live server.

A staff user replays a dead letter from the admin and watches the job succeed: a real worker
runs it, and the recorder (in a thread, as a deployment runs it) brings the row to succeeded.
"""

import contextlib
import importlib
import threading
from collections.abc import Iterator
from pathlib import Path

import django.contrib.admin
import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.urls import reverse
from playwright.sync_api import Page, sync_playwright
from pytest_django.live_server_helper import LiveServer

from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.contrib.django.recorder import Recorder
from tests.harness import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-gpu"]
APP = "tests.apps.reliable"
SCREENSHOT = Path("/tmp/fairqueue-admin-dead-letters.png")
PASSWORD = "correct horse battery"


@pytest.fixture
def rel(redis_server, redis_client, settings):
    settings.CELERY_FAIRQUEUE_APP = f"{APP}.app"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast login
    return importlib.import_module(APP)


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server, also serving the admin's CSS and JS. The test settings have
    no staticfiles app and no STATIC_URL, without which the live server fails every request."""
    admin_static = Path(django.contrib.admin.__file__).resolve().parent / "static"
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(admin_static)):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def recorder(rel) -> Iterator[Recorder]:
    """A recorder in a thread; its stream exists before any worker starts, so none of the
    workers' events is dropped as "nobody records"."""
    recorder = Recorder(rel.app, "browser-test", block_ms=100, max_backoff=0.5)
    recorder.reader.ensure_group()
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    yield recorder
    stop.set()
    thread.join(15)


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: apt-get install -y chromium")
    return CHROMIUM


@contextlib.contextmanager
def browser_page(chromium: Path) -> Iterator[Page]:
    """A page in headless Chromium. While it is open, this thread runs Playwright's event loop,
    and Django's ORM refuses to run in a thread with one: query the database before or after."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 800})
        finally:
            browser.close()


def test_staff_replays_a_dead_letter_and_sees_the_job_succeed(
        rel, recorder, chromium, celery_worker_factory, redis_client, ledger, live_server):
    user = User.objects.create_user("support", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue",
        codename__in=["view_job", "view_deadjob", "replay_job"]))
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

        page.fill("input[name=account]", "acme")
        page.press("input[name=account]", "Enter")
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
