"""Fair, rate-limited, idempotent multi-tenant jobs for Celery."""

from .bulk import EnqueueOutcome
from .errors import (
    AmbiguousDeadLetterError,
    BacklogFullError,
    BrokerUnavailableError,
    ConfigurationError,
    DeadLetterNotFound,
    EnqueueError,
    FairqueueError,
    InvalidAccountError,
    InvalidJobKeyError,
    InvalidLimitError,
    MissingAccountError,
    PayloadTooLargeError,
    SerializationError,
    StoreFullError,
    StoreUnavailableError,
)
from .install import (
    cancel,
    clear_account_limit,
    clear_default_limit,
    clear_queue_limit,
    get_account_limit,
    get_default_limit,
    get_queue_limit,
    install,
    pause,
    resume,
    run_now,
    set_account_limit,
    set_default_limit,
    set_queue_limit,
)
from .limits import AccountLimit
from .retry import PermanentError, RetryableError, RetryPolicy
from .store import DeadLetter, DeadLetters, store_for
from .task import FairTask, ReliableTask

__version__ = "0.1.0"

__all__ = [
    "AccountLimit",
    "AmbiguousDeadLetterError",
    "BacklogFullError",
    "BrokerUnavailableError",
    "ConfigurationError",
    "DeadLetter",
    "DeadLetterNotFound",
    "DeadLetters",
    "EnqueueError",
    "EnqueueOutcome",
    "FairTask",
    "FairqueueError",
    "InvalidAccountError",
    "InvalidJobKeyError",
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
    "cancel",
    "clear_account_limit",
    "clear_default_limit",
    "clear_queue_limit",
    "get_account_limit",
    "get_default_limit",
    "get_queue_limit",
    "install",
    "pause",
    "resume",
    "run_now",
    "set_account_limit",
    "set_default_limit",
    "set_queue_limit",
    "store_for",
]
