"""A dead letter named by its task id, as support has it from a log line or a customer, found
and replayed from the admin in real Chromium; a real worker runs the replay."""

import pytest
from django.urls import reverse

from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Job
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


def test_support_replays_a_dead_letter_from_the_admin_by_its_task_id(
        rel, recorder, chromium, celery_worker_factory, redis_client, ledger, live_server):
    staff_user("view_job", "view_deadjob", "replay_job")
    celery_worker_factory(APP)
    redis_client.set("fail:31", "permanent")
    task_id = rel.send_message.delay("acme", 31).id
    assert wait_until(lambda: Job.objects.filter(status="dead").count() == 1, timeout=20)
    [letter_id] = DeadLetters(rel.app).ids()
    assert letter_id != task_id  # the letter is kept as <task id>:<retries>
    redis_client.delete("fail:31")  # the lead is back: the job can succeed now
    by_task_id = live_server.url + reverse("admin:celery_fairqueue_deadjob_letter",
                                           args=[task_id])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    with browser_page(chromium) as page:
        log_in(page, live_server, "support")
        page.goto(by_task_id)
        assert "/deadjob/" in page.url and "permanent" in page.inner_text("#content")
        page.screenshot(path=str(ARTIFACTS / "dead-letter-by-task-id.png"), full_page=True)
        replay_and_wait_for_success(page)
        page.screenshot(path=str(ARTIFACTS / "dead-letter-by-task-id-replayed.png"),
                        full_page=True)
    assert ledger.counts() == {"acme:31": 1}
    assert DeadLetters(rel.app).count() == 0
