"""The Task base classes: ReliableTask (idempotent, classified retries, dead letters) and
FairTask (all of that, plus fair queuing by account through the fair store)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import traceback
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from celery.result import AsyncResult

from .errors import ConfigurationError, MissingAccountError
from .idempotency import JobKeySpec, bound_arguments, compute_job_key
from .protocol import (
    ACCOUNT_HEADER,
    FIRST_FAILURE_HEADER,
    JOB_KEY_HEADER,
    EventType,
    delivery_id,
    is_fair,
    job_key_of,
    last_enqueued_task_id,
)
from .redaction import masked_reprs
from .retry import RetryPolicy
from .store import FairStore, store_for

logger = logging.getLogger(__name__)

__all__ = ["FairTask", "ReliableTask", "is_fair"]

MAX_ERROR_CHARS = 2000
MAX_TRACEBACK_CHARS = 20000


class ReliableTask(Task):
    """Idempotent by business key, retried by classification, dead-lettered when hopeless.

    Options (class attributes, or ``@app.task(base=..., ...)`` keywords): ``job_key`` is a
    tuple of argument names, or a callable taking the task's arguments, that identifies the job;
    ``retry_policy`` a :class:`RetryPolicy`; ``account_arg`` the argument holding the account;
    ``redact`` the argument names masked wherever a dead letter is shown.
    """

    account_arg: str | None = None
    job_key: JobKeySpec = None
    retry_policy: RetryPolicy = RetryPolicy()
    redact: Sequence[str] = ()

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
        if not isinstance(cls.retry_policy, RetryPolicy):
            raise ConfigurationError(f"task {cls.name}: retry_policy must be a RetryPolicy")

    @classmethod
    def job_key_spec(cls) -> JobKeySpec:
        # read from the class: a function stored as attribute would bind as a method
        return inspect.getattr_static(cls, "job_key")

    def account_of(self, args: Sequence[Any], kwargs: dict[str, Any],
                   explicit: Any = None) -> str | None:
        """The account of a job: an explicit ``account=`` wins over ``account_arg``."""
        account = explicit
        if account is None and self.account_arg:
            account = bound_arguments(self.run, args, kwargs).get(self.account_arg)
        if account is None or account == "":
            return None
        if isinstance(account, bool) or not isinstance(account, (str, int)):
            raise MissingAccountError(
                f"task {self.name}: account must be a str or int, got {type(account).__name__}")
        return str(account)

    def business_key(self, account: str | None, args: Sequence[Any],
                     kwargs: dict[str, Any]) -> str | None:
        return compute_job_key(self.name, account or "", self.job_key_spec(), self.run, args,
                               kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: str | None = None,
                    producer: Any = None, link: Any = None, link_error: Any = None,
                    shadow: str | None = None, **options: Any) -> AsyncResult:
        """Celery's apply_async, with the business key in the message for the markers and the
        ``redact`` arguments masked where Celery shows arguments (logs, events, Flower)."""
        if self.redact and "argsrepr" not in options and "kwargsrepr" not in options:
            # arguments that do not fit the signature: Celery's own check says so below
            with contextlib.suppress(TypeError):
                options["argsrepr"], options["kwargsrepr"] = masked_reprs(
                    self.run, args or (), kwargs or {}, self.redact)
        if self.job_key_spec() is not None and not is_fair(self):
            account = self.account_of(args or (), kwargs or {}, options.pop("account", None))
            headers = dict(options.get("headers") or {})
            headers[JOB_KEY_HEADER] = self.business_key(account, args or (), kwargs or {})
            options["headers"] = headers
        return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                   link_error=link_error, shadow=shadow, **options)

    # -- running -------------------------------------------------------------------------------

    def already_applied(self, job_key: str, *args: Any, **kwargs: Any) -> Any:
        """Reconciliation hook: did a crashed earlier run already cause the side effect?

        Called before running again when a job was started but never marked done. Return a
        truthy value (the external id, e.g. the sent message's id) to mark it done without
        running, or a falsy one to run it.
        """
        return None

    def set_external_id(self, external_id: str) -> None:
        """Record the external system's id of the side effect with the job's done marker."""
        self.request.fairqueue_external_id = external_id

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:
            return super().__call__(*args, **kwargs)
        job_key = job_key_of(request)
        request.job_key = job_key  # the public name, whichever header carried it
        job_id = delivery_id(request.id, request.retries or 0)
        store = self._store()
        if job_key:
            marker = store.marker(job_key)
            if marker and marker["state"] == "done":
                logger.info("fairqueue: %s[%s] is already done (job key %s...); not run again",
                            self.name, request.id, job_key[:12])
                store.emit(EventType.SUCCEEDED, job=job_id,
                           external_id=marker.get("external_id"))
                return marker.get("external_id")
            if marker and marker["state"] == "started":
                external_id = self.already_applied(job_key, *args, **kwargs)
                if external_id:
                    logger.warning("fairqueue: %s[%s] had already applied its side effect "
                                   "before a crash (external id %s); marked done, not run again",
                                   self.name, request.id, external_id)
                    store.mark_done(job_key, job_id, str(external_id))
                    store.emit(EventType.SUCCEEDED, job=job_id, external_id=external_id)
                    return external_id
            store.mark_started(job_key, job_id)
        try:
            result = self.run(*args, **kwargs)
        except Retry as retry:
            store.emit(EventType.RETRYING, job=job_id, reason="the task asked to retry",
                       error=_describe(retry.exc) if retry.exc else None, due=_due(retry.when))
            raise
        except (Ignore, Reject):
            raise
        except Exception as exc:
            self._on_job_failure(exc, job_id, args, kwargs)
            raise
        external_id = getattr(request, "fairqueue_external_id", None)
        if job_key:
            store.mark_done(job_key, job_id, external_id)
        store.emit(EventType.SUCCEEDED, job=job_id, external_id=external_id)
        return result

    def _store(self) -> FairStore:
        return store_for(self.app)

    def _on_job_failure(self, exc: Exception, job_id: str, args: Sequence[Any],
                        kwargs: dict[str, Any]) -> None:
        """Retry a retryable failure after its delay, else keep the job as a dead letter."""
        policy = self.retry_policy
        request = self.request
        attempts = (request.retries or 0) + 1
        verdict = policy.classify(exc)
        first_failure = getattr(request, FIRST_FAILURE_HEADER, None) or time.time()
        if verdict.retryable and not policy.exhausted(attempts):
            delay = policy.delay(attempts - 1, exc)
            logger.info("fairqueue: %s[%s] attempt %d failed (%s); retrying in %.1fs",
                        self.name, request.id, attempts, verdict.reason, delay)
            headers = {**(request.headers or {}), FIRST_FAILURE_HEADER: first_failure}
            self._store().emit(EventType.RETRYING, job=job_id, error=_describe(exc),
                               reason=verdict.reason, due=time.time() + delay)
            raise self.retry(exc=exc, countdown=delay, max_retries=policy.max_attempts,
                             headers=headers)
        reason = verdict.reason if not verdict.retryable else (
            f"gave up after {attempts} attempts: {verdict.reason}")
        logger.error("fairqueue: %s[%s] dead-lettered after %d attempt(s): %s", self.name,
                     request.id, attempts, reason)
        self._store().emit(EventType.FAILED, job=job_id, error=_describe(exc), reason=reason)
        job_key = job_key_of(request)
        self._store().bury(job_id, reason, job_key, {
            "task": self.name,
            "account": getattr(request, ACCOUNT_HEADER, None) or self.account_of(args, kwargs),
            "job_key": job_key,
            "queue": (request.delivery_info or {}).get("routing_key"),
            "args": list(args), "kwargs": dict(kwargs), "attempts": attempts,
            "error": _describe(exc),
            "traceback": "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:],
            "first_failure": first_failure,
        })


class FairTask(ReliableTask):
    """Fair-queued by account, leased, deduplicated at enqueue by business key.

    ``account_arg`` names the argument holding the account (or pass ``account=`` to
    ``apply_async``); a job with no account is refused at enqueue.
    """

    # The lease, not the ack, protects a running job: ack when it is done, and give a job back
    # when its pool process dies, so the killed job runs again.
    fair_queued = True  # see protocol.is_fair
    acks_late = True
    reject_on_worker_lost = True
    Strategy = "celery_fairqueue.worker.strategy:fair_strategy"

    def resolve_account(self, args: Sequence[Any], kwargs: dict[str, Any],
                        explicit: Any = None) -> str:
        """The account a job belongs to, or MissingAccountError naming the task."""
        account = self.account_of(args, kwargs, explicit)
        if account is None:
            where = f"argument {self.account_arg!r}" if self.account_arg else "account_arg"
            raise MissingAccountError(
                f"task {self.name} was enqueued with no account: pass account=... to "
                f"apply_async or set {where}")
        return account

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
        """Celery's retry, keeping the job's account and key (either may have been explicit)."""
        account = getattr(self.request, ACCOUNT_HEADER, None)
        if account is not None:
            options.setdefault("account", account)
        options.setdefault("job_key", job_key_of(self.request))
        return super().retry(args=args, kwargs=kwargs, exc=exc, throw=throw, eta=eta,
                             countdown=countdown, max_retries=max_retries, **options)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def _due(when: Any) -> float | None:
    """The epoch time a Celery ``Retry`` will run again (``when`` is seconds or a datetime)."""
    if isinstance(when, (int, float)):
        return time.time() + when
    if isinstance(when, datetime):
        return when.timestamp()
    return None
