"""System checks with stable ids."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register

from ...errors import FairqueueError


@register()
def check_celery_app(app_configs: Any, **kwargs: Any) -> list[Error]:
    from ...settings import settings_for
    from .conf import celery_app

    try:
        app = celery_app()
        settings_for(app)
    except (ImportError, FairqueueError) as exc:
        return [Error(f"celery-fairqueue cannot use the Celery app: {exc}",
                      hint="Set CELERY_FAIRQUEUE_APP = 'proj.celery.app' and its "
                           "CELERY_FAIRQUEUE_* settings.",
                      id="celery_fairqueue.E001")]
    return []
