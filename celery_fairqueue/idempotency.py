"""Business-key idempotency: a job's key is the sha256 of who it is for and what it does (its
markers, which guard the side effect, are in markers.py).

Where it is decided: the dedupe of an enqueue by business key is ``store/scripts/enqueue.lua``;
the started and done markers are written by ``store/scripts/lib/markers.lua`` (``mark_started``
at the claim, ``mark_done`` at a successful ack)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ConfigurationError, SerializationError

JobKeySpec = Sequence[str] | Callable[..., Any] | None

# made once: json.dumps with options builds an encoder on every call, and every keyed enqueue
# hashes its identity
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              allow_nan=False)


def hash_identity(parts: Sequence[Any]) -> str:
    """sha256 of canonical JSON: the same parts give the same key in any process or Python."""
    try:
        material = _CANONICAL.encode(list(parts))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"job key parts must be JSON values (no NaN or infinity): "
                                 f"{exc}") from None
    return hashlib.sha256(material.encode("ascii")).hexdigest()


@functools.lru_cache(maxsize=4096)
def _signature(run: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(run)


def _signature_of(run: Callable[..., Any]) -> inspect.Signature:
    try:
        return _signature(run)
    except TypeError:  # an unhashable callable
        return inspect.signature(run)


def bound_arguments(run: Callable[..., Any], args: Sequence[Any],
                    kwargs: dict[str, Any]) -> dict[str, Any]:
    """The task's arguments by parameter name, defaults filled in (the signature is read once
    per task; the publish path binds a job's arguments once, for its account, key and event)."""
    bound = _signature_of(run).bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def positional_names(run: Callable[..., Any], count: int) -> list[str]:
    """The parameter names that ``count`` positional arguments of a call of ``run`` bind to: a
    ``*args`` parameter's name for those past the others; fewer names than arguments when the
    call has more than ``run`` takes."""
    names: list[str] = []
    for parameter in _signature_of(run).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return names + [parameter.name] * max(0, count - len(names))
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY,
                              inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
    return names[:count]


def compute_job_key(task_name: str, account: str, spec: JobKeySpec, run: Callable[..., Any],
                    args: Sequence[Any], kwargs: dict[str, Any],
                    named: dict[str, Any] | None = None) -> str | None:
    """The business key of one job, or None when the task declares no ``job_key``.

    The task name and account are always part of the identity, so two tasks, or two tenants
    with the same lead id, never share a key. ``named``: the call's arguments bound already
    (:func:`bound_arguments` of ``args`` and ``kwargs``).
    """
    if spec is None:
        return None
    if callable(spec):
        identity = spec(*args, **kwargs)
        parts = list(identity) if isinstance(identity, (tuple, list)) else [identity]
    else:
        if named is None:
            named = bound_arguments(run, args, kwargs)
        missing = [name for name in spec if name not in named]
        if missing:
            if set(missing) <= _signature_of(run).parameters.keys():
                # the call left them out, as Python's own call would say: under
                # ``typing=False`` the job goes without a key, to fail in the worker
                # (FairTask.business_key)
                raise TypeError(f"task {task_name}: missing a required argument of its "
                                f"job_key: {missing}")
            raise ConfigurationError(
                f"task {task_name}: job_key names {missing} that are not among its arguments "
                f"{sorted(named)}")
        parts = [named[name] for name in spec]
    return hash_identity([task_name, account, *parts])
