"""Retry classification and backoff: which failures are worth another attempt, and when.

Retryable: timeouts, connection errors, HTTP 408, 429 and 5xx (the status is looked up on the
exception or its ``.response``, as requests and httpx raise them). Permanent: other HTTP 4xx,
:class:`PermanentError`, and the types given as ``permanent``. Anything else follows ``unknown``,
permanent unless the policy says ``unknown="retry"``.
The delay is full jitter, ``uniform(0, min(cap, base * 2**attempt))``; a ``Retry-After`` (seconds
or an HTTP date, on the exception or the response headers) wins over it. A failure that says
"slow down" (HTTP 429 or 503 with a ``Retry-After``, a ``RetryableError`` with ``retry_after``,
:class:`SlowDown`) also gives its verdict the scope's pause (``FailureVerdict.slow_down``), which
a fair task applies to its account or queue (task.py, enqueue.lua).

Where it is decided: here (``RetryPolicy.verdict``), and acted on by the task (task.py).
"""

from __future__ import annotations

import logging
import math
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from .errors import ConfigurationError, FairqueueError

logger = logging.getLogger(__name__)

#: What a slow-down holds back: the account's jobs in the job's queue, every job of the queue
#: (a provider-wide answer), or only the job that got it (no scope: a plain retry).
SLOW_DOWN_SCOPES = ("account", "queue", "job")
#: HTTP statuses whose ``Retry-After`` asks to slow down.
SLOW_DOWN_STATUSES = (429, 503)

# exception class names of HTTP and network clients that mean "try again" (requests, httpx,
# urllib3, aiohttp, redis-py), matched by name so none of them has to be installed
TRANSIENT_CLASS_NAMES = frozenset({
    "Timeout", "TimeoutError", "TimeoutException", "ConnectTimeout", "ReadTimeout",
    "WriteTimeout", "PoolTimeout", "ConnectionError", "ConnectError", "NetworkError",
    "RemoteProtocolError", "ProtocolError", "ServerDisconnectedError", "ClientConnectionError",
})


class PermanentError(FairqueueError):
    """Raise to dead-letter the job at once: retrying cannot help (lead deleted, bad input)."""


class RetryableError(FairqueueError):
    """Raise to retry; ``retry_after`` seconds (or an HTTP date string) overrides the backoff."""

    def __init__(self, message: str = "", retry_after: float | str | None = None) -> None:
        super().__init__(message or "retryable failure")
        self.retry_after = retry_after


class SlowDown(RetryableError):
    """Raise when the provider says "slow down": the job is retried in ``seconds``, and its
    ``scope`` (default: the task's ``slow_down_scope``) waits until then with it."""

    def __init__(self, seconds: float | str, scope: str | None = None, message: str = "") -> None:
        if scope is not None and scope not in SLOW_DOWN_SCOPES:
            raise ConfigurationError(f"SlowDown scope={scope!r} must be one of "
                                     f"{', '.join(SLOW_DOWN_SCOPES)}")
        super().__init__(message or "the provider asked to slow down", retry_after=seconds)
        self.scope = scope


@dataclass(frozen=True)
class Classification:
    retryable: bool
    reason: str


def http_status(exc: BaseException) -> int | None:
    """The HTTP status carried by ``exc`` or its ``.response``, if any."""
    for holder in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status"):
            value = getattr(holder, attr, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
    return None


def _headers(exc: BaseException) -> Any:
    for holder in (exc, getattr(exc, "response", None)):
        headers = getattr(holder, "headers", None)
        if headers is not None and hasattr(headers, "get"):
            return headers
    return None


def parse_retry_after(value: Any, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: a number of seconds or an HTTP date."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _seconds(float(min(value, 2**53)))
    if isinstance(value, float):
        return _seconds(value)
    text = str(value).strip()
    try:
        return _seconds(float(text))
    except (ValueError, OverflowError):
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def _seconds(value: float) -> float | None:
    """A wait in seconds; NaN or a negative number means nothing (the backoff applies). An
    infinite or huge one stays as it is here: the task cuts it to ``fairqueue_max_retry_delay``
    (and a slow-down to ``fairqueue_max_slow_down``)."""
    return None if math.isnan(value) or value < 0 else value


def retry_after(exc: BaseException, now: float) -> float | None:
    """The seconds ``exc`` asks to wait: its ``retry_after``, else the ``Retry-After`` header of
    it or its response; None when it says none, or says it in a form that is not a number of
    seconds or an HTTP date (negative, NaN, text): a warning says so, and the backoff applies."""
    value = getattr(exc, "retry_after", None)
    if value is None:
        headers = _headers(exc)
        value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    seconds = parse_retry_after(value, now)
    if seconds is None:  # the value itself is not logged: it comes from outside
        logger.warning("fairqueue: %s carries a Retry-After that is neither a non-negative "
                       "number of seconds nor an HTTP date; ignored (the backoff applies)",
                       type(exc).__name__)
    return seconds


def slow_down_cause(exc: BaseException) -> str | None:
    """What makes ``exc`` a "slow down" answer, as the console names it (``429``, ``503``,
    ``SlowDown``, ``RetryableError``), or None when it is not one (its Retry-After, if any,
    is the job's own: a 500 with Retry-After retries only the job)."""
    if isinstance(exc, RetryableError):
        return type(exc).__name__
    status = http_status(exc)
    return str(status) if status in SLOW_DOWN_STATUSES else None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError, socket.timeout)):
        return True
    return any(cls.__name__ in TRANSIENT_CLASS_NAMES for cls in type(exc).__mro__)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing job is retried: ``max_attempts`` runs in all, full-jitter backoff.

    ``retryable`` and ``permanent`` are exception types that override the built-in rules;
    ``unknown`` decides for exceptions no rule covers: "permanent" (the default: an input that
    fails the same way every time should not wait minutes for its dead letter, and plain Celery
    retries nothing unless asked) or "retry". ``random`` and
    ``clock`` can be injected for tests.
    """

    base: float = 5.0
    cap: float = 900.0
    max_attempts: int = 8
    retryable: tuple[type[BaseException], ...] = ()
    permanent: tuple[type[BaseException], ...] = ()
    unknown: str = "permanent"
    random: Callable[[float, float], float] = field(default=random.uniform, compare=False)
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ConfigurationError(f"RetryPolicy needs 0 < base <= cap, got base={self.base} "
                                     f"cap={self.cap}")
        if self.max_attempts < 1:
            raise ConfigurationError(f"RetryPolicy max_attempts={self.max_attempts} must be >= 1")
        if self.unknown not in ("retry", "permanent"):
            raise ConfigurationError(f"RetryPolicy unknown={self.unknown!r} must be 'retry' or "
                                     "'permanent'")

    def classify(self, exc: BaseException) -> Classification:
        """Retryable or permanent, with the reason a person reads in the dead-letter queue."""
        name = type(exc).__name__
        if isinstance(exc, PermanentError):
            return Classification(False, f"permanent: {exc}")
        if isinstance(exc, RetryableError):
            return Classification(True, f"retryable: {exc}")
        if self.permanent and isinstance(exc, self.permanent):
            return Classification(False, f"{name} is listed as permanent")
        if self.retryable and isinstance(exc, self.retryable):
            return Classification(True, f"{name} is listed as retryable")
        status = http_status(exc)
        if status is not None:
            if status in (408, 429) or status >= 500:
                return Classification(True, f"HTTP {status}")
            if 400 <= status < 500:
                return Classification(False, f"HTTP {status} (client error, permanent)")
        if is_transient(exc):
            return Classification(True, f"{name} (timeout or connection error)")
        return Classification(self.unknown == "retry", f"{name} (unclassified: {self.unknown})")

    def backoff(self, attempt: int) -> float:
        """Full jitter, ``uniform(0, min(cap, base * 2**attempt))``; attempt 0: first retry."""
        return self.random(0.0, min(self.cap, self.base * 2 ** min(attempt, 64)))

    def delay(self, attempt: int, exc: BaseException | None = None) -> float:
        """Seconds before the next attempt: ``Retry-After`` if the failure says so, else backoff."""
        seconds = retry_after(exc, self.clock()) if exc is not None else None
        return self.backoff(attempt) if seconds is None else seconds

    def exhausted(self, attempts: int) -> bool:
        """True once ``attempts`` runs have failed and no more are allowed."""
        return attempts >= self.max_attempts

    def after_failure(self, exc: BaseException, attempts: int, gave_up: bool = False,
                      longest: float = math.inf,
                      longest_slow_down: float = math.inf) -> FailureVerdict:
        """What a failed attempt leads to: a retry after a delay (cut to ``longest``, the
        ``fairqueue_max_retry_delay``), or a dead letter with the reason a person reads; for a
        "slow down" answer also the pause of its scope (cut to ``longest_slow_down``, the
        ``fairqueue_max_slow_down``). ``attempts`` counts this one; ``gave_up``: the task's
        own ``max_retries`` ran out."""
        verdict = self.classify(exc)
        if verdict.retryable and not self.exhausted(attempts) and not gave_up:
            seconds = retry_after(exc, self.clock())
            delay = self.backoff(attempts - 1) if seconds is None else seconds
            cause = slow_down_cause(exc) if seconds else None
            return FailureVerdict(verdict.reason, cut_delay(delay, longest),
                                  cut_delay(seconds, longest_slow_down) if cause and seconds
                                  else None, cause)
        if verdict.retryable or gave_up:
            return FailureVerdict(f"gave up after {attempts} attempts: {verdict.reason}")
        return FailureVerdict(verdict.reason)


@dataclass(frozen=True)
class FailureVerdict:
    """A failed attempt's fate: retried in ``retry_in`` seconds, or (None) dead-lettered; a
    "slow down" answer's scope waits ``slow_down`` seconds."""

    reason: str
    retry_in: float | None = None
    slow_down: float | None = None  # seconds the failure's scope waits (a "slow down" answer)
    cause: str | None = None  # what said so (slow_down_cause)


def cut_delay(seconds: float, longest: float) -> float:
    """``seconds`` cut to ``longest``; not a finite number: the longest."""
    return min(max(seconds, 0.0), longest) if math.isfinite(seconds) else longest
