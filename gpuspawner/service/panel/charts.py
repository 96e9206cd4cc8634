"""Charts for the admin panel as inline SVG, drawn on the server: no
JavaScript library to load, the same picture in every browser and in tests.

Pure functions from numbers to markup strings (escaped here, marked safe by
the caller).
"""
from __future__ import annotations

import html
from typing import Callable, Mapping, Sequence

# Colour-blind-safe categorical palette (Okabe-Ito), then greys.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000", "#999999", "#666666")


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _nice_max(value: float) -> float:
    """The smallest 1/2/5 × 10^k at or above ``value`` (an axis top)."""
    if value <= 0:
        return 1.0
    k = 1.0
    while k * 10 <= value:
        k *= 10
    while k > value * 10:
        k /= 10
    for m in (1, 2, 5, 10):
        if m * k >= value:
            return m * k
    return 10 * k


def _fmt(v: float) -> str:
    """An axis or bar value: whole numbers plain, small ones with the
    digits that matter (0.0034, 2.5, 120)."""
    if v == int(v) or v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}".rstrip("0").rstrip(".")


def frame(width: int, height: int, title: str, unit: str, left: float, top: float,
          pw: float, ph: float, ymax: float, fmt: Callable[[float], str] = _fmt) -> list[str]:
    """The opening of a chart: the svg element, its title, gridlines at 0,
    half and the top of a plot ``pw`` × ``ph`` at (``left``, ``top``) with
    their values, and the unit along the y axis."""
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
           f'width="100%" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{html.escape(title or unit)}</title>"]
    for frac in (0, 0.5, 1):
        yy = top + ph - ph * frac
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                   f'stroke="#ccc" stroke-width="1"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{html.escape(fmt(ymax * frac))}</text>')
    if unit:
        out.append(f'<text x="12" y="{top + ph / 2:.0f}" font-size="11" text-anchor="middle" '
                   f'transform="rotate(-90 12 {top + ph / 2:.0f})">{html.escape(unit)}</text>')
    return out


def close(out: list[str], labels: Sequence[str], x: Callable[[int], float], height: int,
          plot: tuple[float, float, float, float], empty: str = "", anchor: str = "middle") -> str:
    """The end of a chart: the first, middle and last bucket labels along the
    x axis, ``empty`` in the middle of the plot (left, top, width, height)
    when there is nothing to draw, and the closing tag."""
    n = len(labels)
    for k in sorted({0, n // 2, n - 1}) if n else ():
        out.append(f'<text x="{x(k):.1f}" y="{height - 12}" font-size="11" '
                   f'text-anchor="{anchor}">{html.escape(labels[k])}</text>')
    if empty:
        left, top, pw, ph = plot
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" font-size="13" '
                   f'text-anchor="middle">{html.escape(empty)}</text>')
    out.append("</svg>")
    return "".join(out)


def colours_for(names) -> dict[str, str]:
    """One colour per name, the same on every chart of a page."""
    return {name: colour(i) for i, name in enumerate(sorted(names))}


def stacked_area(labels: Sequence[str], series: Mapping[str, Sequence[float]], *,
                 width: int = 760, height: int = 260, unit: str = "GPU-hours",
                 title: str = "", colours: Mapping[str, str] | None = None) -> str:
    """One band per series, stacked in the given order. Each bucket is drawn
    flat across its width (the value is a total over the bucket, not a
    reading at a point); ``labels`` name the buckets' starts."""
    n = len(labels)
    colours = colours or colours_for(series)
    left, right, top, bottom = 56, 150, 12, 36
    pw, ph = width - left - right, height - top - bottom
    totals = [sum(vs[k] for vs in series.values()) for k in range(n)]
    ymax = _nice_max(max(totals, default=0.0))

    def x(k: float) -> float:
        return left + pw * k / max(n, 1)

    def y(v: float) -> float:
        return top + ph - ph * v / ymax

    out = frame(width, height, title, unit, left, top, pw, ph, ymax)
    base = [0.0] * n
    for i, (name, values) in enumerate(series.items()):
        upper = [base[k] + values[k] for k in range(n)]
        top_edge = [p for k in range(n) for p in ((x(k), y(upper[k])), (x(k + 1), y(upper[k])))]
        bottom_edge = [p for k in reversed(range(n))
                       for p in ((x(k + 1), y(base[k])), (x(k), y(base[k])))]
        d = " ".join(f"{px:.1f},{py:.1f}" for px, py in top_edge + bottom_edge)
        total = sum(values)
        out.append(f'<polygon points="{d}" fill="{colours[name]}" fill-opacity="0.85">'
                   f"<title>{html.escape(name)}: {_fmt(total)} {html.escape(unit)}</title></polygon>")
        ly = top + 14 * i + 8
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 8}" width="10" height="10" '
                   f'fill="{colours[name]}"/><text x="{left + pw + 26}" y="{ly + 1}" '
                   f'font-size="11" class="legend">{html.escape(name)}</text>')
        base = upper
    return close(out, labels, x, height, (left, top, pw, ph),
                 "" if series else "no usage in this period", anchor="start")


def bars(items: Sequence[tuple[str, float]], *, width: int = 760, unit: str = "GPU-hours",
         title: str = "", note: Mapping[str, str] | None = None,
         colours: Mapping[str, str] | None = None) -> str:
    """Horizontal bars, one per (label, value), longest scaled to the width.
    ``note`` adds text after a bar's value (a cost, say)."""
    colours = colours or colours_for(label for label, _ in items)
    row, left, right = 24, 140, 200
    height = max(1, len(items)) * row + 8
    vmax = max((v for _, v in items), default=0.0) or 1.0
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title or unit)}</title>']
    for i, (label, value) in enumerate(items):
        w = (width - left - right) * value / vmax
        yy = 4 + i * row
        extra = f" · {note[label]}" if note and label in note else ""
        out.append(f'<text x="{left - 8}" y="{yy + 15}" font-size="12" text-anchor="end">'
                   f"{html.escape(label)}</text>"
                   f'<rect x="{left}" y="{yy + 3}" width="{w:.1f}" height="{row - 8}" '
                   f'fill="{colours[label]}"/><text x="{left + w + 6:.1f}" y="{yy + 15}" '
                   f'font-size="12">{_fmt(value)} {html.escape(unit)}{html.escape(extra)}</text>')
    if not items:
        out.append(f'<text x="{width / 2}" y="20" font-size="13" text-anchor="middle">'
                   f"no usage in this period</text>")
    out.append("</svg>")
    return "".join(out)


def heat(utilization_pct: float | None) -> str:
    """A cell colour for a GPU's utilisation: pale blue (idle) to deep red
    (busy); grey when it is unknown."""
    if utilization_pct is None:
        return "#d9d9d9"
    u = max(0.0, min(100.0, utilization_pct)) / 100
    # from hsl(210, 70%, 90%) to hsl(0, 75%, 45%)
    hue, sat, light = 210 - 210 * u, 70 + 5 * u, 90 - 45 * u
    return f"hsl({hue:.0f}, {sat:.0f}%, {light:.0f}%)"


def text_colour(utilization_pct: float | None) -> str:
    return "#fff" if utilization_pct is not None and utilization_pct >= 60 else "#111"
