"""The exception family: one root, specific subclasses whose messages say what is wrong.

Where Redis failures become these: ``store/connection/translate.py`` (``translate``), the one
place every store command's error passes through."""

from __future__ import annotations

from typing import Any


class FairqueueError(Exception):
    """Root of every error this package raises."""

    #: raised by a bulk enqueue (a group, ``FairTask.apply_many``): every job's
    #: :class:`~celery_fairqueue.bulk.EnqueueOutcome`, saying which were stored
    outcomes: list[Any] | None = None


class ConfigurationError(FairqueueError):
    """A ``fairqueue_*`` setting or a task option is invalid."""


class EnqueueError(FairqueueError):
    """A job could not be stored.

    Refused before it reached Redis (no account, not JSON, too large, over a bound), nothing was
    enqueued. A :class:`StoreUnavailableError` is ambiguous instead: the write may have landed
    before the reply was lost; enqueueing again with the same business key is safe, because the
    store answers with the job it already holds.
    """


class MissingAccountError(EnqueueError, ValueError):
    """A fair task was enqueued without an account."""


class InvalidAccountError(EnqueueError, ValueError):
    """A job's account id cannot be stored: over the store's maximum length."""


class InvalidJobKeyError(EnqueueError, ValueError):
    """An explicit ``job_key=`` is empty, too long or not a str or int."""


class BacklogFullError(EnqueueError):
    """The account (``fairqueue_max_pending_per_account``) or the whole store
    (``fairqueue_max_pending``) holds as many jobs as allowed; nothing was enqueued."""


class SerializationError(EnqueueError, TypeError):
    """A job's arguments cannot be serialized as JSON."""


class PayloadTooLargeError(EnqueueError):
    """A job's serialized message is over ``fairqueue_max_payload_bytes``."""


class StoreUnavailableError(EnqueueError):
    """Redis, the fair store, could not be reached or refused the command (loading, read-only
    replica, busy script, failover): try again later."""


class BrokerUnavailableError(EnqueueError):
    """The broker did not take a message the package sent through it (a plain task's
    dead-letter replay); nothing was sent: try again later."""


class StoreFullError(StoreUnavailableError):
    """Redis refused a write because it is at ``maxmemory`` (an OOM error reply)."""


class StoreLayoutError(FairqueueError):
    """The fair store holds jobs in the Redis layout of the previous celery-fairqueue version,
    which this version does not read: a worker refuses to start until workers of that version
    have drained them (docs/deployment.md, "Upgrading the store layout")."""


class AccountMovingError(FairqueueError):
    """A reshard is moving the account to another shard: a pause, resume or limit change for
    it is refused until its move ends (a matter of seconds per chunk of accounts)."""


class InvalidLimitError(FairqueueError, ValueError):
    """An account limit (rate, burst, concurrency, window, time zone) is malformed."""


class DeadLetterNotFound(FairqueueError, KeyError):
    """No dead letter has that id (it was replayed or purged already)."""


class AmbiguousDeadLetterError(FairqueueError, LookupError):
    """A replay or purge named a task whose task id has several dead letters (a task and its
    replacement, say): acting on all could run the work twice, so it names one by its id."""


class ReplayLostError(FairqueueError):
    """A replay's letter was taken by a replay or purge at the same time. Raised in the fair
    publish path instead of :class:`DeadLetterNotFound`, whose ``KeyError`` kombu would take
    for a lost connection (``OperationalError``); ``DeadLetters.replay`` turns it back."""
