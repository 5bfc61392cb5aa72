"""Fair, rate-limited, idempotent multi-tenant jobs for Celery."""

from .errors import (
    ConfigurationError,
    DeadLetterNotFound,
    EnqueueError,
    FairqueueError,
    InvalidLimitError,
    MissingAccountError,
    PayloadTooLargeError,
    SerializationError,
    StoreFullError,
    StoreUnavailableError,
)
from .install import clear_account_limit, get_account_limit, install, set_account_limit
from .limits import AccountLimit
from .retry import PermanentError, RetryableError, RetryPolicy
from .store import DeadLetter, DeadLetters, store_for
from .task import FairTask, ReliableTask

__version__ = "0.1.0"

__all__ = [
    "AccountLimit",
    "ConfigurationError",
    "DeadLetter",
    "DeadLetterNotFound",
    "DeadLetters",
    "EnqueueError",
    "FairTask",
    "FairqueueError",
    "InvalidLimitError",
    "MissingAccountError",
    "PayloadTooLargeError",
    "PermanentError",
    "ReliableTask",
    "RetryPolicy",
    "RetryableError",
    "SerializationError",
    "StoreFullError",
    "StoreUnavailableError",
    "clear_account_limit",
    "get_account_limit",
    "install",
    "set_account_limit",
    "store_for",
]
