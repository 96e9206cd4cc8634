"""A line chart for the admin panel as inline SVG (the what-if preview's
waits over time), drawn like ``charts``: pure, escaped here, marked safe by
the caller."""
from __future__ import annotations

import html
from typing import Callable, Collection, Mapping, Optional, Sequence

from gpuspawner.service.panel.charts import _fmt, _nice_max, close, colours_for, frame


def lines(labels: Sequence[str], series: Mapping[str, Sequence[Optional[float]]], *,
          colours: Mapping[str, str] | None = None, dashed: Collection[str] = (),
          width: int = 760, height: int = 260, unit: str = "", title: str = "",
          fmt: Callable[[float], str] = _fmt) -> str:
    """One line per series over the buckets ``labels`` (a value at each
    bucket's middle; None: no value there, the line breaks). Series named in
    ``dashed`` are drawn dashed; ``fmt`` writes the axis values."""
    n = len(labels)
    colours = colours or colours_for(series)
    left, right, top, bottom = 56, 190, 12, 36
    pw, ph = width - left - right, height - top - bottom
    values = [v for vs in series.values() for v in vs if v is not None]
    ymax = _nice_max(max(values, default=0.0))

    def x(k: float) -> float:
        return left + pw * (k + 0.5) / max(n, 1)

    def y(v: float) -> float:
        return top + ph - ph * v / ymax

    out = frame(width, height, title, unit, left, top, pw, ph, ymax, fmt)
    for i, (name, vs) in enumerate(series.items()):
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        for run in _runs(vs):
            points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in run)
            if len(run) == 1:
                (k, v), = run
                out.append(f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="2.5" '
                           f'fill="{colours[name]}"/>')
            else:
                out.append(f'<polyline points="{points}" fill="none" stroke="{colours[name]}" '
                           f'stroke-width="2"{dash}><title>{html.escape(name)}</title></polyline>')
        ly = top + 14 * i + 8
        out.append(f'<line x1="{left + pw + 10}" x2="{left + pw + 30}" y1="{ly - 3}" '
                   f'y2="{ly - 3}" stroke="{colours[name]}" stroke-width="2"{dash}/>'
                   f'<text x="{left + pw + 36}" y="{ly + 1}" font-size="11" class="legend">'
                   f"{html.escape(name)}</text>")
    return close(out, labels, x, height, (left, top, pw, ph),
                 "" if values else "nothing waited in this period")


def _runs(values: Sequence[Optional[float]]) -> list[list[tuple[int, float]]]:
    """The stretches of consecutive values that are there."""
    runs: list[list[tuple[int, float]]] = []
    for k, v in enumerate(values):
        if v is None:
            if runs and runs[-1]:
                runs.append([])
            continue
        if not runs:
            runs.append([])
        runs[-1].append((k, v))
    return [r for r in runs if r]
