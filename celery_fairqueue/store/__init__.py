"""The fair store: the one door to Redis.

Nothing outside this package talks to Redis or sees a redis-py exception: every failure arrives
as :class:`~celery_fairqueue.errors.StoreUnavailableError` (``StoreFullError`` for OOM), and
account ids go in and come out decoded.
"""

from .connection.translate import display_url
from .formats.dead_letter import DeadLetter
from .formats.keys import Keys, QueueKeys
from .formats.records import SlowDownHold
from .readers.console import (
    REASONS,
    ConsoleReader,
    LiveJob,
    QueueQuota,
    QueueState,
    WorkerInfo,
)
from .readers.dead_letters import DeadLetterNotFound, DeadLetters
from .readers.doorbell import DoorbellWait
from .readers.events import RECORDER_GROUP, EventReader, Leadership, StreamLag, StreamLeases
from .readers.views import (
    AccountPage,
    AccountRow,
    DeferredAccount,
    QueueStatus,
    ScheduledJob,
    StoreInspector,
    StoreStatus,
)
from .shards.opening import open_store, store_for
from .shards.shard import FairStore
from .writers.fleet import WorkerRegistration
from .writers.jobs import Claim, EnqueueResult
from .writers.leases import GIVE_BACK_SECONDS, Lease, LeaseHolder
from .writers.operator import OperatorPause

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
    "DoorbellWait",
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
    "QueueQuota",
    "QueueState",
    "QueueStatus",
    "ScheduledJob",
    "SlowDownHold",
    "StoreInspector",
    "StoreStatus",
    "StreamLag",
    "StreamLeases",
    "WorkerInfo",
    "WorkerRegistration",
    "display_url",
    "open_store",
    "store_for",
]
