"""Moved to the recording room: :mod:`celery_fairqueue.contrib.django.recording.pruner`.

This path is deprecated and warns."""

import warnings

from .recording.pruner import Pruner

__all__ = ["Pruner"]

warnings.warn("celery_fairqueue.contrib.django.pruner is deprecated; import from "
              "celery_fairqueue.contrib.django.recording.pruner",
              DeprecationWarning, stacklevel=2)
