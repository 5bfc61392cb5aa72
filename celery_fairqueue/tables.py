"""Plain-text tables and short durations for the terminal (both CLIs) and the admin.

No colours and no terminal probing: the output is piped to files and pagers as often as it is
read on a screen.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

ELLIPSIS = "…"
DEFAULT_MAX_WIDTH = 60


def truncate(value: str, width: int) -> str:
    """``value`` on one line, cut to ``width`` characters with an ellipsis."""
    line = " ".join(value.split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + ELLIPSIS


def cell(value: Any) -> str:
    """How a value reads in a table: "-" for None, two decimals for a float."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render(headers: Sequence[str], rows: Iterable[Sequence[Any]],
           max_width: int = DEFAULT_MAX_WIDTH) -> str:
    """Aligned columns under ``headers``: numbers right-aligned, long text truncated."""
    rows = list(rows)
    texts = [[truncate(cell(value), max_width) for value in row] for row in rows]
    numeric = [bool(rows) and all(isinstance(row[i], int | float) for row in rows)
               for i in range(len(headers))]
    widths = [max([len(h), *(len(row[i]) for row in texts)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w)
                 for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, texts)])


def duration(seconds: float | None) -> str:
    """A compact duration for a column: ``45s``, ``12m 05s``, ``3h 20m``, ``2d 04h``."""
    if seconds is None:
        return "-"
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def ago(timestamp: float | None, now: float | None = None) -> str:
    """How long ago an epoch timestamp was, as :func:`duration` writes it."""
    if not timestamp:
        return "-"
    return duration((time.time() if now is None else now) - timestamp)


def moment(timestamp: float | None) -> str:
    """An epoch timestamp as UTC date and time to the second."""
    if not timestamp:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
