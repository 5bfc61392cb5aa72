"""Account limits as specifications: rates in Celery's format, windows in the account's zone."""

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from celery_fairqueue.errors import InvalidLimitError
from celery_fairqueue.limits import AccountLimit

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
