"""Masking of job arguments wherever they are shown: admin, CLI, events, dead letters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

REDACTED = "***"


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


def _mask(value: Any, hidden: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in hidden else _mask(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, hidden) for v in value]
    return value
