"""How far to trust a start estimate: learned from how earlier ones turned out.

A plan (``forecast``) cannot know what arrives after it is made: work of a
team under its quota, or of higher priority, goes ahead of what waits, and
run times vary. So each estimate's error is measured when the workload
starts, as the ratio of the real wait to the planned one (both plus a
minute, so that "now" is a wait like any other), per class of workload
(its size, and the planned wait's magnitude: now, minutes, hours, days). The range shown is the
ratios' central ``coverage`` quantiles applied to the planned wait, and the
point estimate their median: a plan that is 2x optimistic is corrected, and
the range is as wide as the errors have been, no wider.

Pure and in memory; the service rebuilds it from its database at start.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Optional

# Added to real and planned waits before taking their ratio, seconds.
SMOOTHING_S = 60.0
# Ratios kept per class.
KEEP = 400
# Fewer errors than this in a class: the next coarser class answers.
MIN_SAMPLES = 20
# Until then: (low, median, high) ratios, a plain "half to twice".
PRIOR = (0.5, 1.0, 2.0)
# Planned waits are classed by magnitude (upper bounds, seconds): errors
# differ in kind between "now", minutes, hours and days.
WAIT_CLASSES = (60.0, 600.0, 3600.0, 4 * 3600.0, 86400.0)
# Size classes by GPUs: the simulator's buckets (1, 2-4, 5-8, >8).
SIZE_CLASSES = ((1, "1"), (4, "2-4"), (8, "5-8"))


def size_class(gpus: int) -> str:
    for most, name in SIZE_CLASSES:
        if gpus <= most:
            return name
    return ">8"


@dataclass(frozen=True)
class StartRange:
    """Expected start and the range it falls in with the stated coverage
    (absolute times on the caller's clock)."""

    expected: float
    earliest: float
    latest: float
    samples: int  # how many earlier errors the range is made of (0: the prior)


class _Ratios:
    def __init__(self) -> None:
        self.recent: deque = deque()
        self.ordered: list = []

    def add(self, ratio: float) -> None:
        self.recent.append(ratio)
        bisect.insort(self.ordered, ratio)
        if len(self.recent) > KEEP:
            del self.ordered[bisect.bisect_left(self.ordered, self.recent.popleft())]

    def quantile(self, q: float) -> float:
        o = self.ordered
        return o[min(len(o) - 1, max(0, int(q * len(o))))]


class Calibration:
    def __init__(self, coverage: float = 0.8):
        if not 0 < coverage < 1:
            raise ValueError(f"coverage must be between 0 and 1, got {coverage}")
        self.coverage = coverage
        self._classes: dict[tuple, _Ratios] = {}

    @staticmethod
    def _keys(gpus: int, planned_wait: float) -> tuple[tuple, ...]:
        wait = bisect.bisect_right(WAIT_CLASSES, planned_wait)
        return ((size_class(gpus), wait), (None, wait), (None, None))

    def record(self, gpus: int, planned_wait: float, real_wait: float) -> None:
        """A workload planned to wait ``planned_wait`` s started after ``real_wait`` s."""
        ratio = (max(0.0, real_wait) + SMOOTHING_S) / (max(0.0, planned_wait) + SMOOTHING_S)
        for key in self._keys(gpus, planned_wait):
            self._classes.setdefault(key, _Ratios()).add(ratio)

    def ratios(self, gpus: int, planned_wait: float) -> tuple[tuple[float, float, float], int]:
        low_q = (1 - self.coverage) / 2
        for key in self._keys(gpus, planned_wait):
            r = self._classes.get(key)
            if r is not None and len(r.ordered) >= MIN_SAMPLES:
                return (r.quantile(low_q), r.quantile(0.5), r.quantile(1 - low_q)), \
                    len(r.ordered)
        return PRIOR, 0

    def range(self, gpus: int, now: float, planned_start: float) -> StartRange:
        planned = max(0.0, planned_start - now) + SMOOTHING_S
        (low, mid, high), samples = self.ratios(gpus, planned_start - now)

        def at(ratio: float) -> float:
            return now + max(0.0, planned * ratio - SMOOTHING_S)

        return StartRange(at(mid), at(low), at(high), samples)


def describe(seconds: float) -> str:
    """A wait as people say it: "now", "12 min", "1.5 h", "2 days"."""
    if seconds < 60:
        return "now"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{seconds / 86400:.0f} days"


def say(now: float, r: Optional[StartRange]) -> str:
    """"expected to start in ~12 min (between 5 min and 30 min)"."""
    if r is None:
        return "start time unknown"
    if r.latest - now < 60:
        return "expected to start within a minute"
    return (f"expected to start in ~{describe(max(60.0, r.expected - now))} "
            f"(between {describe(r.earliest - now)} and {describe(r.latest - now)})")
