"""A reshard waits for the fleet: no account moves before every worker and producer that may
still act on the store's old layout has read the move.

Each process records every reading of the layout at the store's home (read_layout.lua): what it
read, when, and until when it may act on it without reading again (its
``fairqueue_shards_check_interval`` on; a process reads again before its next call after
that). Once the reshard has announced ``"S>N"``, a process is waited for while it has read
an older layout and its reading has not lapsed; one that stops, or only enqueues now and then,
lapses and is not waited for: it reads the move before its next call. Then a margin for the
calls already under way (each bounded by ``fairqueue_enqueue_timeout`` or a socket timeout).
Only the processes of a version that records its readings are seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..connection.connect import AnyClient
from ..formats.keys import Keys
from ..formats.records import LayoutSeen

#: How often the reshard looks at the readings while it waits.
LOOK_SECONDS = 0.1


@dataclass(frozen=True)
class Reading:
    """One process's last reading of the store's layout, and until when it may act on it."""

    process_id: str
    until: float  # Redis time
    seen: LayoutSeen
    #: the layout format it read (Keys.format_seen); None: a process of an earlier version
    layout_format: str | None = None


def readings(client: AnyClient, home: Keys) -> list[Reading]:
    """The readings of the processes whose reading may not have lapsed yet."""
    until: list[tuple[str, float]] = client.zrange(  # type: ignore[assignment]
        home.layout_readers, 0, -1, withscores=True)
    if not until:
        return []
    ids = [process_id for process_id, _ in until]
    seen, formats = client.hmget(home.layout_seen, ids), client.hmget(home.format_seen, ids)
    return [Reading(str(process_id), lapses, LayoutSeen.parse(raw),
                    None if read is None else str(read))
            for (process_id, lapses), raw, read in zip(until, seen, formats, strict=True)
            if raw is not None]


def wait_for_fleet(client: AnyClient, home: Keys, layout: str, *, timeout: float,
                   margin: float, server_time: Callable[[], float],
                   say: Callable[[str], None],
                   behind_of: Callable[[Reading], bool] | None = None,
                   waiting: str = "") -> list[str]:
    """Wait until no process may act on a layout other than ``layout`` (or, ``behind_of``,
    one that it says is behind: ``waiting`` says for what), and ``margin`` on; after
    ``timeout``, return what names the processes still behind (else [])."""
    give_up = time.monotonic() + timeout
    told = False
    lags = behind_of or (lambda reading: reading.seen.layout != layout)
    while True:
        now = server_time()
        behind = [reading for reading in readings(client, home)
                  if lags(reading) and reading.until > now]
        if not behind:
            break
        if time.monotonic() >= give_up:
            return [f"{r.seen.name} (read {r.layout_format if behind_of else r.seen.layout!r}"
                    f"; reads again within {r.until - now:.0f} s)" for r in behind]
        if not told:
            told = True
            say(f"waiting for {len(behind)} worker(s) and producer(s) "
                f"{waiting or f'to read {layout!r}'} "
                f"(at most {max(r.until for r in behind) - now:.0f} s)")
        time.sleep(min(LOOK_SECONDS, max(0.0, give_up - time.monotonic())))
    time.sleep(margin)
    return []
