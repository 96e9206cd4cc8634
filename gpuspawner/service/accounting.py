"""GPU-hours and cost from usage intervals: totals per group, a time series
for charts, and CSV for finance. Pure functions over plain data, so the page,
the API and the CSV are the same numbers by construction.

An interval is one attempt's hold on GPUs (a row of the usage ledger, or a
running attempt counted up to now). Only its overlap with the report's
window counts. A pool's price has a history: each price applies from the
moment it was set until the next one, so a new price never reprices usage
that happened before it.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

GROUPS = ("team", "user", "project", "pool", "kind")
HOUR = 3600.0
DAY = 86400.0
# A pool's prices per GPU-hour, oldest first: (since, price).
PriceHistory = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Interval:
    team: str
    user: str
    project: str
    pool: str
    kind: str
    gpus: int
    start: float
    end: float
    borrowed_gpus: float = 0.0

    def value(self, key: str) -> str:
        return getattr(self, key)


@dataclass
class Total:
    gpu_seconds: float = 0.0
    borrowed_gpu_seconds: float = 0.0
    cost: float = 0.0


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def check_group_by(keys: Sequence[str]) -> None:
    bad = [k for k in keys if k not in GROUPS]
    if bad or not keys:
        raise ValueError(f"unknown grouping {bad[0] if bad else ''!r}; use any of "
                         f"{', '.join(GROUPS)}")


def cost(gpus: float, a: float, b: float, history: PriceHistory) -> float:
    """What ``gpus`` GPUs held over [a, b] cost: each price from its ``since``
    until the next price (before the first one: free)."""
    out = 0.0
    for k, (since, price) in enumerate(history):
        until = history[k + 1][0] if k + 1 < len(history) else math.inf
        out += gpus * overlap(a, b, since, until) / HOUR * price
    return out


def totals(intervals: Iterable[Interval], keys: Sequence[str], start: float, end: float,
           prices: Mapping[str, PriceHistory]) -> dict[tuple, Total]:
    """GPU-seconds, borrowed GPU-seconds and cost per group inside [start, end]."""
    check_group_by(keys)
    out: dict[tuple, Total] = {}
    for i in intervals:
        seconds = overlap(i.start, i.end, start, end)
        if seconds <= 0:
            continue
        t = out.setdefault(tuple(i.value(k) for k in keys), Total())
        t.gpu_seconds += i.gpus * seconds
        t.borrowed_gpu_seconds += i.borrowed_gpus * seconds
        t.cost += cost(i.gpus, max(i.start, start), min(i.end, end), prices.get(i.pool, ()))
    return out


def rows(table: Mapping[tuple, Total], keys: Sequence[str]) -> list[dict]:
    """Report rows, biggest first, with the rounding every view shares."""
    out = [{**dict(zip(keys, key)), "gpu_seconds": round(t.gpu_seconds, 3),
            "gpu_hours": round(t.gpu_seconds / HOUR, 4),
            "borrowed_gpu_seconds": round(t.borrowed_gpu_seconds, 3),
            "cost": round(t.cost, 2)}
           for key, t in table.items()]
    out.sort(key=lambda r: (-r["gpu_seconds"], [r[k] for k in keys]))
    return out


def bucket_for(span: float) -> float:
    """A bucket size giving a readable number of points over ``span``."""
    if span <= 2 * DAY:
        return HOUR
    if span <= 62 * DAY:
        return DAY
    return 7 * DAY


def series(intervals: Iterable[Interval], key: str, start: float, end: float,
           bucket: float) -> tuple[list[float], dict[str, list[float]]]:
    """GPU-hours per bucket per group: the bucket start times and, per group,
    one value per bucket. The buckets of a group add up to its total."""
    check_group_by([key])
    n = max(1, int(-(-(end - start) // bucket)))
    starts = [start + k * bucket for k in range(n)]
    out: dict[str, list[float]] = {}
    for i in intervals:
        a, b = max(i.start, start), min(i.end, end)
        if b <= a:
            continue
        values = out.setdefault(i.value(key), [0.0] * n)
        first, last = int((a - start) // bucket), min(n - 1, int((b - start) // bucket))
        for k in range(first, last + 1):
            values[k] += i.gpus * overlap(a, b, starts[k], starts[k] + bucket) / HOUR
    return starts, dict(sorted(out.items()))


def to_csv(report_rows: Sequence[dict], keys: Sequence[str], currency: str) -> str:
    """The report as CSV: the same rounded numbers the page shows."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*keys, "gpu_hours", "gpu_seconds", "borrowed_gpu_seconds", f"cost_{currency}"])
    for r in report_rows:
        w.writerow([*(r[k] for k in keys), f"{r['gpu_hours']:.4f}", f"{r['gpu_seconds']:.3f}",
                    f"{r['borrowed_gpu_seconds']:.3f}", f"{r['cost']:.2f}"])
    return buf.getvalue()


def culled_idle_gpu_hours(culls: Iterable[Mapping]) -> tuple[int, float]:
    """From the culler's audit entries: how many GPU-holding servers it
    stopped, and the idle GPU-hours those GPUs had behind them when it did
    (GPUs × time idle), i.e. the idle time the culls put an end to."""
    count, hours = 0, 0.0
    for detail in culls:
        # GPU units (a share counts its part); entries before shares have the count.
        gpus = detail.get("gpu_units", detail.get("gpu_count")) or 0
        if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus <= 0:
            continue
        idle = detail.get("gpu_idle_s")
        count += 1
        if isinstance(idle, (int, float)):
            hours += gpus * idle / HOUR
    return count, round(hours, 4)
