from django.contrib import admin

from automations.models import OutboundMessage


@admin.register(OutboundMessage)
class OutboundMessageAdmin(admin.ModelAdmin):
    list_display = ["account_id", "lead_id", "step", "campaign_rev", "deliveries", "sent_at"]
    list_filter = ["account_id", "step"]
