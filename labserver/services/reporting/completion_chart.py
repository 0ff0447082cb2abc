"""Completion over time, per step, as an inline SVG (no chart library): for each step of a lab, a
staircase of how many attendees had passed it at each moment since the first activity."""

from __future__ import annotations

import datetime as dt
from html import escape

from labserver.services.dashboard.room import RoomFacts

W, H = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 44, 170, 14, 30


def series(facts: RoomFacts, lab_id: str | None = None) -> dict[tuple[str, str], list[dt.datetime]]:
    """First-pass times (sorted) per step of ``lab_id`` (all labs when None)."""
    out: dict[tuple[str, str], list[dt.datetime]] = {
        key: [] for key in facts.columns if lab_id is None or key[0] == lab_id
    }
    for (_a, key), cell in facts.cells().items():
        if key in out and cell.passed_at is not None:
            out[key].append(cell.passed_at)
    for times in out.values():
        times.sort()
    return out


def _fmt(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 120 else f"{minutes:.0f} min"


def chart_svg(facts: RoomFacts, lab_id: str | None = None, *, lang: str = "en") -> str:
    data = series(facts, lab_id)
    titles = {
        (lab.id, s.id): f"{i + 1}. {s.spec.title.get(lang)}"
        for lab in facts.labs
        for i, s in enumerate(lab.steps)
    }
    starts = [r.start for r in facts.steps if r.start is not None]
    t0 = min(starts) if starts else facts.now
    span = max(60.0, (facts.now - t0).total_seconds())
    total = max(1, len(facts.attendees))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: dt.datetime) -> float:
        return LEFT + pw * min(1.0, max(0.0, (t - t0).total_seconds() / span))

    def y(n: int) -> float:
        return TOP + ph * (1 - n / total)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="completion-chart" viewBox="0 0 {W} {H}" '
        f'width="{W}" height="{H}" role="img" font-family="sans-serif" font-size="11">',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>',
    ]
    for tick in sorted({round(total * f) for f in (0.25, 0.5, 0.75, 1.0)} - {0}):
        yy = y(tick)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{tick}</text>')
    parts.append(f'<text x="{LEFT - 6}" y="{TOP + ph + 4}" text-anchor="end">0</text>')
    for frac in (0.0, 0.5, 1.0):
        xx = LEFT + pw * frac
        parts.append(f'<text x="{xx:.1f}" y="{H - 10}" text-anchor="middle">+{_fmt(span * frac / 60)}</text>')
    n = max(1, len(data))
    for i, (key, times) in enumerate(data.items()):
        color = f"hsl({int(210 - 170 * i / max(1, n - 1))},65%,45%)"
        points = [f"{LEFT:.1f},{y(0):.1f}"]
        for count, t in enumerate(times, start=1):
            xt = x(t)
            points.append(f"{xt:.1f},{y(count - 1):.1f}")
            points.append(f"{xt:.1f},{y(count):.1f}")
        points.append(f"{LEFT + pw:.1f},{y(len(times)):.1f}")
        label = escape(titles.get(key, key[1]))
        parts.append(
            f'<polyline data-step="{escape(key[0])}/{escape(key[1])}" fill="none" stroke="{color}" '
            f'stroke-width="2" points="{" ".join(points)}"><title>{label}: {len(times)}</title></polyline>'
        )
        if i < 16:
            ly = TOP + 12 + i * 14
            parts.append(
                f'<rect x="{W - RIGHT + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                f'<text x="{W - RIGHT + 24}" y="{ly + 1}">{label[:22]} ({len(times)})</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
