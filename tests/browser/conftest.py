"""Fixtures of the browser tests: Debian's Chromium through Playwright, pytest-django's live
server with the admin's static files, a recorder in a thread, a logged-in page."""

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
from playwright.sync_api import Locator, Page, sync_playwright
from pytest_django.live_server_helper import LiveServer

from celery_fairqueue.contrib.django.recording.recorder import Recorder
from tests.harness import wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-gpu"]
APP = "tests.apps.reliable"
PASSWORD = "correct horse battery"
#: Screenshots the tests save as artifacts (gitignored), listed at the end of the run.
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


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


def log_in(page: Page, live_server: LiveServer, username: str) -> None:
    page.goto(f"{live_server.url}{reverse('admin:login')}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}{reverse('admin:index')}")


def staff_user(*codenames: str, username: str = "support") -> User:
    """A staff user with the app's permissions ``codenames``, who logs in with PASSWORD."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="celery_fairqueue", codename__in=codenames))
    return user


def replay_and_wait_for_success(page: Page, interval: float = 0.3) -> Locator:
    """Press a dead letter's Replay button and wait, reloading, until its job succeeded;
    returns the status field."""
    page.click("#fq-replay")
    assert "Replayed 1 of 1 dead letters." in page.locator("ul.messagelist").inner_text()
    status = page.locator(".field-status_badge .readonly")

    def succeeded() -> bool:
        page.reload()
        return status.inner_text().strip() == "succeeded"

    assert wait_until(succeeded, timeout=20, interval=interval), status.inner_text()
    return status
