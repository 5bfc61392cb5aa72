"""The jobs list and the overview read at a laptop's width: in Chromium at 1,280 and 1,400 px,
the list does not overflow sideways, a job takes at most two lines, its arguments are one
clipped line (all of them on hover) and its error's first line shows; an account id on the
overview wraps between words, never inside one."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.search import arguments_text
from tests.browser.conftest import ARTIFACTS, browser_page, log_in, staff_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 1400)
ERROR = ("TimeoutError: upstream CRM did not answer within 30 s\n"
         "Traceback (most recent call last):\n  File \"proj/tasks.py\", line 12, in sync")
ACCOUNTS = ("night-shift", "crm-sync", "acme-industries-europe", "globex")


def demo_jobs() -> None:
    """Jobs as the demo records them: keyed tasks with a few arguments, some failing."""
    now = timezone.now()
    for n in range(24):
        account = ACCOUNTS[n % len(ACCOUNTS)]
        args = {"account_id": account, "lead_id": n, "step": "intro-email",
                "campaign_rev": 3, "template": "follow-up-2"}
        status = ("ready", "running", "succeeded", "failed", "deferred", "dead")[n % 6]
        Job.objects.create(
            job_key=f"key-{n}", task_id=f"task-{n}", delivery_id=f"task-{n}:{n % 3}",
            task="proj.tasks.send_campaign_step", queue="celery", account=account,
            status=status, attempts=n % 3, args=args, args_text=arguments_text(args),
            enqueued_at=now - timedelta(minutes=n),
            next_run_at=now + timedelta(minutes=5) if status == "deferred" else None,
            last_error=ERROR if status in ("failed", "dead", "deferred") else "",
            waiting_since=now - timedelta(minutes=n) if status in ("ready", "deferred")
            else None)


def geometry(page) -> dict:
    return page.evaluate("""() => {
        const table = document.querySelector('#result_list');
        const box = table.closest('.results') || table.parentElement;
        const rows = [...table.querySelectorAll('tbody tr')];
        const line = parseFloat(getComputedStyle(table.querySelector('tbody td')).lineHeight)
                     || 16;
        const tallest = Math.max(...rows.map(r => Math.max(
            ...[...r.cells].map(c => c.scrollHeight - parseFloat(getComputedStyle(c).paddingTop)
                                     - parseFloat(getComputedStyle(c).paddingBottom)))));
        return {columns: [...table.querySelectorAll('thead th')].map(
                    th => th.innerText.trim() + ' ' + Math.round(th.getBoundingClientRect().width)),
                page: document.documentElement.scrollWidth, viewport: innerWidth,
                table: table.scrollWidth, box: box.clientWidth, tallest, line,
                args: table.querySelector('td.field-arguments_short').innerText,
                title: table.querySelector('td.field-arguments_short [title]')
                           .getAttribute('title'),
                error: [...table.querySelectorAll('td.field-error_short .fq-error')]
                           .map(e => [e.innerText, e.clientWidth])[0],
                argsShown: table.querySelector('td.field-arguments_short .fq-args')
                               .clientWidth};
    }""")


def test_the_jobs_list_fits_a_laptop_and_a_job_takes_at_most_two_lines(
        rel, chromium, live_server):
    staff_user("view_job")
    demo_jobs()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser_page(chromium) as page:
        log_in(page, live_server, "support")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(live_server.url + reverse("admin:celery_fairqueue_job_changelist"))
            page.screenshot(path=str(ARTIFACTS / f"jobs-list-{width}.png"), full_page=True)
            found = geometry(page)
            assert found["page"] <= found["viewport"], found
            assert found["table"] <= found["box"], found
            assert found["tallest"] <= 2 * found["line"] + 4, found
            assert "\n" not in found["args"].strip() and "lead_id=" in found["title"], found
            assert found["argsShown"] >= 100, found  # "account_id=night-s…" at least
            error, shown = found["error"]
            assert error == ERROR.split("\n")[0] and shown >= 150, found  # its first line


#: Where an account id's link breaks a line: the characters before each break, read from
#: where each character lands.
BREAKS = """() => [...document.querySelectorAll('a.fq-account')].map(a => {
    const text = a.firstChild, range = document.createRange(), breaks = [];
    let top = null;
    for (let i = 0; i < text.length; i++) {
        range.setStart(text, i); range.setEnd(text, i + 1);
        const y = range.getBoundingClientRect().top;
        if (top !== null && y > top + 2) breaks.push(text.data.slice(0, i));
        top = y;
    }
    return [text.data, breaks];
})"""


def test_the_overview_wraps_no_account_id_inside_a_word(rel, chromium, live_server):
    staff_user("view_job", "view_account")
    demo_jobs()
    with browser_page(chromium) as page:
        log_in(page, live_server, "support")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(live_server.url + reverse("admin:celery_fairqueue_account_changelist"))
            found = page.evaluate(BREAKS)
            assert {account for account, _ in found} == set(ACCOUNTS)
            inside = [(account, before) for account, breaks in found for before in breaks
                      if not before.endswith(("-", " "))]
            assert inside == [], found
