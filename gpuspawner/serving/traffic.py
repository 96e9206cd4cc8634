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

