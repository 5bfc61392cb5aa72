"""Masking of job arguments wherever they are shown: admin, CLI, events, dead letters, logs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from celery import current_task

from .idempotency import bound_arguments

REDACTED = "***"
# Shorter values are not masked in log text: replacing "1" or "ab" everywhere would garble it.
MIN_MASKED_CHARS = 3


def redact_arguments(args: Sequence[Any], kwargs: dict[str, Any],
                     fields: Iterable[str]) -> dict[str, Any]:
    """``{"args": [...], "kwargs": {...}}`` with the named keyword arguments and dict keys masked.

    Positional arguments are masked only where a dict inside them has a named key: bind them to
    their parameter names first (``idempotency.bound_arguments``) to mask them by name.
    """
    hidden = set(fields)
    return {"args": [_mask(a, hidden) for a in args],
            "kwargs": {k: REDACTED if k in hidden else _mask(v, hidden)
                       for k, v in kwargs.items()}}


def masked_reprs(run: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                 fields: Iterable[str]) -> tuple[str, str]:
    """Celery's ``argsrepr`` and ``kwargsrepr`` of a call, its ``fields`` masked by name.

    Celery logs and sends these (task events, Flower) in place of the arguments themselves.
    """
    hidden = set(fields)
    names = list(bound_arguments(run, args, {}))
    shown_args = [REDACTED if name in hidden else _mask(value, hidden)
                  for name, value in zip(names, args, strict=False)]
    return repr(shown_args), repr(redact_arguments((), kwargs, hidden)["kwargs"])


def secret_values(named: dict[str, Any], fields: Iterable[str]) -> set[str]:
    """The texts of the values of ``fields`` (also as keys of nested dicts) in ``named``."""
    hidden, found = set(fields), set()

    def collect(value: Any, secret: bool) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                collect(item, secret or key in hidden)
        elif isinstance(value, list | tuple):
            for item in value:
                collect(item, secret)
        elif secret and value is not None and len(str(value)) >= MIN_MASKED_CHARS:
            found.add(str(value))

    collect(named, False)
    return found


class RedactingFilter(logging.Filter):
    """Masks, in what is logged while a task runs, the values of the task's ``redact`` arguments.

    Celery logs a failed task's exception text and traceback, and a succeeded task's return
    value; any of them may quote an argument (``ValueError: no such lead jane@example.com``).
    ``install`` adds this filter to Celery's task trace logger and to this package's task logger;
    add it to your own handlers to cover your tasks' log lines too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _running_task_secrets()
        if not secrets:
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = _mask_text(record.getMessage(), secrets), None
        if record.exc_text:
            record.exc_text = _mask_text(record.exc_text, secrets)
        data = getattr(record, "data", None)  # Celery's structured copy of the failure
        if isinstance(data, dict):
            record.data = {k: _mask_text(v, secrets) if isinstance(v, str) else v
                           for k, v in data.items()}
        return True


def _running_task_secrets() -> set[str]:
    task = current_task
    fields = getattr(task, "redact", ()) if task else ()
    if not fields:
        return set()
    request = task.request
    try:
        named = bound_arguments(task.run, request.args or (), request.kwargs or {})
    except TypeError:  # arguments that do not fit the signature: mask what has a name
        named = dict(request.kwargs or {})
    return secret_values(named, fields)


def _mask_text(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):  # "ann@x.io" before "ann"
        text = text.replace(secret, REDACTED)
    return text


def _mask(value: Any, hidden: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in hidden else _mask(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, hidden) for v in value]
    return value
