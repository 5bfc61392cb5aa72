"""FairTask: the Task base class whose jobs go through the fair store instead of the broker."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Sequence
from typing import Any

from celery import Task
from celery.result import AsyncResult

from .errors import ConfigurationError, MissingAccountError
from .idempotency import JobKeySpec, bound_arguments, compute_job_key

ACCOUNT_HEADER = "fairqueue_account"
JOB_KEY_HEADER = "job_key"

# Set by the publish path: the job that an apply_async in this context actually stored or reused.
last_enqueued_task_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fairqueue_last_enqueued_task_id", default=None)

class FairTask(Task):
    """Fair-queued by account, leased, deduplicated by business key.

    Options (class attributes, or ``@app.task(base=FairTask, ...)`` keywords):
    ``account_arg`` names the argument holding the account; ``job_key`` is a tuple of argument
    names, or a callable taking the task's arguments, that identifies the job.
    """

    account_arg: str | None = None
    job_key: JobKeySpec = None

    # The lease, not the ack, protects a running job: ack when it is done, and give a job back
    # when its pool process dies, so the killed job runs again.
    acks_late = True
    reject_on_worker_lost = True
    Strategy = "celery_fairqueue.worker.strategy:fair_strategy"

    @classmethod
    def on_bound(cls, app: Any) -> None:
        super().on_bound(app)
        if cls.account_arg is not None and not isinstance(cls.account_arg, str):
            raise ConfigurationError(f"task {cls.name}: account_arg must be an argument name")
        spec = cls.job_key_spec()
        if spec is not None and not callable(spec) and (
            isinstance(spec, str) or not all(isinstance(n, str) for n in spec)
        ):
            raise ConfigurationError(
                f"task {cls.name}: job_key must be a tuple of argument names or a callable")

    @classmethod
    def job_key_spec(cls) -> JobKeySpec:
        # read from the class: a function stored as attribute would bind as a method
        return inspect.getattr_static(cls, "job_key")

    def resolve_account(self, args: Sequence[Any], kwargs: dict[str, Any],
                        explicit: Any = None) -> str:
        """The account a job belongs to: an explicit ``account=`` wins over ``account_arg``."""
        account = explicit
        if account is None and self.account_arg:
            account = bound_arguments(self.run, args, kwargs).get(self.account_arg)
        if account is None or account == "":
            where = f"argument {self.account_arg!r}" if self.account_arg else "account_arg"
            raise MissingAccountError(
                f"task {self.name} was enqueued with no account: pass account=... to "
                f"apply_async or set {where}")
        if isinstance(account, bool) or not isinstance(account, (str, int)):
            raise MissingAccountError(
                f"task {self.name}: account must be a str or int, got {type(account).__name__}")
        return str(account)

    def business_key(self, account: str, args: Sequence[Any],
                     kwargs: dict[str, Any]) -> str | None:
        return compute_job_key(self.name, account, self.job_key_spec(), self.run, args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: str | None = None,
                    producer: Any = None, link: Any = None, link_error: Any = None,
                    shadow: str | None = None, **options: Any) -> AsyncResult:
        """Enqueue into the fair store; a job whose key is pending, running or done is reused."""
        token = last_enqueued_task_id.set(None)
        try:
            result = super().apply_async(args, kwargs, task_id=task_id, producer=producer,
                                         link=link, link_error=link_error, shadow=shadow,
                                         **options)
            stored = last_enqueued_task_id.get()
        finally:
            last_enqueued_task_id.reset(token)
        if stored is not None and stored != result.id:
            return self.AsyncResult(stored)
        return result

    def retry(self, args: Any = None, kwargs: Any = None, exc: Any = None, throw: bool = True,
              eta: Any = None, countdown: Any = None, max_retries: Any = None,
              **options: Any) -> Any:
        """Celery's retry, keeping the job's account (it may have come from ``account=``)."""
        account = getattr(self.request, ACCOUNT_HEADER, None)
        if account is not None:
            options.setdefault("account", account)
        return super().retry(args=args, kwargs=kwargs, exc=exc, throw=throw, eta=eta,
                             countdown=countdown, max_retries=max_retries, **options)

def is_fair(task: Any) -> bool:
    return isinstance(task, FairTask)
