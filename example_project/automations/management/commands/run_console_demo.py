"""Leave the support console with something to explain: a rate-limited account, one outside
its working hours, one paused by an operator, and dead letters of both kinds (permanent, and
retries used up). Waits until the store and the recorded jobs say so, then prints the pages."""

import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.core.management.base import BaseCommand, CommandError

from automations.tasks import send_step, sync_crm
from celery_fairqueue import pause, set_account_limit
from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.reasons import reason_text
from celery_fairqueue.store import StoreInspector
from proj.celery import app

ZONE = "Europe/Berlin"
#: account -> the reason the console should give for it
EXPECTED = {"throttled": "rate_limited", "night-shift": "window_closed", "on-hold": "paused"}


class Command(BaseCommand):
    help = "Set up the console demo's accounts and failures, wait for them, print the pages."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0)
        parser.add_argument("--base-url", default="", help="e.g. http://127.0.0.1:8000")

    def handle(self, *args, timeout: float, base_url: str, **options):
        opens = (datetime.now(ZoneInfo(ZONE)) + timedelta(hours=3)).replace(
            minute=0, second=0, microsecond=0)
        window = f"{opens:%H:%M}-{opens + timedelta(hours=2):%H:%M}"
        set_account_limit(app, "throttled", rate="1/h", burst=1)
        set_account_limit(app, "night-shift", window=window, tz=ZONE)
        pause(app, account="on-hold", by="demo", reason="customer asked to hold all sends")
        for lead in range(1, 5):
            send_step.delay("throttled", lead, "console", 1)
        for lead in range(1, 4):
            send_step.delay("night-shift", lead, "console", 1)
        for lead in range(1, 3):
            send_step.delay("on-hold", lead, "console", 1)
        for lead in (1, 2):
            sync_crm.delay("crm-sync", lead, "deleted")
        for lead in (3, 4):
            sync_crm.delay("crm-sync", lead, "timeout")
        inspector = StoreInspector(app)

        def reasons() -> dict[str, str]:
            return {account: next((s.reason for s in inspector.console.account_state(account)
                                   if s.waiting), "-") for account in EXPECTED}

        deadline = time.monotonic() + timeout
        while True:
            dead = Job.objects.filter(account="crm-sync", status=Job.Status.DEAD).count()
            now = reasons()
            if dead == 4 and now == EXPECTED:
                break
            if time.monotonic() > deadline:
                raise CommandError(f"the console demo did not settle: {dead} of 4 dead letters "
                                   f"recorded, reasons {now}")
            time.sleep(0.3)
        self.stdout.write("the console now shows:")
        for account in EXPECTED:
            [state] = [s for s in inspector.console.account_state(account) if s.waiting]
            self.stdout.write(f"  {account:<12} {reason_text(state)}  {base_url}"
                              f"{account_url(account)}")
        gave_up = Job.objects.filter(account="crm-sync",
                                     dead_reason__startswith="gave up").count()
        self.stdout.write(f"  crm-sync     {4 - gave_up} permanent failures and {gave_up} that "
                          f"gave up after retries in the dead letters  {base_url}"
                          f"{account_url('crm-sync')}")
