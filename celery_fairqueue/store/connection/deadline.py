"""A producer's deadline on Redis's clock, so that an enqueue that raised is never stored.

A command sent to a Redis that stalls (paused, swapping, a slow network) runs when Redis comes
back, long after the producer gave up on it. So each enqueue carries a deadline, and its script
stores nothing when Redis's clock says it arrived later (enqueue.lua); the producer raises only
once that deadline has passed on Redis's clock: then the script either ran in time (and its
reply, or its retry's, said so) or will refuse.

Why Redis's clock read once, and not the producer's wall clock: the scripts already live on
Redis's clock (buckets, delays, leases), and a producer's clock may be off by any amount (the
clock-skew tests skew workers by minutes). :class:`RedisClock` reads ``TIME`` once (again after a
failure, and every :data:`RESYNC_SECONDS`) and follows it on the local monotonic clock, which
cannot step. Redis's reading was taken somewhere within the round trip, so Redis's time now is
known within the round trip's length, plus the rates of the two clocks drifting apart (NTP
slews a clock by 500 ppm at most): :meth:`RedisClock.bounds` gives both ends, the deadline is
set from the upper one and waited out on the lower one. A step of Redis's own clock backwards
(a bad NTP setup) is the one thing this cannot see.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: How long a reading of Redis's clock is followed before it is read again.
RESYNC_SECONDS = 60.0
#: How fast two clocks may drift apart: NTP's most, 500 ppm, doubled.
DRIFT = 1e-3
#: A floor under the uncertainty: timers and the script's own TIME call.
SLACK = 0.005


class RedisClock:
    """Redis's clock (``read`` returns its ``TIME`` in seconds) followed locally."""

    def __init__(self, read: Callable[[], float],
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._read = read
        self._monotonic = monotonic
        self._sleep = sleep
        self._reading: tuple[float, float, float] | None = None  # sent, Redis's time, replied

    def bounds(self, resync: bool = True) -> tuple[float, float]:
        """The earliest and the latest Redis's time can be now. Reads TIME when it must (a
        Redis that does not answer raises, before anything that could store is sent); not
        when ``resync`` is False, so waiting out a deadline never asks Redis."""
        now = self._monotonic()
        if self._reading is None or (resync and now - self._reading[0] > RESYNC_SECONDS):
            sent = self._monotonic()
            redis_time = self._read()
            replied = now = self._monotonic()
            self._reading = (sent, redis_time, replied)
        sent, redis_time, replied = self._reading
        drift = DRIFT * (now - sent) + SLACK
        return redis_time + (now - replied) - drift, redis_time + (now - sent) + drift

    def deadline(self, seconds: float) -> float:
        """A deadline ``seconds`` from now on Redis's clock, from its latest possible time."""
        return self.bounds()[1] + seconds

    def wait_past(self, deadline: float) -> None:
        """Return once Redis's clock is past ``deadline`` for certain."""
        if self._reading is None:  # no reading: nothing was sent with a deadline
            return
        while True:
            earliest = self.bounds(resync=False)[0]
            if earliest > deadline:
                return
            self._sleep(min(deadline - earliest + SLACK, 1.0))

    def forget(self) -> None:
        """Read TIME again next time (after a failure: Redis may have restarted or failed
        over to a server whose clock differs)."""
        self._reading = None
