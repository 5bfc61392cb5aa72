"""Moved to the recording room: :mod:`celery_fairqueue.contrib.django.recording.recorder`.

This path is deprecated and warns."""

import warnings

from .recording.recorder import NO_OUTCOME, Recorder, default_consumer_name

__all__ = ["NO_OUTCOME", "Recorder", "default_consumer_name"]

warnings.warn("celery_fairqueue.contrib.django.recorder is deprecated; import from "
              "celery_fairqueue.contrib.django.recording.recorder",
              DeprecationWarning, stacklevel=2)
