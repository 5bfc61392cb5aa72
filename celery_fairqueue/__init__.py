"""Fair, rate-limited, idempotent multi-tenant jobs for Celery."""

from .dlq import DeadLetter, DeadLetters
from .errors import (
    ConfigurationError,
    EnqueueError,
    FairqueueError,
    InvalidLimitError,
    MissingAccountError,
    PayloadTooLargeError,
    SerializationError,
    StoreUnavailableError,
)
from .install import clear_account_limit, get_account_limit, install, set_account_limit
from .limits import AccountLimit
from .retry import PermanentError, RetryableError, RetryPolicy
from .task import FairTask, ReliableTask

__version__ = "0.1.0"

__all__ = [
    "AccountLimit",
    "ConfigurationError",
    "DeadLetter",
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
    "StoreUnavailableError",
    "clear_account_limit",
    "get_account_limit",
    "install",
    "set_account_limit",
]
