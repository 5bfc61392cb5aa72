"""The example project: a Django site whose automation steps run as Celery tasks."""

from proj.celery import app as celery_app

__all__ = ["celery_app"]
