"""Issue 47: which failures say "slow down", for how long, and what a hostile Retry-After
becomes; the Retry-After parsing's edge values with Hypothesis. Clock and random injected."""

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_fairqueue import ConfigurationError, RetryableError, RetryPolicy, SlowDown
from celery_fairqueue.retry import parse_retry_after, retry_after, slow_down_cause

from .test_retry import HTTPError, HTTPStatusError

TEN_YEARS = 10 * 365 * 86400
policy = RetryPolicy(base=1.0, cap=8.0, random=lambda low, high: high, clock=lambda: 1000.0)


@pytest.mark.parametrize(("exc", "cause"), [
    (HTTPError(429, {"Retry-After": "3"}), "429"),
    (HTTPError(503, {"Retry-After": "3"}), "503"),
    (RetryableError("busy", retry_after=3), "RetryableError"),
    (SlowDown(3), "SlowDown"),
])
def test_a_429_or_503_with_retry_after_and_a_retry_after_of_our_own_say_slow_down(exc, cause):
    verdict = policy.after_failure(exc, 1, longest=86400, longest_slow_down=3600)
    assert (verdict.retry_in, verdict.slow_down, verdict.cause) == (3.0, 3.0, cause)


@pytest.mark.parametrize("exc", [
    HTTPError(429), HTTPStatusError(503), HTTPError(500, {"Retry-After": "3"}),
    RetryableError("busy"), TimeoutError()])
def test_a_failure_without_a_retry_after_or_of_another_status_retries_only_its_job(exc):
    verdict = policy.after_failure(exc, 1, longest=86400, longest_slow_down=3600)
    assert verdict.retry_in is not None and verdict.slow_down is None


def test_a_retry_after_of_ten_years_is_cut_to_fairqueue_max_slow_down():
    for value in (str(TEN_YEARS), TEN_YEARS, math.inf, "inf", 10 ** 400):
        verdict = policy.after_failure(HTTPError(429, {"Retry-After": value}), 1,
                                       longest=86400, longest_slow_down=3600)
        assert verdict.slow_down == 3600 and verdict.retry_in == 86400, value


@pytest.mark.parametrize("value", ["soon", "-5", -5, "-0.5", "nan", float("nan"), "", "3 s"])
def test_a_non_numeric_or_negative_retry_after_is_treated_as_none_with_a_warning(value, caplog):
    with caplog.at_level(logging.WARNING, logger="celery_fairqueue.retry"):
        verdict = policy.after_failure(HTTPError(429, {"Retry-After": value}), 3,
                                       longest=86400, longest_slow_down=3600)
    assert verdict.slow_down is None and verdict.retry_in == 4.0  # the backoff: min(8, 2**2)
    assert "Retry-After" in caplog.text and "ignored" in caplog.text
    assert "soon" not in caplog.text  # the value comes from outside: not logged


def test_slow_down_names_its_scope_and_refuses_an_unknown_one():
    assert SlowDown(5, scope="queue").scope == "queue" and SlowDown(5).scope is None
    with pytest.raises(ConfigurationError, match="scope"):
        SlowDown(5, scope="provider")
    assert slow_down_cause(ValueError()) is None


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_number_of_seconds_parses_to_none_or_a_non_negative_wait(value):
    for given_value in (value, repr(value)):
        seconds = parse_retry_after(given_value, 0.0)
        if math.isnan(value) or value < 0:
            assert seconds is None
        else:
            assert seconds is not None and seconds >= 0


@given(st.one_of(st.text(max_size=40), st.integers(), st.floats(), st.none(), st.booleans(),
                 st.binary(max_size=20)))
def test_any_retry_after_gives_a_verdict_within_both_caps(value):
    exc = HTTPError(429, {"Retry-After": value})
    verdict = policy.after_failure(exc, 1, longest=86400, longest_slow_down=3600)
    assert verdict.retry_in is not None and 0 <= verdict.retry_in <= 86400
    assert verdict.slow_down is None or 0 < verdict.slow_down <= 3600
    assert (verdict.slow_down is None) == (not retry_after(exc, 1000.0))


def scoped(scope: str):
    from celery_fairqueue.slowdown import ScopedSlowDown

    return type("Task", (ScopedSlowDown,), {"name": "t", "slow_down_scope": scope})()


def test_the_task_option_chooses_the_scope_and_slow_down_scope_job_retries_only_the_job():
    from celery_fairqueue.protocol import SLOW_DOWN_OPTION

    exc = HTTPError(429, {"Retry-After": "7"})
    verdict = policy.after_failure(exc, 1, longest=86400, longest_slow_down=3600)
    assert scoped("account").slow_down(exc, verdict) == {
        "countdown": 7.0, SLOW_DOWN_OPTION: ("account", 7.0, "429")}
    assert scoped("queue").slow_down(exc, verdict)[SLOW_DOWN_OPTION][0] == "queue"
    assert scoped("job").slow_down(exc, verdict) == {}
    own = SlowDown(7, scope="queue")
    mine = policy.after_failure(own, 1, longest=86400, longest_slow_down=3600)
    assert scoped("account").slow_down(own, mine)[SLOW_DOWN_OPTION][0] == "queue"


def test_an_unknown_slow_down_scope_is_refused_when_the_task_is_bound():
    from celery import Celery

    from celery_fairqueue import FairTask

    app = Celery("scopes", set_as_current=False)
    with pytest.raises(ConfigurationError, match=r"task .*slow_down_scope must be one of"):
        @app.task(base=FairTask, shared=False, slow_down_scope="provider")
        def send(account_id):
            return account_id

        send.bind(app)
