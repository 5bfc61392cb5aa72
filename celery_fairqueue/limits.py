"""Per-account limits: token-bucket rate, burst, concurrency cap and a working-hours window.

A limit is stored twice in Redis: its configuration as given (JSON, for display and refresh),
and a packed form the claim script reads, "rate burst concurrency windows[ weight]". The weight
is the account's share of the claim when every account is backlogged (start-time fair queueing
in claim.lua: an account of weight 4 gets four turns to one of weight 1). Lua has no time
zones, so the window is turned here, with zoneinfo, into the next days' open/close instants in
epoch seconds; DST is handled by zoneinfo, and workers refresh the schedule before it runs out.

Where it is decided: the token bucket (refill, check, take) and the window in
``store/scripts/lib/limits.lua``, which ``store/scripts/claim.lua`` asks at each claim beside
the concurrency cap; a limit change applies at once through ``store/scripts/apply_limit.lua``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.utils.time import rate as parse_rate

from .errors import InvalidLimitError
from .protocol import encode_id

WINDOW_RE = re.compile(r"^(\d{2}):(\d{2})-(\d{2}):(\d{2})$")
SCHEDULE_DAYS = 8
#: The largest weight: claim.lua advances an account's virtual tag by VIRTUAL_TURN // weight
#: per job served, so up to here each step is exact to 0.1 % (see claim.lua).
MAX_WEIGHT = 1000


@dataclass(frozen=True)
class AccountLimit:
    """What an account may do: ``rate`` in Celery's format ("10/s", "100/m"), ``burst`` tokens,
    at most ``concurrency`` jobs running, only inside ``window`` ("09:00-17:00") in ``tz``,
    and ``weight`` turns of the claim to one of an account of weight 1 while both wait."""

    rate: str | None = None
    burst: float | None = None
    concurrency: int | None = None
    window: str | None = None
    tz: str | None = None
    weight: int = 1

    def __post_init__(self) -> None:
        self.validate()

    @property
    def per_second(self) -> float:
        return per_second(self.rate) if self.rate else 0.0

    def validate(self) -> None:
        """Raise :class:`InvalidLimitError` naming the field that is wrong."""
        if self.rate is not None:
            try:
                rate = per_second(self.rate)
            except (ValueError, KeyError, TypeError):
                raise InvalidLimitError(
                    f"rate {self.rate!r} is not in Celery's format, e.g. '10/s', '100/m', "
                    f"'1000/h', or a day's '100/d'") from None
            if not 0 < rate < math.inf:
                raise InvalidLimitError(f"rate {self.rate!r} must be positive")
        if self.burst is not None and self.burst < 1:
            raise InvalidLimitError(f"burst {self.burst!r} must be at least 1")
        if self.concurrency is not None and (
            not isinstance(self.concurrency, int) or self.concurrency < 1
        ):
            raise InvalidLimitError(f"concurrency {self.concurrency!r} must be an integer >= 1")
        if (isinstance(self.weight, bool) or not isinstance(self.weight, int)
                or not 1 <= self.weight <= MAX_WEIGHT):
            raise InvalidLimitError(
                f"weight {self.weight!r} must be a whole number from 1 to {MAX_WEIGHT}")
        if self.window is not None:
            parse_window(self.window)
        if self.tz is not None:
            zone(self.tz)

    def pack(self, now: float) -> str:
        """The form claim.lua reads, with the window schedule computed from ``now``."""
        burst = self.burst if self.burst is not None else 1.0
        windows = "-"
        if self.window:
            windows = ";".join(f"{o:.3f},{c:.3f}" for o, c in self.schedule(now)) or "-"
        # weight 1 is left out: the form stores held before weights, which the claim reads as 1
        weight = f" {self.weight}" if self.weight != 1 else ""
        return f"{self.per_second:.17g} {burst:.17g} {self.concurrency or 0} {windows}{weight}"

    def schedule(self, now: float, days: int = SCHEDULE_DAYS) -> list[tuple[float, float]]:
        """Open/close instants (epoch seconds) of the window that end after ``now``."""
        assert self.window
        opens, closes = parse_window(self.window)
        tzinfo = zone(self.tz or "UTC")
        today = datetime.fromtimestamp(now, tzinfo).date()
        spans = []
        for offset in range(-1, days):
            day = today + timedelta(days=offset)
            start = _instant(day, opens, tzinfo)
            end_day = day if closes > opens else day + timedelta(days=1)
            end = _instant(end_day, closes, tzinfo)
            if end > now:
                spans.append((start, end))
        return spans

    def to_json(self) -> str:
        """The limit as configured; the default weight (1) is left out, as limits stored
        before weights existed were."""
        return json.dumps({k: v for k, v in asdict(self).items()
                           if v is not None and not (k == "weight" and v == 1)}, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> AccountLimit:
        return cls(**json.loads(raw))


def per_second(rate: str) -> float:
    """Jobs a second of a rate in Celery's format (``celery.utils.time.rate``: "10/s", "100/m",
    "1000/h"), or of a day's, "100/d": providers give daily quotas, Celery has no day."""
    if isinstance(rate, str) and rate.endswith("/d"):
        return float(rate[:-2]) / 86400
    return float(parse_rate(rate))


def _instant(day: date, at: time, tzinfo: ZoneInfo) -> float:
    if at == time.max:
        return datetime.combine(day + timedelta(days=1), time(0), tzinfo).timestamp()
    return datetime.combine(day, at, tzinfo).timestamp()


def parse_window(window: str) -> tuple[time, time]:
    """``"09:00-17:00"`` -> (09:00, 17:00); a close before the open spans midnight."""
    match = WINDOW_RE.match(window)
    if not match:
        raise InvalidLimitError(f"window {window!r} must look like '09:00-17:00'")
    h1, m1, h2, m2 = map(int, match.groups())
    if h1 > 23 or m1 > 59 or m2 > 59 or h2 > 24 or (h2 == 24 and m2):
        raise InvalidLimitError(f"window {window!r} has an impossible time of day")
    opens = time(h1, m1)
    closes = time.max if h2 == 24 else time(h2, m2)
    if opens == closes:
        raise InvalidLimitError(f"window {window!r} opens and closes at the same time")
    return opens, closes


def zone(name: str) -> ZoneInfo:
    """The time zone called ``name``, or :class:`InvalidLimitError` naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidLimitError(f"tz {name!r} is not a known IANA time zone") from None


def check_queue_name(queue: object) -> None:
    """Raise :class:`InvalidLimitError` naming ``queue`` when it cannot name a queue in the
    store (not a string, empty, or over the length an id may have)."""
    try:
        encode_id(queue)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise InvalidLimitError(f"queue {str(queue)[:200]!r} cannot name a queue: {exc}") from None
