"""GPU-hours, CPU-hours, memory GiB-hours and cost from usage intervals: totals per group, a time series
for charts, and CSV for finance. Pure functions over plain data, so the page,
the API and the CSV are the same numbers by construction.

An interval is one attempt's hold on GPUs (a row of the usage ledger, or a
running attempt counted up to now). Only its overlap with the report's
window counts. A pool's price has a history: each price applies from the
moment it was set until the next one, so a new price never reprices usage
that happened before it. CPUs and memory are priced per CPU-hour and per
GiB-hour (``ResourcePrices``), the same in every pool.

Storage is charged per GB-month (10^9 bytes held for 30 days) from the
measurements of each team space and dataset: each measurement's bytes are
held from when it was taken until the item's next measurement (the last one
until the end of the window), so a gap between measurements (a restart, a
stopped service) is charged at what was last measured: the data stayed on
disk. The storage price has a history as a pool's price has.
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
GB = 1e9
MONTH = 30 * DAY
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
    # CPUs and memory (GiB) it asked for, on all its nodes together.
    cpus: float = 0.0
    memory_gib: float = 0.0

    def value(self, key: str) -> str:
        return getattr(self, key)


@dataclass
class Total:
    gpu_seconds: float = 0.0
    borrowed_gpu_seconds: float = 0.0
    cost: float = 0.0
    cpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0


@dataclass(frozen=True)
class ResourcePrices:
    """What one CPU-hour and one GiB-hour of memory cost (0: not charged)."""

    cpu_hour: float = 0.0
    memory_gib_hour: float = 0.0

    def cost(self, cpu_seconds: float, memory_gib_seconds: float) -> float:
        return (cpu_seconds * self.cpu_hour + memory_gib_seconds * self.memory_gib_hour) / HOUR


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def check_group_by(keys: Sequence[str]) -> None:
    bad = [k for k in keys if k not in GROUPS]
    if bad or not keys:
        raise ValueError(f"unknown grouping {bad[0] if bad else ''!r}; use any of "
                         f"{', '.join(GROUPS)}")


def cost(amount: float, a: float, b: float, history: PriceHistory, per: float = HOUR) -> float:
    """What ``amount`` (GPUs; GB with ``per=MONTH``) held over [a, b] costs,
    prices being per ``per`` seconds: each price from its ``since`` until the
    next price (before the first one: free)."""
    out = 0.0
    for k, (since, price) in enumerate(history):
        until = history[k + 1][0] if k + 1 < len(history) else math.inf
        out += amount * overlap(a, b, since, until) / per * price
    return out


def totals(intervals: Iterable[Interval], keys: Sequence[str], start: float, end: float,
           prices: Mapping[str, PriceHistory],
           resource_prices: ResourcePrices = ResourcePrices()) -> dict[tuple, Total]:
    """GPU-seconds, borrowed GPU-seconds, CPU-seconds, memory GiB-seconds and
    cost per group inside [start, end]."""
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
        t.cpu_seconds += i.cpus * seconds
        t.memory_gib_seconds += i.memory_gib * seconds
        t.cost += resource_prices.cost(i.cpus * seconds, i.memory_gib * seconds)
    return out


@dataclass(frozen=True)
class Measurement:
    """A team space's or dataset's size from ``since`` on (``item``: e.g.
    ``space:vision``, ``dataset:imagenet``); ``team`` is charged for it."""

    team: str
    item: str
    since: float
    bytes: int


@dataclass
class StorageTotal:
    gb_seconds: float = 0.0
    cost: float = 0.0
    bytes: int = 0  # what its items held at the window's end, as last measured

    @property
    def gb_months(self) -> float:
        return self.gb_seconds / MONTH


def storage_totals(measurements: Iterable[Measurement], start: float, end: float,
                   history: PriceHistory) -> dict[str, StorageTotal]:
    """GB-seconds and cost per team inside [start, end]: each measurement's
    bytes from its ``since`` until the same item's next measurement (the last
    one: until ``end``); nothing before an item's first measurement."""
    by_item: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_item.setdefault(m.item, []).append(m)
    out: dict[str, StorageTotal] = {}
    for item in sorted(by_item):
        held = sorted(by_item[item], key=lambda m: m.since)
        for k, m in enumerate(held):
            until = held[k + 1].since if k + 1 < len(held) else math.inf
            a, b = max(m.since, start), min(until, end)
            if m.since < end and until >= end:
                out.setdefault(m.team, StorageTotal()).bytes += m.bytes
            if b <= a:
                continue
            t = out.setdefault(m.team, StorageTotal())
            t.gb_seconds += m.bytes / GB * (b - a)
            t.cost += cost(m.bytes / GB, a, b, history, per=MONTH)
    # an item gone long before the window (its last row: 0 bytes) charges nothing
    return {team: t for team, t in out.items() if t.gb_seconds or t.bytes}


def rows(table: Mapping[tuple, Total], keys: Sequence[str],
         storage: Mapping[str, StorageTotal] = {}) -> list[dict]:
    """Report rows, biggest first, with the rounding every view shares.
    Grouped by team alone, each row also has the team's storage, and its
    cost includes the storage's (a team with only storage gets a row)."""
    per_team = list(keys) == ["team"]
    if per_team:
        table = {**{(team,): Total() for team in storage}, **table}
    out = []
    for key, t in table.items():
        row = {**dict(zip(keys, key)), "gpu_seconds": round(t.gpu_seconds, 3),
               "gpu_hours": round(t.gpu_seconds / HOUR, 4),
               "borrowed_gpu_seconds": round(t.borrowed_gpu_seconds, 3),
               "cpu_hours": round(t.cpu_seconds / HOUR, 4),
               "memory_gib_hours": round(t.memory_gib_seconds / HOUR, 4),
               "cost": round(t.cost, 2)}
        if per_team:
            st = storage.get(key[0], StorageTotal())
            row.update(storage_gb_months=round(st.gb_months, 4),
                       storage_cost=round(st.cost, 2), cost=round(t.cost + st.cost, 2))
        out.append(row)
    out.sort(key=lambda r: (-r["gpu_seconds"], -r["cpu_hours"], -r.get("storage_gb_months", 0),
                            [r[k] for k in keys]))
    return out


def storage_rows(storage: Mapping[str, StorageTotal]) -> list[dict]:
    """Storage per team, biggest first (the report's ``storage.rows``)."""
    out = [{"team": team, "gb_months": round(t.gb_months, 4), "cost": round(t.cost, 2),
            "bytes": t.bytes} for team, t in storage.items()]
    out.sort(key=lambda r: (-r["gb_months"], r["team"]))
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
    """The report as CSV: the same rounded numbers the page shows (per team:
    with its storage, whose cost is part of ``cost``)."""
    storage = list(keys) == ["team"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*keys, "gpu_hours", "gpu_seconds", "borrowed_gpu_seconds", "cpu_hours",
                "memory_gib_hours",
                *(["storage_gb_months", f"storage_cost_{currency}"] if storage else []),
                f"cost_{currency}"])
    for r in report_rows:
        w.writerow([*(r[k] for k in keys), f"{r['gpu_hours']:.4f}", f"{r['gpu_seconds']:.3f}",
                    f"{r['borrowed_gpu_seconds']:.3f}", f"{r['cpu_hours']:.4f}",
                    f"{r['memory_gib_hours']:.4f}",
                    *([f"{r['storage_gb_months']:.4f}", f"{r['storage_cost']:.2f}"]
                      if storage else []),
                    f"{r['cost']:.2f}"])
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
