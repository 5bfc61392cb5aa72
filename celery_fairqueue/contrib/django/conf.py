"""Settings of the Django app, read lazily (never written into django.conf.settings)."""

from __future__ import annotations

from celery import Celery, current_app
from django.conf import settings
from django.utils.module_loading import import_string


def celery_app() -> Celery:
    """The Celery app: ``CELERY_FAIRQUEUE_APP`` ("proj.celery.app"), else Celery's current app."""
    path = getattr(settings, "CELERY_FAIRQUEUE_APP", None)
    if path:
        return import_string(path)
    return current_app._get_current_object()
