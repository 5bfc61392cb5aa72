"""What leaves the worker about a task with ``redact`` arguments, masked (redaction.Secrets): its
task events, the error the result backend stores, and ``celery inspect`` listings.

Celery writes these in two processes. The pool process stores a failure in the result backend
(``trace.handle_failure``: the exception and its traceback text) before any hook of the task
runs; :func:`redacted_backend` hands it a backend that masks them. The worker's main process
sends the task events (an error's repr and traceback, a return value's repr) and answers
``inspect``; :class:`RedactingRequest` masks them there. A successful task's stored result stays
as it is: the caller's ``.get()`` returns it.
"""

from __future__ import annotations

from typing import Any

from celery import Task, states
from celery.worker.request import Request

from ..redaction import NO_SECRETS, Secrets, masked_call, task_secrets

#: The fields of Celery's task events that carry a job's data, not its identity.
DATA_FIELDS = frozenset({"args", "kwargs", "result", "exception", "traceback"})
#: Set on the running request when the task raised: the backend is masked from then on.
FAILED_FLAG = "fairqueue_failed"
#: Most characters of an error's text kept (dead letters, the store's events).
MAX_ERROR_CHARS = 2000


class RedactedOutputs:
    """The ReliableTask base's share of redaction: its request class (below), its result
    backend once the run raised, and the error texts it writes to the fair store."""

    Request = "celery_fairqueue.worker.redacted:RedactingRequest"

    @property
    def backend(self) -> Any:
        """Celery's result backend; once the run raised, one that stores the error with the
        ``redact`` values masked."""
        return redacted_backend(self, Task.backend.fget(self))

    @backend.setter
    def backend(self, value: Any) -> None:
        Task.backend.fset(self, value)

    def run_failed(self) -> None:
        """The run raised (or asked to retry): its error is stored masked from now on."""
        setattr(self.request, FAILED_FLAG, True)  # type: ignore[attr-defined]

    def masked(self, text: str) -> str:
        """``text`` with the running job's secrets masked."""
        return task_secrets(self).text(text)

    def describe(self, exc: BaseException) -> str:
        """An error as a dead letter or the store's events show it: type and text, masked."""
        return self.masked(f"{type(exc).__name__}: {exc}")[:MAX_ERROR_CHARS]


class RedactingBackend:
    """A result backend that stores a failure's exception and traceback masked; everything
    else goes to ``backend`` as it is."""

    def __init__(self, backend: Any, secrets: Secrets) -> None:
        self._backend = backend
        self._secrets = secrets

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def _error(self, exc: Any) -> Any:
        return self._secrets.exception(exc) if isinstance(exc, BaseException) else exc

    def _traceback(self, traceback: Any) -> Any:
        return self._secrets.text(traceback) if isinstance(traceback, str) else traceback

    def mark_as_failure(self, task_id: str, exc: Any, traceback: Any = None, *args: Any,
                        **kwargs: Any) -> Any:
        return self._backend.mark_as_failure(task_id, self._error(exc),
                                             self._traceback(traceback), *args, **kwargs)

    def mark_as_retry(self, task_id: str, exc: Any, traceback: Any = None, *args: Any,
                      **kwargs: Any) -> Any:
        return self._backend.mark_as_retry(task_id, self._error(exc),
                                           self._traceback(traceback), *args, **kwargs)

    def store_result(self, task_id: str, result: Any, state: str, traceback: Any = None,
                     *args: Any, **kwargs: Any) -> Any:
        if state in states.EXCEPTION_STATES:
            result, traceback = self._error(result), self._traceback(traceback)
        return self._backend.store_result(task_id, result, state, traceback, *args, **kwargs)


def redacted_backend(task: Any, backend: Any) -> Any:
    """``backend``, or, once the running task raised (the flag ReliableTask sets), a
    :class:`RedactingBackend` over it masking the request's secrets."""
    request = task.request
    if not getattr(request, FAILED_FLAG, False):
        return backend
    secrets = task_secrets(task, request)
    return RedactingBackend(backend, secrets) if secrets else backend


class RedactingRequest(Request):
    """Celery's request, its task's ``redact`` values masked in its task events (error,
    traceback, return value, arguments) and in ``celery inspect`` listings (scheduled,
    reserved, active, query_task), by name and wherever a string quotes them."""

    @property
    def secrets(self) -> Secrets:
        """The secrets of this request's arguments, worked out once."""
        found = self.__dict__.get("_fairqueue_secrets")
        if found is None:
            fields = getattr(self.task, "redact", ()) or ()
            try:
                found = Secrets.of_call(self.task.run, self.args, self.kwargs, fields) \
                    if fields else NO_SECRETS
            except Exception:  # a body that does not decode: nothing to find in it
                found = NO_SECRETS
            self.__dict__["_fairqueue_secrets"] = found
        return found

    def send_event(self, type: str, **fields: Any) -> None:
        secrets = self.secrets
        if secrets:
            fields = {k: _masked(secrets, k, v) if k in DATA_FIELDS else v
                      for k, v in fields.items()}
        super().send_event(type, **fields)

    def info(self, safe: bool = False) -> dict[str, Any]:
        shown: dict[str, Any] = super().info(safe)
        fields = getattr(self.task, "redact", ()) or ()
        if not fields:
            return shown
        if safe:
            shown["args"], shown["kwargs"] = (self.secrets.text(str(shown["args"])),
                                              self.secrets.text(str(shown["kwargs"])))
        else:
            shown["args"], shown["kwargs"] = masked_call(self.task.run, self.args or (),
                                                         self.kwargs or {}, fields)
        return shown


def _masked(secrets: Secrets, field: str, value: Any) -> Any:
    if field == "result" and isinstance(value, str):  # a repr Celery may have cut short
        return secrets.cut_text(value)
    return secrets.data(value)
