"""The console's operator actions: pause and resume an account or a queue, lift a provider's
slow-down of either, cancel a waiting job, run a delayed job now, set an account's limit.

Each checks its own permission, acts on the fair store (which owns all of this), and writes an
entry to the admin log naming who did what; the admin views only call :func:`perform`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import QueryDict

from ....errors import FairqueueError, InvalidLimitError
from ....install import cancel as store_cancel
from ....install import clear_account_limit, lift_slow_down, set_account_limit
from ....install import pause as store_pause
from ....install import resume as store_resume
from ....install import run_now as store_run_now
from ....limit_reports import limit_text
from ....limits import AccountLimit as Limit
from ....protocol import task_id_of
from ..conf import celery_app
from ..models import Account, Job
from .views import User, require

PAUSE_PERMISSION = "celery_fairqueue.pause_account"
RESUME_PERMISSION = "celery_fairqueue.resume_account"
#: Ending a provider's "slow down" early: its own permission (the provider may flag the account).
LIFT_PERMISSION = "celery_fairqueue.lift_slow_down"
LIMIT_PERMISSION = "celery_fairqueue.edit_account_limit"
#: A queue's shared limit (a provider's quota for every account): the admin's QueueLimit.
QUEUE_LIMIT_PERMISSION = "celery_fairqueue.change_queuelimit"
CANCEL_PERMISSION = "celery_fairqueue.cancel_job"
RUN_NOW_PERMISSION = "celery_fairqueue.run_job_now"
REASON_LENGTH = 200


class ActionError(Exception):
    """An action that was refused or failed, in words for the operator."""


@dataclass(frozen=True)
class Done:
    message: str


def _scope(account: str, queue: str) -> str:
    if account and queue:
        return f"account {account!r} in queue {queue!r}"
    return f"account {account!r}" if account else f"queue {queue!r}"


def _log(user: User, model: type[models.Model], object_id: str, text: str) -> None:
    LogEntry.objects.create(
        user_id=getattr(user, "pk", None), content_type=ContentType.objects.get_for_model(
            model, for_concrete_model=False),
        object_id=object_id[:1000], object_repr=text[:200], action_flag=CHANGE,
        change_message=text)


def _target(data: QueryDict) -> tuple[str, str]:
    account, queue = data.get("account", ""), data.get("queue", "")
    if not account and not queue:
        raise ActionError("name an account, a queue, or both")
    return account, queue


def pause(user: User, data: QueryDict) -> Done:
    require(user, PAUSE_PERMISSION)
    account, queue = _target(data)
    reason = data.get("reason", "").strip()[:REASON_LENGTH]
    store_pause(celery_app(), account=account or None, queue=queue or None,
                  by=str(getattr(user, "username", user)), reason=reason)
    text = f"Paused {_scope(account, queue)}" + (f": {reason}" if reason else "")
    _log(user, Account, account or f"queue:{queue}", text)
    return Done(text + ".")


def resume(user: User, data: QueryDict) -> Done:
    require(user, RESUME_PERMISSION)
    account, queue = _target(data)
    if not store_resume(celery_app(), account=account or None, queue=queue or None):
        raise ActionError(f"{_scope(account, queue)} was not paused (as such): nothing resumed")
    text = f"Resumed {_scope(account, queue)}"
    _log(user, Account, account or f"queue:{queue}", text)
    return Done(text + ".")


def lift(user: User, data: QueryDict) -> Done:
    require(user, LIFT_PERMISSION)
    account, queue = _target(data)
    if not queue:
        raise ActionError("name the queue whose provider asked to slow down")
    if not lift_slow_down(celery_app(), queue, account or None):
        raise ActionError(f"{_scope(account, queue)} was not slowed down: nothing lifted")
    text = f"Lifted the provider's slow-down of {_scope(account, queue)}"
    _log(user, Account, account or f"queue:{queue}", text)
    return Done(text + ".")


def _job_target(data: QueryDict) -> tuple[str, Job | None]:
    task_id = data.get("task_id", "").strip()
    if not task_id:
        raise ActionError("name the job's task id")
    return task_id, Job.objects.filter(task_id=task_id_of(task_id)).first()


def cancel(user: User, data: QueryDict) -> Done:
    require(user, CANCEL_PERMISSION)
    task_id, job = _job_target(data)
    if not store_cancel(celery_app(), task_id):
        raise ActionError(f"job {task_id} was not cancelled: it no longer waits "
                          "(running, finished or unknown)")
    text = f"Cancelled waiting job {task_id}"
    _log(user, Job, str(job.pk) if job else task_id, text)
    return Done(text + ".")


def run_now(user: User, data: QueryDict) -> Done:
    require(user, RUN_NOW_PERMISSION)
    task_id, job = _job_target(data)
    if not store_run_now(celery_app(), task_id):
        raise ActionError(f"job {task_id} is not delayed: nothing to run now")
    text = f"Made delayed job {task_id} due now (its account's limits still apply)"
    _log(user, Job, str(job.pk) if job else task_id, text)
    return Done(text + ".")


def _number(data: QueryDict, name: str, kind: Callable[[str], float | int]) -> float | int | None:
    raw = data.get(name, "").strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ActionError(f"{name} {raw!r} is not a number") from None


def set_limit(user: User, data: QueryDict) -> Done:
    require(user, LIMIT_PERMISSION)
    account = data.get("account", "")
    if not account:
        raise ActionError("name the account")
    app = celery_app()
    if data.get("clear"):
        clear_account_limit(app, account)
        text = f"Cleared the limit of account {account!r} (the default applies)"
    else:
        weight = _number(data, "weight", int)
        try:
            limit = Limit(rate=data.get("rate", "").strip() or None,
                          burst=_number(data, "burst", float),
                          concurrency=_number(data, "concurrency", int),  # type: ignore[arg-type]
                          window=data.get("window", "").strip() or None,
                          tz=data.get("tz", "").strip() or None,
                          weight=1 if weight is None else weight)  # type: ignore[arg-type]
        except InvalidLimitError as exc:
            raise ActionError(f"limit not saved: {exc}") from None
        set_account_limit(app, account, rate=limit.rate, burst=limit.burst,
                                  concurrency=limit.concurrency, window=limit.window,
                                  tz=limit.tz, weight=limit.weight)
        text = f"Set the limit of account {account!r}: {limit_text(limit)}"
    _log(user, Account, account, text)
    return Done(text + ".")


ACTIONS: dict[str, Callable[[User, QueryDict], Done]] = {
    "pause": pause, "resume": resume, "cancel": cancel, "run_now": run_now, "limit": set_limit,
    "lift": lift,
}


def perform(user: User, action: str, data: QueryDict) -> Done:
    """Do ``action`` for ``user`` with the posted ``data``; raises PermissionDenied when the
    user lacks its permission, ActionError when it cannot be done."""
    handler = ACTIONS.get(action)
    if handler is None:
        raise ActionError(f"unknown action {action!r}")
    try:
        return handler(user, data)
    except FairqueueError as exc:  # the store is down, full, or refused
        raise ActionError(f"{action.replace('_', ' ')} failed: {exc}") from None
    except ValueError as exc:  # an id the store cannot hold
        raise ActionError(f"{action.replace('_', ' ')} failed: {exc}") from None
