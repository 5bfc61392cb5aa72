"""The dead-letter operations the admin and manage.py share.

Replay and purge act on the fair store first (the dead letters live in Redis) and then have the
recorder bring the recorded rows in line; they check the user's permission themselves, so
neither caller can forget to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from django.core.exceptions import PermissionDenied

from ....reports import BatchOutcome, purge_each, replay_each
from ....store import DeadLetters
from ..conf import celery_app
from ..recording.dead_letters import record_purge, record_replay

REPLAY_PERMISSION = "celery_fairqueue.replay_job"
PURGE_PERMISSION = "celery_fairqueue.purge_job"


class User(Protocol):
    """Whom replay and purge act for: a Django user, or the anonymous one."""

    is_active: bool

    def has_perm(self, perm: str, obj: Any = None) -> bool: ...


def require(user: User, permission: str) -> None:
    """Refuse, naming the permission, unless ``user`` is active and holds ``permission``."""
    if not (user.is_active and user.has_perm(permission)):
        raise PermissionDenied(f"{user} lacks the permission {permission!r}")


def replay_dead_letters(user: User, ids: Sequence[str]) -> BatchOutcome:
    """Replay dead letters by any name the resolver takes (``Job.delivery_id``, the task id,
    ``task.name[id]``); replayed rows become ready again."""
    require(user, REPLAY_PERMISSION)
    outcome = replay_each(DeadLetters(celery_app()), ids)
    record_replay(outcome.done)
    return outcome


def purge_dead_letters(user: User, ids: Sequence[str]) -> BatchOutcome:
    """Delete dead letters for good (named as for a replay), and their rows."""
    require(user, PURGE_PERMISSION)
    outcome = purge_each(DeadLetters(celery_app()), ids)
    record_purge(list(outcome.done))
    return outcome
