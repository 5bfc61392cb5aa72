"""Enqueue automation steps for three accounts of different sizes and wait for the results."""

import time

from django.core.management.base import BaseCommand
from django.db.models import Count, Max

from automations.models import OutboundMessage
from automations.tasks import send_step

#: Leads per account: one big tenant and two small ones.
WORKLOAD = {"acme": 6, "globex": 3, "initech": 1}
STEP = "intro"


class Command(BaseCommand):
    help = "Enqueue send_step for three accounts, wait for every result and print what happened."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds per result")

    def handle(self, *args, timeout: float, **options):
        latest = OutboundMessage.objects.aggregate(rev=Max("campaign_rev"))["rev"] or 0
        rev = latest + 1
        jobs = [
            (account, lead) for account, leads in WORKLOAD.items() for lead in range(1, leads + 1)
        ]
        jobs.append(jobs[0])  # the same business key enqueued twice, on purpose
        self.stdout.write(
            f"campaign revision {rev}: enqueueing step {STEP!r} {len(jobs)} times; leads per "
            f"account: {', '.join(f'{a} {n}' for a, n in WORKLOAD.items())}"
        )
        started = time.monotonic()
        results = [send_step.delay(account, lead, STEP, rev) for account, lead in jobs]
        if results[-1].id == results[0].id:
            self.stdout.write(f"  the duplicate of {jobs[0][0]} lead {jobs[0][1]} was the same job"
                              f" ({results[0].id}): deduplicated at enqueue by its business key")
        for result in results[:-1]:
            done = result.get(timeout=timeout)
            outcome = "sent" if done["sent"] else "already sent, not sent again"
            self.stdout.write(
                f"  {done['account_id']:<8} lead {done['lead_id']}: {outcome} "
                f"(message {done['message_id']}, worker pid {done['worker_pid']})"
            )
        elapsed = time.monotonic() - started
        per_account = (
            OutboundMessage.objects.filter(campaign_rev=rev)
            .values_list("account_id")
            .annotate(n=Count("id"))
            .order_by("account_id")
        )
        summary = ", ".join(f"{account}: {n}" for account, n in per_account)
        self.stdout.write(
            self.style.SUCCESS(
                f"{len(results)} tasks done in {elapsed:.2f}s; messages in the database: {summary}"
            )
        )
