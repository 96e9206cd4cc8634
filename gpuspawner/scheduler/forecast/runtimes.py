"""Learned run times: how long a workload will really run.

Time limits are upper bounds that users overstate (2-10x, or a blanket
maximum). Start estimates need the expected end of running work, so this
remembers, per key (the user and what they ran, then the user, then
everyone), the run times of finished work: as fractions of the time limit
for work that had one, in seconds for work without. A prediction is the
median of the most specific history with enough samples, conditioned on
what is already known (a workload that has run 3 h will not end before 3 h).

Pure and in memory: the service feeds it from its database at start and on
every exit, the simulator from its replay.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from ..model import Workload

# Samples kept per key, and for everyone.
PER_KEY = 64
GLOBAL = 512
# Fewer samples than this and a key defers to the next, less specific one.
MIN_SAMPLES = 5


@dataclass
class _History:
    """The last ``size`` samples, also kept sorted for quantiles."""

    size: int
    recent: deque = field(default_factory=deque)
    ordered: list = field(default_factory=list)

    def add(self, value: float) -> None:
        self.recent.append(value)
        bisect.insort(self.ordered, value)
        if len(self.recent) > self.size:
            old = self.recent.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]

    def conditional_median(self, at_least: float) -> Optional[float]:
        """The median of the samples >= ``at_least``, or None if none are."""
        i = bisect.bisect_left(self.ordered, at_least)
        n = len(self.ordered) - i
        if n <= 0:
            return None
        return self.ordered[i + n // 2]


def workload_keys(w: Workload, what: str = "") -> tuple[str, ...]:
    """The keys a workload's run time is learned under, most specific first."""
    user = w.user or w.team
    return (f"{user}\0{w.kind}\0{what}", f"{user}\0{w.kind}", f"\0{w.kind}")


class RuntimeModel:
    """Run-time history per key: fractions of the limit, and seconds."""

    def __init__(self) -> None:
        self._fractions: dict[str, _History] = {}
        self._seconds: dict[str, _History] = {}

    def record(self, keys: tuple[str, ...], run_s: float, time_limit: Optional[float]) -> None:
        """A workload ran ``run_s`` seconds in all (``keys``: ``workload_keys``)."""
        if run_s <= 0:
            return
        if time_limit:
            store, value = self._fractions, min(1.0, run_s / time_limit)
        else:
            store, value = self._seconds, run_s
        for i, key in enumerate(keys):
            size = GLOBAL if i == len(keys) - 1 else PER_KEY
            store.setdefault(key, _History(size)).add(value)

    def predict(self, keys: tuple[str, ...], time_limit: Optional[float],
                elapsed: float = 0.0) -> Optional[float]:
        """Expected total run time (seconds) of work that has run ``elapsed``
        so far; None when nothing bounds it (no limit and no history). The
        most specific history that has seen a run this long answers."""
        if time_limit:
            fraction = self._conditional(self._fractions, keys, elapsed / time_limit)
            if fraction is None:
                if not self._known(self._fractions, keys):
                    return time_limit
                # Ran longer than anything seen: halfway to its limit.
                return elapsed + (time_limit - elapsed) / 2
            return max(elapsed, min(time_limit, fraction * time_limit))
        seconds = self._conditional(self._seconds, keys, elapsed)
        # None also when it ran longer than anything seen: no honest figure.
        return None if seconds is None else max(elapsed, seconds)

    @staticmethod
    def _conditional(store: dict[str, _History], keys: tuple[str, ...],
                     at_least: float) -> Optional[float]:
        for key in keys:
            h = store.get(key)
            if h is not None and len(h.ordered) >= MIN_SAMPLES:
                value = h.conditional_median(at_least)
                if value is not None:
                    return value
        return None

    @staticmethod
    def _known(store: dict[str, _History], keys: tuple[str, ...]) -> bool:
        return any(len(store[k].ordered) >= MIN_SAMPLES for k in keys if k in store)
