from django.db import models


class OutboundMessage(models.Model):
    """One simulated outbound message (the email or SMS a real automation step would send).

    The business key (account, lead, step, campaign revision) is unique, so a step delivered twice
    still sends one message; ``deliveries`` counts how often a task arrived for it.
    """

    account_id = models.CharField(max_length=64)
    lead_id = models.IntegerField()
    step = models.CharField(max_length=64)
    campaign_rev = models.IntegerField()
    task_id = models.CharField(max_length=255)
    deliveries = models.PositiveIntegerField(default=1)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account_id", "lead_id", "step", "campaign_rev"],
                name="automations_message_business_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.account_id}/{self.lead_id}/{self.step}@{self.campaign_rev}"
