"""Automation steps: each sends one outbound message to one lead of one account."""

import os
import time

from django.db.models import F

from automations.models import OutboundMessage
from celery_fairqueue import FairTask, PermanentError, RetryPolicy
from proj.celery import app

#: How long the simulated call to the messaging provider takes.
SEND_SECONDS = 0.05


# The one line that makes this a fair-queued job: base, account and business key.
@app.task(base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id", "step", "campaign_rev"))
def send_step(self, account_id: str, lead_id: int, step: str, campaign_rev: int) -> dict:
    """Send the step's message to the lead, at most once per business key.

    The provider is asked with the job key as its idempotency key (here: the unique row), so
    even a rerun after a crash sends nothing twice.
    """
    return _send(self.request.id, account_id, lead_id, step, campaign_rev)


@app.task(bind=True)
def send_step_plain(self, account_id: str, lead_id: int, step: str, campaign_rev: int) -> dict:
    """The same step as a plain Celery task, for the demo's fair-versus-plain comparison."""
    return _send(self.request.id, account_id, lead_id, step, campaign_rev)


def _send(task_id: str, account_id: str, lead_id: int, step: str, campaign_rev: int) -> dict:
    message, created = OutboundMessage.objects.get_or_create(
        account_id=account_id,
        lead_id=lead_id,
        step=step,
        campaign_rev=campaign_rev,
        defaults={"task_id": task_id},
    )
    if created:
        # The provider call, made only by the delivery that claimed the business key.
        time.sleep(SEND_SECONDS)
    else:
        OutboundMessage.objects.filter(pk=message.pk).update(deliveries=F("deliveries") + 1)
    return {
        "message_id": message.pk,
        "account_id": account_id,
        "lead_id": lead_id,
        "step": step,
        "sent": created,
        "worker_pid": os.getpid(),
        "finished_at": time.time(),
    }


@app.task(base=FairTask, bind=True, account_arg="account_id", job_key=("account_id", "lead_id"),
          retry_policy=RetryPolicy(base=0.2, cap=0.5, max_attempts=3))
def sync_crm(self, account_id: str, lead_id: int, outcome: str = "ok") -> str:
    """Push a lead to the customer's CRM: the console demo's failures. ``outcome`` "deleted"
    fails for good (the lead is gone), "timeout" fails every attempt until the policy gives up."""
    if outcome == "deleted":
        raise PermanentError(f"lead {lead_id} was deleted in the CRM")
    if outcome == "timeout":
        raise TimeoutError(f"CRM did not answer for lead {lead_id}")
    return f"synced {account_id}:{lead_id}"
