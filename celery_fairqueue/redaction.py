"""Masking of job arguments wherever they are shown or sent: admin, CLI, task events, the result
backend's errors, ``celery inspect`` listings, dead letters and logs.

Two masks, applied together: *by name* (a ``redact`` argument, or a dict key of that name, shows
as ``***``), and *by value* (the text of a redacted value is replaced wherever it appears in a
string: an error message, a traceback, a return value's repr, another argument), as
:class:`Secrets` does. The worker's side (events, backend, listings) is in worker/redacted.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from celery import current_task
from celery.utils.serialization import create_exception_cls

from .idempotency import positional_names

REDACTED = "***"
# Shorter values are not masked in text: replacing "1" or "ab" everywhere would garble it.
MIN_MASKED_CHARS = 3
# made once: json.dumps with options builds an encoder on every call
_JSON_ASCII, _JSON_UNICODE = json.JSONEncoder(), json.JSONEncoder(ensure_ascii=False)
#: What Celery's truncating repr (``celery.utils.saferepr``) puts where it cut a string short.
CUT_MARK = "..."


class Secrets:
    """The texts a job must never show: its ``redact`` values, as they are written and as a
    repr, Celery's saferepr or JSON quotes them inside a longer string.

    A value made only of asterisks is no secret beside the mask, and is left out (masking it
    would never end)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms = {form for value in values for form in _quoted_forms(value)}
        self.forms = sorted((f for f in forms if len(f) >= MIN_MASKED_CHARS and f.strip("*")),
                            key=len, reverse=True)  # "ann@x.io" before "ann"

    @classmethod
    def of_named(cls, named: dict[str, Any], fields: Iterable[str]) -> Secrets:
        """The secrets of a call's arguments by name (see :func:`secret_values`)."""
        return cls(secret_values(named, fields))

    @classmethod
    def of_call(cls, run: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                fields: Iterable[str]) -> Secrets:
        """The secrets of a call of ``run``: its arguments by the parameter each binds to
        (positional ones past the signature have none), keyword ones by their own name."""
        fields = tuple(fields)
        if not fields:
            return NO_SECRETS
        args = args or ()
        try:
            names = positional_names(run, len(args))
        except (TypeError, ValueError):  # a callable with no signature to read
            names = []
        by_name = [{name: value} for name, value in zip(names, args, strict=False)]
        return cls.of_named({"": by_name, **(kwargs or {})}, fields)

    def __bool__(self) -> bool:
        return bool(self.forms)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by the mask, until none is left (a mask next to
        the rest of a value can spell the value again: ``xx**`` masking ``x**``)."""
        changed = bool(self.forms)
        while changed:
            changed = False
            for form in self.forms:
                if form in text:
                    text, changed = text.replace(form, REDACTED), True
        return text

    def cut_text(self, text: str) -> str:
        """:meth:`text`, and the beginning of a secret that a truncating repr cut short
        (``'sent to ann@exa...'``) masked too."""
        text = self.text(text)
        end = text.find(CUT_MARK)
        while end != -1:
            start = min((s for f in self.forms if (s := _cut_start(text, end, f)) is not None),
                        default=None)
            if start is not None:
                text = text[:start] + REDACTED + text[end:]
                end = start + len(REDACTED)
            end = text.find(CUT_MARK, end + 1)
        return text

    def data(self, value: Any) -> Any:
        """``value`` with the secrets masked in every string inside it (dict keys too)."""
        if not self.forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return tuple(self.data(v) for v in value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        return value

    def exception(self, exc: BaseException) -> BaseException:
        """``exc``, or a copy of it of the same type whose arguments, attributes and text have
        the secrets masked (what a result backend stores: its type and arguments). An
        exception that cannot be copied so becomes one of the same name and module holding
        its masked text."""
        if not self.forms:
            return exc
        try:
            shown = str(exc)
        except Exception:
            shown = f"<{type(exc).__name__}>"
        try:
            attributes = getattr(exc, "__dict__", {})
            args, masked_attributes = self.data(exc.args), self.data(attributes)
            if args == exc.args and masked_attributes == attributes and \
                    self.text(shown) == shown:
                return exc
            copy = type(exc).__new__(type(exc), *args)
            copy.args = args
            copy.__dict__.update(masked_attributes)
            if self.text(str(copy)) == str(copy):
                return copy.with_traceback(exc.__traceback__)
        except Exception:
            pass
        kind = create_exception_cls(type(exc).__qualname__, type(exc).__module__)
        return kind(self.text(shown)).with_traceback(exc.__traceback__)


#: The secrets of a task without ``redact`` (shared: a Secrets is never changed).
NO_SECRETS = Secrets()


def _quoted_forms(value: str) -> set[str]:
    """``value`` as written, and as Python's repr (either quote), Celery's saferepr (quotes
    escaped, nothing else) and JSON write it between quotes."""
    return {value, repr(value)[1:-1], repr(value + '"')[1:-2], value.replace("'", "\\'"),
            _JSON_ASCII.encode(value)[1:-1], _JSON_UNICODE.encode(value)[1:-1]}


def _cut_start(text: str, end: int, form: str) -> int | None:
    """Where, before ``end``, the longest beginning (of at least MIN_MASKED_CHARS) of ``form``
    that ends at ``end`` starts; None when none does."""
    start = text.find(form[:MIN_MASKED_CHARS], max(0, end - len(form) + 1), end)
    while start != -1:
        if end - start >= MIN_MASKED_CHARS and form.startswith(text[start:end]):
            return start
        start = text.find(form[:MIN_MASKED_CHARS], start + 1, end)
    return None


def redact_arguments(args: Sequence[Any], kwargs: dict[str, Any],
                     fields: Iterable[str]) -> dict[str, Any]:
    """``{"args": [...], "kwargs": {...}}`` with the named keyword arguments and dict keys
    masked, and their values masked wherever else a string quotes them.

    Positional arguments are masked only where a dict inside them has a named key: bind them to
    their parameter names first (``idempotency.bound_arguments``) to mask them by name.
    """
    hidden = set(fields)
    secrets = Secrets.of_named({"": list(args), **kwargs}, hidden)
    return secrets.data({"args": [_mask(a, hidden) for a in args],
                         "kwargs": _mask_named(kwargs, hidden)})


def masked_call(run: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                fields: Iterable[str]) -> tuple[list[Any], dict[str, Any]]:
    """A call's arguments as they may be shown: ``fields`` masked by parameter name (and as
    dict keys), and their values wherever another argument quotes them."""
    hidden = set(fields)
    try:
        names = positional_names(run, len(args))
    except (TypeError, ValueError):  # a callable with no signature to read
        names = []
    shown_args = [REDACTED if name in hidden else _mask(value, hidden)
                  for name, value in zip(names, args, strict=False)]
    shown_args += [_mask(value, hidden) for value in args[len(shown_args):]]
    secrets = Secrets.of_call(run, args, kwargs, hidden)
    return secrets.data(shown_args), secrets.data(_mask_named(kwargs, hidden))


def masked_reprs(run: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                 fields: Iterable[str]) -> tuple[str, str]:
    """Celery's ``argsrepr`` and ``kwargsrepr`` of a call, masked as :func:`masked_call` masks.

    Celery logs and sends these (task events, Flower) in place of the arguments themselves.
    """
    shown_args, shown_kwargs = masked_call(run, args, kwargs, fields)
    return repr(shown_args), repr(shown_kwargs)


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


def task_secrets(task: Any, request: Any = None) -> Secrets:
    """The secrets of ``task``'s running request (or ``request``), worked out once a request:
    what its ``redact`` arguments hold. None for a task without ``redact``."""
    fields = tuple(getattr(task, "redact", ()) or ())
    if not fields:
        return NO_SECRETS
    request = task.request if request is None else request
    secrets = getattr(request, "fairqueue_secrets", None)
    if not isinstance(secrets, Secrets):
        secrets = Secrets.of_call(task.run, request.args or (), request.kwargs or {}, fields)
        request.fairqueue_secrets = secrets
    return secrets


class RedactingFilter(logging.Filter):
    """Masks, in what is logged while a task runs, the values of the task's ``redact`` arguments.

    Celery logs a failed task's exception text and traceback, and a succeeded task's return
    value; any of them may quote an argument (``ValueError: no such lead jane@example.com``).
    ``install`` adds this filter to Celery's task trace logger and to this package's task logger;
    add it to your own handlers to cover your tasks' log lines too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        task = current_task
        secrets = task_secrets(task) if task else NO_SECRETS
        if not secrets:
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = secrets.cut_text(record.getMessage()), None
        if record.exc_text:
            record.exc_text = secrets.text(record.exc_text)
        data = getattr(record, "data", None)  # Celery's structured copy of the failure
        if isinstance(data, dict):
            record.data = {k: secrets.cut_text(v) if isinstance(v, str) else v
                           for k, v in data.items()}
        return True


def _mask_named(kwargs: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    return {k: REDACTED if k in hidden else _mask(v, hidden) for k, v in kwargs.items()}


def _mask(value: Any, hidden: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in hidden else _mask(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, hidden) for v in value]
    return value
