"""The app's Celery tasks: ``prune_records``, for a beat schedule to run."""

from __future__ import annotations

from celery import shared_task

from .conf import celery_app
from .recording.pruner import Pruner


@shared_task(name="celery_fairqueue.prune_records", ignore_result=True)
def prune_records() -> int:
    """Delete the recorded jobs past ``fairqueue_record_retention``; returns how many."""
    return Pruner(celery_app()).prune()
