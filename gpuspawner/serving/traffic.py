"""Which revision and which replica a request goes to, and what the
router measured: pure, so the splitting and the rollback rule are tested
by tables."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence


class SmoothWeighted:
    """Nginx's smooth weighted round robin: with weights 80/20 the choices
    follow the ratio exactly over every 5 requests, not just on average."""

    def __init__(self):
        self.current: dict[int, float] = {}

    def choose(self, weights: Mapping[int, float]) -> Optional[int]:
        live = {k: w for k, w in weights.items() if w > 0}
        if not live:
            return None
        total = sum(live.values())
        for k in list(self.current):
            if k not in live:
                del self.current[k]
        for k, w in live.items():
            self.current[k] = self.current.get(k, 0.0) + w
        best = max(sorted(live), key=lambda k: self.current[k])
        self.current[best] -= total
        return best


def least_busy(in_flight: Mapping[str, int], ready: Sequence[str]) -> Optional[str]:
    """The ready replica with the fewest requests in flight (ties: first)."""
    return min(ready, key=lambda r: (in_flight.get(r, 0), r)) if ready else None


@dataclass
class Window:
    """Requests of one revision over the last ``seconds``: rate, errors, latency."""

    seconds: float = 60.0
    samples: deque = field(default_factory=deque)  # (time, latency_s, error)

    def add(self, now: float, latency: float, error: bool) -> None:
        self.samples.append((now, latency, error))
        self.trim(now)

    def trim(self, now: float) -> None:
        while self.samples and self.samples[0][0] < now - self.seconds:
            self.samples.popleft()

    def summary(self, now: float) -> dict:
        self.trim(now)
        n = len(self.samples)
        latencies = sorted(s[1] for s in self.samples)
        errors = sum(1 for s in self.samples if s[2])
        return {"requests": n, "rps": round(n / self.seconds, 3),
                "error_rate": round(errors / n, 4) if n else 0.0,
                "p50_ms": round(percentile(latencies, 50) * 1000, 2) if n else None,
                "p99_ms": round(percentile(latencies, 99) * 1000, 2) if n else None}


def percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return sorted_values[k]


@dataclass(frozen=True)
class RollbackRule:
    error_rate: Optional[float] = None   # e.g. 0.05: more than 5 % errors
    p99_ms: Optional[float] = None       # e.g. 500
    min_requests: int = 20               # judge only with this many canary requests


def rollback_reason(canary: dict, rule: RollbackRule) -> Optional[str]:
    """Why the canary must go, or None (also None with too few requests)."""
    if canary["requests"] < rule.min_requests:
        return None
    if rule.error_rate is not None and canary["error_rate"] > rule.error_rate:
        return (f"error rate {canary['error_rate']:.1%} over the last {canary['requests']} "
                f"requests is above the {rule.error_rate:.1%} allowed")
    if rule.p99_ms is not None and canary["p99_ms"] is not None and canary["p99_ms"] > rule.p99_ms:
        return f"p99 latency {canary['p99_ms']:.0f} ms is above the {rule.p99_ms:.0f} ms allowed"
    return None



@dataclass
class Series:
    """One revision's recent history for the live charts: requests in
    buckets of ``interval`` seconds (rate, errors, p50/p99 of each bucket)
    and the replicas seen in each, for the last ``keep`` buckets."""

    interval: float = 5.0
    keep: int = 120
    buckets: dict = field(default_factory=dict)  # bucket number -> [latencies, errors, ready, in_flight]

    def _bucket(self, now: float) -> list:
        n = int(now // self.interval)
        if n not in self.buckets:
            self.buckets[n] = [[], 0, None, None]
            for old in [k for k in self.buckets if k <= n - self.keep]:
                del self.buckets[old]
        return self.buckets[n]

    def add(self, now: float, latency: float, error: bool) -> None:
        b = self._bucket(now)
        b[0].append(latency)
        b[1] += int(error)

    def replicas(self, now: float, ready: int, in_flight: int) -> None:
        b = self._bucket(now)
        b[2] = ready if b[2] is None else max(b[2], ready)
        b[3] = in_flight if b[3] is None else max(b[3], in_flight)

    def points(self, now: float, seconds: float) -> list[dict]:
        """One point per bucket from ``now - seconds`` to now, oldest first;
        a bucket without requests has rate 0 and no latency."""
        last = int(now // self.interval)
        count = min(self.keep, max(1, math.ceil(seconds / self.interval)))
        out = []
        for n in range(last - count + 1, last + 1):
            latencies, errors, ready, in_flight = self.buckets.get(n, [[], 0, None, None])
            latencies = sorted(latencies)
            k = len(latencies)
            out.append({"t": n * self.interval, "requests": k,
                        "rps": round(k / self.interval, 3),
                        "error_rate": round(errors / k, 4) if k else 0.0,
                        "p50_ms": round(percentile(latencies, 50) * 1000, 2) if k else None,
                        "p99_ms": round(percentile(latencies, 99) * 1000, 2) if k else None,
                        "ready_replicas": ready, "in_flight": in_flight})
        return out
