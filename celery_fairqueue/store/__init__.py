"""The fair store: the one door to Redis.

Nothing outside this package talks to Redis or sees a redis-py exception: every failure arrives
as :class:`~celery_fairqueue.errors.StoreUnavailableError` (``StoreFullError`` for OOM), and
account ids go in and come out decoded.
"""

from .client import display_url
from .console import REASONS, ConsoleReader, LiveJob, QueueState, WorkerInfo
from .core import FairStore, store_for
from .dead_letters import DeadLetter, DeadLetterNotFound, DeadLetters
from .events import RECORDER_GROUP, EventReader, Leadership
from .fleet import WorkerRegistration
from .jobs import Claim, EnqueueResult
from .keys import Keys, QueueKeys
from .leases import GIVE_BACK_SECONDS, Lease, LeaseHolder
from .operator import OperatorPause
from .views import (
    AccountPage,
    AccountRow,
    DeferredAccount,
    QueueStatus,
    ScheduledJob,
    StoreInspector,
    StoreStatus,
)
from .wakeups import WakeSubscription

__all__ = [
    "GIVE_BACK_SECONDS",
    "REASONS",
    "RECORDER_GROUP",
    "AccountPage",
    "AccountRow",
    "Claim",
    "ConsoleReader",
    "DeadLetter",
    "DeadLetterNotFound",
    "DeadLetters",
    "DeferredAccount",
    "EnqueueResult",
    "EventReader",
    "FairStore",
    "Keys",
    "Leadership",
    "Lease",
    "LeaseHolder",
    "LiveJob",
    "OperatorPause",
    "QueueKeys",
    "QueueState",
    "QueueStatus",
    "ScheduledJob",
    "StoreInspector",
    "StoreStatus",
    "WakeSubscription",
    "WorkerInfo",
    "WorkerRegistration",
    "display_url",
    "store_for",
]
