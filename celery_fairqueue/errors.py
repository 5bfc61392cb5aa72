"""The exception family: one root, specific subclasses whose messages say what is wrong."""

from __future__ import annotations


class FairqueueError(Exception):
    """Root of every error this package raises."""


class ConfigurationError(FairqueueError):
    """A ``fairqueue_*`` setting or a task option is invalid."""


class EnqueueError(FairqueueError):
    """A job could not be stored; nothing was enqueued."""


class MissingAccountError(EnqueueError, ValueError):
    """A fair task was enqueued without an account."""


class SerializationError(EnqueueError, TypeError):
    """A job's arguments cannot be serialized as JSON."""


class PayloadTooLargeError(EnqueueError):
    """A job's serialized message is over ``fairqueue_max_payload_bytes``."""


class StoreUnavailableError(EnqueueError):
    """Redis, the fair store, could not be reached."""


class InvalidLimitError(FairqueueError, ValueError):
    """An account limit (rate, burst, concurrency, window, time zone) is malformed."""
