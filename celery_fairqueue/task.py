"""The Task base classes: ReliableTask (idempotent, classified retries, dead letters) and
FairTask (all of that, plus fair queuing by account through the fair store)."""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from celery.result import AsyncResult

from . import bulk
from .bulk import EnqueueOutcome, follow
from .errors import (
    ConfigurationError,
    InvalidAccountError,
    InvalidJobKeyError,
    MissingAccountError,
    StoreUnavailableError,
)
from .idempotency import JobKeySpec, bound_arguments, compute_job_key, hash_identity
from .markers import MarkerGuard
from .protocol import (
    ACCOUNT_HEADER,
    FIRST_FAILURE_HEADER,
    JOB_KEY_HEADER,
    MAX_ID_LENGTH,
    STORED_JOB_KEY_OPTION,
    EventType,
    LeaseTicket,
    delivery_of,
    encode_id,
    is_fair,
    job_key_of,
    last_enqueued_task_id,
    normalize_id,
)
from .redaction import masked_reprs
from .retry import FailureVerdict, PermanentError, RetryPolicy, cut_delay
from .settings import settings_for
from .slowdown import ScopedSlowDown
from .store import FairStore, store_for
from .worker.redacted import RedactedOutputs

logger = logging.getLogger(__name__)

__all__ = ["FairTask", "GiveBack", "ReliableTask", "is_fair"]

MAX_TRACEBACK_CHARS = 20000


class GiveBack(Reject):
    """The fair store failed a job's own write: run it again later. For a fair task, the
    worker's FairRequest waits a moment and does not count the delivery as a poison attempt; on
    the broker (ReliableTask) it is Celery's requeue."""


class ReliableTask(RedactedOutputs, Task):
    """Idempotent by business key, retried by classification, dead-lettered when hopeless.

    Options (class attributes, or ``@app.task(base=..., ...)`` keywords): ``job_key`` is a
    tuple of argument names, or a callable taking the task's arguments, that identifies the job;
    ``retry_policy`` a :class:`RetryPolicy`; ``account_arg`` the argument holding the account,
    ``default_account`` the account of a job that names none (else
    ``fairqueue_default_account``); ``redact`` the argument names masked wherever the job is
    shown (events, ``inspect``, dead letters, logs), their values wherever a string quotes them.
    """

    account_arg: str | None = None
    default_account: str | None = None
    job_key: JobKeySpec = None
    retry_policy: RetryPolicy = RetryPolicy()
    redact: Sequence[str] = ()
    #: Celery's "expected" errors: logged by Celery at INFO without a traceback. A
    #: PermanentError is the task's own verdict, and its dead letter is logged once, below.
    throws: tuple[type[BaseException], ...] = (PermanentError,)

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
        # from the class, as inspect.getattr_static reads it (a stored function would bind)
        return next(klass.__dict__["job_key"] for klass in cls.__mro__
                    if "job_key" in klass.__dict__)

    def bind_call(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments by parameter name (the methods' ``named``: a publish binds once), or
        None for a call that does not fit, sent with ``typing=False`` to fail in the worker."""
        try:
            return bound_arguments(self.run, args, kwargs)
        except TypeError:
            if self.typing:
                raise
            return None

    def named_arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments by parameter name; of a call that does not fit, only its keywords."""
        return dict(kwargs) if (named := self.bind_call(args, kwargs)) is None else named

    def account_of(self, args: Sequence[Any], kwargs: dict[str, Any],
                   explicit: Any = None, named: dict[str, Any] | None = None) -> str | None:
        """The account of a job: an explicit ``account=`` wins over ``account_arg``, which wins
        over the task's ``default_account`` and then ``fairqueue_default_account``."""
        account = explicit
        if account is None and self.account_arg:
            named = self.named_arguments(args, kwargs) if named is None else named
            account = named.get(self.account_arg)
        if account is None or account == "":
            account = self.default_account or settings_for(self.app).default_account
        if account is None or account == "":
            return None
        if isinstance(account, bool) or not isinstance(account, (str, int)):
            raise MissingAccountError(
                f"task {self.name}: account must be a str or int, got {type(account).__name__}")
        return normalize_id(str(account))

    def business_key(self, account: str | None, args: Sequence[Any],
                     kwargs: dict[str, Any], named: dict[str, Any] | None = None) -> str | None:
        """The business key a call of this task with ``args``/``kwargs`` for ``account``
        gets (None when the task declares no ``job_key``): what a support tool computes to
        find the job, as ``send_step.business_key("acme", ("acme", 42, "intro", 3), {})``."""
        try:
            return compute_job_key(self.name, account or "", self.job_key_spec(), self.run,
                                   args, kwargs, named)
        except TypeError:
            if self.typing:
                raise
            return None  # typing=False and a call that does not bind: it fails in the worker

    def job_key_for(self, account: str | None, args: Sequence[Any], kwargs: dict[str, Any],
                    options: dict[str, Any], named: dict[str, Any] | None = None) -> str | None:
        """The business key of a job about to be sent, taking its options out of ``options``:
        a stored key (a retry's, a replay's) as it is; an explicit ``job_key=`` (beat's
        occurrence key, a caller's own) scoped by task and account, as derived keys are, so
        two tenants' equal keys never meet; else the key the task's ``job_key`` derives."""
        stored = options.pop(STORED_JOB_KEY_OPTION, None)
        explicit = options.pop("job_key", None)
        if stored:
            return str(stored)
        if explicit is None:
            return self.business_key(account, args, kwargs, named)
        if isinstance(explicit, bool) or not isinstance(explicit, (str, int)) or \
                explicit == "" or len(str(explicit).encode("utf-8", "surrogatepass")) > \
                MAX_ID_LENGTH:
            raise InvalidJobKeyError(
                f"task {self.name} (account {account!r}): job_key= must be a non-empty str or "
                f"int of at most {MAX_ID_LENGTH} bytes, got {type(explicit).__name__}")
        return hash_identity([self.name, account or "", {"job_key": str(explicit)}])

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
        self._key_message(args or (), kwargs or {}, options)
        return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                   link_error=link_error, shadow=shadow, **options)

    def _key_message(self, args: Sequence[Any], kwargs: dict[str, Any],
                     options: dict[str, Any]) -> None:
        """Put the job's business key in the message's headers, taking ``account`` and the
        key options out of ``options``."""
        account = self.account_of(args, kwargs, options.pop("account", None))
        job_key = self.job_key_for(account, args, kwargs, options)
        if job_key is not None:
            options["headers"] = {**(options.get("headers") or {}), JOB_KEY_HEADER: job_key}

    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """Celery's ``DjangoTask.delay_on_commit``: enqueue once the current Django transaction
        commits, not if it rolls back (Celery's own; Django is imported only here)."""
        from celery.contrib.django.task import DjangoTask

        DjangoTask.delay_on_commit(self, *args, **kwargs)

    def apply_async_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """Celery's ``DjangoTask.apply_async_on_commit``, as :meth:`delay_on_commit`."""
        from celery.contrib.django.task import DjangoTask

        DjangoTask.apply_async_on_commit(self, *args, **kwargs)

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's retry; when it gives up (the task's own ``max_retries`` used up), the job is
        dead-lettered as such rather than retried again by the policy."""
        try:
            return super().retry(*args, **kwargs)
        except (Retry, Reject):
            raise
        except Exception:
            self.request.fairqueue_gave_up = True
            raise

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
        if request.is_eager:  # task_always_eager, apply(): run as Celery does; no store
            request.job_key = job_key_of(request) or self.business_key(
                self.account_of(args, kwargs), args, kwargs)
            return super().__call__(*args, **kwargs)
        job_key = job_key_of(request)
        request.job_key = job_key  # the public name, whichever header carried it
        job_id = delivery_of(request)
        ticket = LeaseTicket.of(request)  # its lease, when claimed from the fair store
        by_ack = ticket is not None and ticket.ack_marks_done
        guard = MarkerGuard(self._store(), f"{self.name}[{request.id}]", ticket) \
            if job_key else None
        answered, external_id = False, None
        if guard and job_key:
            with self._store_or_give_back("read or write its started marker"):
                answered, external_id = guard.before_run(
                    job_key, job_id, lambda: self.already_applied(job_key, *args, **kwargs))
        if answered:
            if not by_ack:  # else the ack records the success
                self._emit(EventType.SUCCEEDED, job=job_id, external_id=external_id)
            return external_id
        try:
            result = self.run(*args, **kwargs)
        except Retry as retry:
            self.run_failed()
            self._emit(EventType.RETRYING, job=job_id, reason="the task asked to retry",
                       error=self.describe(retry.exc) if retry.exc else None,
                       due=_due(retry.when))
            raise
        except (Ignore, Reject):
            raise
        except StoreUnavailableError as exc:  # the store refused something the task asked of it
            raise self._give_back(exc, "reach the fair store") from exc
        except Exception as exc:
            self.run_failed()
            self._on_job_failure(exc, job_id, args, kwargs)
            raise
        external_id = getattr(request, "fairqueue_external_id", None)
        if guard and job_key and (external_id or not by_ack):  # the external id: here only
            with self._store_or_give_back("write its done marker"):
                guard.after_run(job_key, job_id, external_id,
                                settings_for(self.app).enqueue_timeout)
        if not by_ack:
            self._emit(EventType.SUCCEEDED, job=job_id, external_id=external_id)
        return result

    def _store(self) -> FairStore:
        """The store, or the shard of the running job's account: its markers, its dead
        letter and its events live there."""
        store = store_for(self.app)
        account = getattr(self.request, ACCOUNT_HEADER, None)
        return store.shard_for(str(account)) if account is not None else store

    def _emit(self, type: str, **fields: Any) -> None:
        """Record a transition for the recorder; a store that fails costs the record, not the
        job (the job's own writes, markers and settling, are what keeps it safe)."""
        try:
            self._store().emit(type, **fields)
        except StoreUnavailableError as exc:
            logger.warning("fairqueue: %s[%s]: the %s event was not recorded: %s", self.name,
                           self.request.id, type, exc)

    def _give_back(self, exc: StoreUnavailableError, doing: str) -> GiveBack:
        """What to raise when the fair store failed the job's own write: the job goes back,
        neither acked away nor dead-lettered (should that fail too, its lease returns it)."""
        logger.warning("fairqueue: %s[%s] could not %s (%s); given back to run again",
                       self.name, self.request.id, doing, exc)
        return GiveBack(f"the fair store failed: {exc}", requeue=True)

    @contextlib.contextmanager
    def _store_or_give_back(self, doing: str) -> Iterator[None]:
        try:
            yield
        except StoreUnavailableError as exc:
            raise self._give_back(exc, doing) from exc

    def retry_delay(self, seconds: float) -> float:
        """``seconds`` cut to ``fairqueue_max_retry_delay``; not a finite number: the maximum."""
        return cut_delay(seconds, settings_for(self.app).max_retry_delay)

    def slow_down(self, exc: BaseException, verdict: FailureVerdict) -> dict[str, Any]:
        """The retry's options that hold back more than the job (FairTask): none here."""
        return {}

    def _on_job_failure(self, exc: Exception, job_id: str, args: Sequence[Any],
                        kwargs: dict[str, Any]) -> None:
        """Retry a retryable failure after its delay, else keep the job as a dead letter."""
        request = self.request
        attempts = (request.retries or 0) + 1
        first_failure = getattr(request, FIRST_FAILURE_HEADER, None) or time.time()
        settings = settings_for(self.app)
        verdict = self.retry_policy.after_failure(
            exc, attempts, gave_up=getattr(request, "fairqueue_gave_up", False),
            longest=settings.max_retry_delay, longest_slow_down=settings.max_slow_down)
        if verdict.retry_in is not None:
            options = {"countdown": verdict.retry_in, **self.slow_down(exc, verdict)}
            logger.info("fairqueue: %s[%s] attempt %d failed (%s); retrying in %.1fs",
                        self.name, request.id, attempts, verdict.reason, options["countdown"])
            headers = {**(request.headers or {}), FIRST_FAILURE_HEADER: first_failure}
            self._emit(EventType.RETRYING, job=job_id, error=self.describe(exc),
                       reason=self.masked(verdict.reason), due=time.time() + options["countdown"])
            raise self.retry(exc=exc, max_retries=self.retry_policy.max_attempts,
                             headers=headers, **options)
        reason = self.masked(verdict.reason)
        # the task's own PermanentError is a verdict, not a fault: a warning; anything else
        # (a bug, an upstream that never recovered) an error, with Celery's traceback
        logger.log(logging.WARNING if isinstance(exc, PermanentError) else logging.ERROR,
                   "fairqueue: %s[%s] dead-lettered after %d attempt(s): %s", self.name,
                   request.id, attempts, reason)
        self._emit(EventType.FAILED, job=job_id, error=self.describe(exc), reason=reason)
        job_key = job_key_of(request)
        with self._store_or_give_back("keep its dead letter"):
            self._store().bury(job_id, reason, {
                "task": self.name,
                "account": getattr(request, ACCOUNT_HEADER, None) or self.account_of(args,
                                                                                     kwargs),
                "job_key": job_key,
                "queue": (request.delivery_info or {}).get("routing_key"),
                "args": list(args), "kwargs": dict(kwargs), "attempts": attempts,
                "error": self.describe(exc),
                "traceback": self.masked("".join(traceback.format_exception(exc))
                                         )[-MAX_TRACEBACK_CHARS:],
                "first_failure": first_failure,
            })


class FairTask(ScopedSlowDown, ReliableTask):
    """Fair-queued by account, leased, deduplicated at enqueue by business key.

    ``account_arg`` names the argument holding the account (or pass ``account=`` to
    ``apply_async``); a job with no account is refused at enqueue. ``slow_down_scope``: what a
    "slow down" answer holds back with its job (slowdown.py).
    """

    # The lease, not the ack, protects a running job: ack when it is done, and give a job back
    # when its pool process dies, so the killed job runs again.
    fair_queued = True  # see protocol.is_fair
    acks_late = True
    reject_on_worker_lost = True
    Strategy = "celery_fairqueue.worker.strategy:fair_strategy"
    Request = "celery_fairqueue.worker.request:FairRequest"
    def resolve_account(self, args: Sequence[Any], kwargs: dict[str, Any],
                        explicit: Any = None, named: dict[str, Any] | None = None) -> str:
        """The account a job belongs to, or MissingAccountError naming the task."""
        account = self.account_of(args, kwargs, explicit, named)
        if account is None:
            where = f"argument {self.account_arg!r}" if self.account_arg else "account_arg"
            raise MissingAccountError(
                f"task {self.name} was enqueued with no account: pass account=... to "
                f"apply_async or set {where}")
        try:
            encode_id(account)
        except ValueError as exc:
            raise InvalidAccountError(f"task {self.name}: account {account[:40]!r}... cannot "
                                      f"be stored: {exc}") from None
        return account

    def _key_message(self, args: Sequence[Any], kwargs: dict[str, Any],
                     options: dict[str, Any]) -> None:
        """Nothing: the fair publish path (publish.py) keys the stored job, from ``options``."""

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
        if stored is None:  # batched (a group's block): a duplicate's is pointed there later
            follow(result)
        return result

    def apply_many(self, calls: Iterable[Any], **options: Any) -> list[EnqueueOutcome]:
        """Enqueue many jobs of this task in pipelined batches (one round trip per shard per
        ``fairqueue_enqueue_batch`` jobs, each job its own atomic store), as a ``group`` of
        them is; each call is an args tuple or list, a kwargs dict, or a signature of this
        task (``task.s(...).set(account=...)``), each given ``options``. Every call is judged
        before any is stored; returns each call's outcome, in order. When any call was not
        stored (refused, or not tried once the store failed), the others are stored and the
        first failed call's error is raised, its ``outcomes`` every call's (bulk.py)."""
        return bulk.apply_many(self, calls, options)

    def retry(self, args: Any = None, kwargs: Any = None, exc: Any = None, throw: bool = True,
              eta: Any = None, countdown: Any = None, max_retries: Any = None,
              **options: Any) -> Any:
        """Celery's retry, keeping the job's account and key (either may have been explicit),
        with the countdown cut to ``fairqueue_max_retry_delay``; a retry the fair store could
        not take gives the job back instead of Celery's reject."""
        account = getattr(self.request, ACCOUNT_HEADER, None)
        if account is not None:
            options.setdefault("account", account)
        options.setdefault(STORED_JOB_KEY_OPTION, job_key_of(self.request))
        if isinstance(countdown, (int, float)):
            countdown = self.retry_delay(float(countdown))
        try:
            return super().retry(args=args, kwargs=kwargs, exc=exc, throw=throw, eta=eta,
                                 countdown=countdown, max_retries=max_retries, **options)
        except Reject as rejected:
            if isinstance(rejected.reason, StoreUnavailableError):
                raise self._give_back(rejected.reason, "store its retry") from rejected.reason
            raise


def _due(when: Any) -> float | None:
    """The epoch time a Celery ``Retry`` will run again (``when`` is seconds or a datetime)."""
    if isinstance(when, (int, float)):
        return time.time() + when
    if isinstance(when, datetime):
        return when.timestamp()
    return None
