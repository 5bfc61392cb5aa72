"""A small bar chart as inline SVG, rendered on the server: no script, no chart library."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT, BOTTOM = 600, 120, 18


def throughput_svg(series: list[tuple[datetime, int, int]]) -> SafeString:
    """Jobs finished per minute (succeeded green, dead-lettered red, stacked)."""
    peak = max((ok + dead for _, ok, dead in series), default=0) or 1
    step = WIDTH / max(len(series), 1)
    usable = HEIGHT - BOTTOM - 12
    bars = []
    for n, (minute, ok, dead) in enumerate(series):
        x = n * step
        ok_h, dead_h = usable * ok / peak, usable * dead / peak
        label = f"{timezone.localtime(minute):%H:%M}: {ok} succeeded, {dead} dead"
        bars.append((x, HEIGHT - BOTTOM - ok_h, step * 0.8, ok_h, label,
                     x, HEIGHT - BOTTOM - ok_h - dead_h, step * 0.8, dead_h, label))
    rects = format_html_join(
        "", '<g><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" '
            'fill="#2e7d32"/><rect x="{}" y="{}" width="{}" height="{}" fill="#b00020"/></g>',
        ((b[4], *(f"{v:.1f}" for v in (b[0], b[1], b[2], b[3], b[5], b[6], b[7], b[8])))
         for b in bars))
    first = f"{timezone.localtime(series[0][0]):%H:%M}" if series else ""
    last = f"{timezone.localtime(series[-1][0]):%H:%M}" if series else ""
    total = sum(ok for _, ok, _ in series)
    dead_total = sum(dead for _, _, dead in series)
    return format_html(
        '<svg class="fq-chart" role="img" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        'xmlns="http://www.w3.org/2000/svg"><title>Jobs finished per minute, last hour: {t} '
        'succeeded, {d} dead-lettered</title>'
        '<line x1="0" y1="{base}" x2="{w}" y2="{base}" stroke="#999"/>{rects}'
        '<text x="0" y="{h}" font-size="11" fill="#666">{first}</text>'
        '<text x="{w}" y="{h}" font-size="11" fill="#666" text-anchor="end">{last}</text>'
        '<text x="0" y="10" font-size="11" fill="#666">peak {peak}/min</text></svg>',
        w=WIDTH, h=HEIGHT, base=HEIGHT - BOTTOM, rects=rects, first=first, last=last,
        peak=peak if any(ok + d for _, ok, d in series) else 0,
        t=total, d=dead_total)
