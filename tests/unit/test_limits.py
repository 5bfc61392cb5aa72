"""Account limits as specifications: rates in Celery's format, windows in the account's zone."""

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from hypothesis import given
from hypothesis import strategies as st

from celery_fairqueue import set_account_limit
from celery_fairqueue.errors import InvalidLimitError
from celery_fairqueue.limits import MAX_WEIGHT, AccountLimit

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str, tz=BERLIN) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


@pytest.mark.parametrize("rate,per_second", [("10/s", 10.0), ("120/m", 2.0), ("3600/h", 1.0),
                                             ("5", 5.0)])
def test_rates_use_celerys_format(rate, per_second):
    assert AccountLimit(rate=rate).per_second == pytest.approx(per_second)


@pytest.mark.parametrize("fields,named", [
    ({"rate": "ten/s"}, "rate"), ({"rate": "10/week"}, "rate"), ({"rate": "0/s"}, "rate"),
    ({"burst": 0}, "burst"), ({"concurrency": 0}, "concurrency"),
    ({"concurrency": 1.5}, "concurrency"), ({"window": "9-17"}, "window"),
    ({"window": "25:00-26:00"}, "window"), ({"window": "09:00-09:00"}, "window"),
    ({"tz": "Mars/Olympus"}, "tz"),
])
def test_malformed_limits_name_the_field(fields, named):
    with pytest.raises(InvalidLimitError, match=named):
        AccountLimit(**fields)


def test_pack_is_what_the_claim_script_reads():
    assert AccountLimit(rate="10/s", burst=10, concurrency=2).pack(0) == "10 10 2 -"
    assert AccountLimit().pack(0) == "0 1 0 -"


def test_window_schedule_is_in_the_accounts_time_zone():
    limit = AccountLimit(window="09:00-17:00", tz="Europe/Berlin")
    spans = limit.schedule(at("2026-06-10T12:00"))
    assert spans[0] == (at("2026-06-10T09:00"), at("2026-06-10T17:00"))
    assert spans[1] == (at("2026-06-11T09:00"), at("2026-06-11T17:00"))
    assert len(spans) == 8


def test_window_follows_daylight_saving_changes():
    limit = AccountLimit(window="09:00-17:00", tz="Europe/Berlin")
    spans = limit.schedule(at("2026-03-28T12:00"))  # DST starts on the 29th
    opens = [datetime.fromtimestamp(o, BERLIN).hour for o, _ in spans]
    assert opens == [9] * len(spans)
    assert spans[1][0] - spans[0][0] == 23 * 3600  # the night of the change is an hour short


def test_window_over_midnight_closes_the_next_day():
    limit = AccountLimit(window="22:00-06:00", tz="UTC")
    utc = ZoneInfo("UTC")
    spans = limit.schedule(at("2026-06-10T23:00", utc))
    assert spans[0] == (at("2026-06-10T22:00", utc), at("2026-06-11T06:00", utc))
    assert all(close - open_ == 8 * 3600 for open_, close in spans)


def test_window_until_midnight():
    limit = AccountLimit(window="18:00-24:00", tz="UTC")
    utc = ZoneInfo("UTC")
    [first, *_] = limit.schedule(at("2026-06-10T19:00", utc))
    assert first == (at("2026-06-10T18:00", utc), at("2026-06-11T00:00", utc))


def test_limit_round_trips_through_json():
    limit = AccountLimit(rate="10/s", burst=10, concurrency=2, window="09:00-17:00",
                         tz="Europe/Berlin")
    assert AccountLimit.from_json(limit.to_json()) == limit


@given(st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_WEIGHT + 1),
                 st.just(10 ** 400), st.floats(allow_nan=True, allow_infinity=True),
                 st.booleans(), st.text(max_size=30), st.none()))
def test_a_weight_that_is_not_a_whole_number_from_1_to_the_maximum_is_refused(weight):
    with pytest.raises(InvalidLimitError, match="weight"):
        AccountLimit(weight=weight)


@given(st.text(max_size=10_000), st.sampled_from([0, -1, 2.5, True, 10 ** 30]))
def test_set_account_limit_names_the_account_and_the_setting(account, weight):
    """The weight is refused before the store is asked: no Redis needed."""
    with pytest.raises(InvalidLimitError) as raised:
        set_account_limit(Celery("limits"), account, weight=weight)
    assert "weight" in str(raised.value)
    assert repr(account[:200]) in str(raised.value)


def test_a_weight_is_packed_after_the_window_and_left_out_when_it_is_1():
    assert AccountLimit(weight=4).pack(0) == "0 1 0 - 4"
    assert AccountLimit(weight=1).pack(0) == AccountLimit().pack(0) == "0 1 0 -"
    assert AccountLimit.from_json(AccountLimit(weight=7).to_json()).weight == 7
    assert AccountLimit.from_json(AccountLimit(rate="1/s").to_json()).weight == 1
    assert "weight" not in AccountLimit(rate="1/s").to_json()


def test_a_days_rate_is_read_beside_celerys_seconds_minutes_and_hours():
    assert AccountLimit(rate="100/d").per_second == pytest.approx(100 / 86400)
    assert AccountLimit(rate="10/m").per_second == pytest.approx(10 / 60)


@pytest.mark.parametrize("rate", ["nan/s", "inf/s", "1e999/m", "x/d", "5/w", "-1/d"])
def test_a_rate_that_is_not_a_finite_positive_number_is_refused_naming_the_field(rate):
    with pytest.raises(InvalidLimitError, match="rate"):
        AccountLimit(rate=rate)


def test_a_number_is_still_a_rate_a_second_as_celery_reads_it():
    assert AccountLimit(rate=5.0).per_second == 5.0  # type: ignore[arg-type]
