"""Fair, rate-limited, idempotent multi-tenant jobs for Celery."""

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
from .task import FairTask

__version__ = "0.1.0"

__all__ = [
    "AccountLimit",
    "ConfigurationError",
    "EnqueueError",
    "FairTask",
    "FairqueueError",
    "InvalidLimitError",
    "MissingAccountError",
    "PayloadTooLargeError",
    "SerializationError",
    "StoreUnavailableError",
    "clear_account_limit",
    "get_account_limit",
    "install",
    "set_account_limit",
]
