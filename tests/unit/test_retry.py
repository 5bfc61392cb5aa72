"""Retry classification and backoff, as a specification; random source and clock injected."""

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from celery_fairqueue import ConfigurationError, PermanentError, RetryableError, RetryPolicy
from celery_fairqueue.retry import http_status, parse_retry_after


class Response:
    def __init__(self, status_code, headers=None):
        self.status_code = status_code
        self.headers = headers or {}


class HTTPError(Exception):
    """The requests shape: the status is on ``.response``."""

    def __init__(self, status, headers=None):
        super().__init__(f"HTTP {status}")
        self.response = Response(status, headers)


class HTTPStatusError(Exception):
    """An exception carrying the status itself."""

    def __init__(self, status):
        super().__init__(status)
        self.status_code = status


class ConnectError(Exception):
    """httpx names its connection failure so, without subclassing the builtin."""


class LeadMissing(Exception):
    pass


POLICY = RetryPolicy(base=1.0, cap=60.0, max_attempts=5, permanent=(LeadMissing,))


@pytest.mark.parametrize("exc", [
    HTTPError(408), HTTPError(429), HTTPError(500), HTTPError(503), HTTPStatusError(502),
    TimeoutError(), TimeoutError(), ConnectionRefusedError(), ConnectError("refused"),
    RetryableError("later"),
])
def test_transient_failures_are_retryable(exc):
    assert POLICY.classify(exc).retryable


@pytest.mark.parametrize("exc", [
    HTTPError(400), HTTPError(401), HTTPError(404), HTTPStatusError(422),
    PermanentError("lead deleted"), LeadMissing(),
])
def test_client_errors_and_listed_types_are_permanent(exc):
    assert not POLICY.classify(exc).retryable


def test_reason_says_why():
    assert POLICY.classify(HTTPError(503)).reason == "HTTP 503"
    assert "permanent" in POLICY.classify(HTTPError(404)).reason
    assert POLICY.classify(PermanentError("lead deleted")).reason == "permanent: lead deleted"


def test_unclassified_exceptions_follow_the_policy():
    # the contract changed in round 2: by default only transient failures retry
    assert not RetryPolicy().classify(KeyError("x")).retryable
    assert RetryPolicy(unknown="retry").classify(KeyError("x")).retryable


def test_listed_types_override_the_built_in_rules():
    policy = RetryPolicy(retryable=(LeadMissing,), permanent=(TimeoutError,))
    assert policy.classify(LeadMissing()).retryable
    assert not policy.classify(TimeoutError()).retryable


def test_http_status_ignores_non_http_numbers():
    class Odd(Exception):
        status = "busy"

    assert http_status(Odd()) is None
    assert http_status(HTTPError(418)) == 418


def test_backoff_is_full_jitter_within_bounds():
    calls = []

    def uniform(low, high):
        calls.append((low, high))
        return high

    policy = RetryPolicy(base=2.0, cap=20.0, random=uniform)
    delays = [policy.backoff(n) for n in range(6)]
    assert calls == [(0.0, 2.0), (0.0, 4.0), (0.0, 8.0), (0.0, 16.0), (0.0, 20.0), (0.0, 20.0)]
    assert delays == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]


def test_backoff_draws_anywhere_in_the_window():
    lows = RetryPolicy(base=2.0, cap=20.0, random=lambda low, high: low)
    assert lows.backoff(3) == 0.0


def test_retry_after_seconds_wins_over_backoff():
    policy = RetryPolicy(random=lambda low, high: high)
    assert policy.delay(0, RetryableError(retry_after=30)) == 30.0
    assert policy.delay(0, HTTPError(429, {"Retry-After": "12"})) == 12.0


def test_retry_after_http_date_is_relative_to_the_clock():
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC).timestamp()
    policy = RetryPolicy(clock=lambda: now)
    later = format_datetime(datetime(2026, 12, 2, 12, 1, 30, tzinfo=UTC), usegmt=True)
    assert policy.delay(0, HTTPError(503, {"Retry-After": later})) == 90.0


def test_malformed_retry_after_falls_back_to_backoff():
    policy = RetryPolicy(base=1.0, random=lambda low, high: high)
    assert policy.delay(2, HTTPError(503, {"Retry-After": "soon-ish"})) == 4.0
    assert parse_retry_after("-5", 0) is None  # issue 47: negative is none (the backoff)


def test_attempts_are_counted_including_the_first_run():
    policy = RetryPolicy(max_attempts=3)
    assert not policy.exhausted(2)
    assert policy.exhausted(3)


@pytest.mark.parametrize("options", [{"base": 0}, {"base": 10, "cap": 5}, {"max_attempts": 0},
                                     {"unknown": "maybe"}])
def test_nonsense_policies_are_refused(options):
    with pytest.raises(ConfigurationError):
        RetryPolicy(**options)
