from django.apps import AppConfig


class FairqueueConfig(AppConfig):
    name = "celery_fairqueue.contrib.django"
    label = "celery_fairqueue"
    verbose_name = "Fair queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
