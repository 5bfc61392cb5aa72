"""Deprecated home of the dead-letter queue: use ``celery_fairqueue.DeadLetters`` (or
``celery_fairqueue.store``). Kept so imports written for 0.1 keep working."""

import warnings

from .errors import DeadLetterNotFound
from .store import DeadLetter, DeadLetters

__all__ = ["DeadLetter", "DeadLetterNotFound", "DeadLetters"]

warnings.warn("celery_fairqueue.dlq is deprecated; import DeadLetters from celery_fairqueue",
              DeprecationWarning, stacklevel=2)
