from django.apps import AppConfig


class AutomationsConfig(AppConfig):
    name = "automations"
    verbose_name = "Automations"
