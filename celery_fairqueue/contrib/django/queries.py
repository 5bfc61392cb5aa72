"""Moved to the console room: :mod:`celery_fairqueue.contrib.django.console.queries`.

This path is deprecated and warns."""

import warnings

from .console.queries import jobs_for, oldest_ready_age, oldest_ready_age_by_queue

__all__ = ["jobs_for", "oldest_ready_age", "oldest_ready_age_by_queue"]

warnings.warn("celery_fairqueue.contrib.django.queries is deprecated; import from "
              "celery_fairqueue.contrib.django.console.queries",
              DeprecationWarning, stacklevel=2)
