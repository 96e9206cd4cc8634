"""How many replicas a deployment wants: pure, tested by a table.

Replicas follow the requests in flight (averaged over a short window, so
one burst does not flap them): ``ceil(in_flight / target_per_replica)``,
between ``min_replicas`` and ``max_replicas``. A deployment without GPUs and
with ``scale_to_zero_after`` goes to zero replicas after that long without a
request; the first request starts one again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ScalePolicy:
    min_replicas: int = 1
    max_replicas: int = 1
    target_in_flight: float = 4.0
    scale_to_zero_after: Optional[float] = None  # seconds idle; only without GPUs
    gpus: int = 0


def desired_replicas(p: ScalePolicy, in_flight_avg: float, idle_for: float) -> tuple[int, str]:
    if p.scale_to_zero_after is not None and p.gpus == 0 and p.min_replicas == 0 \
            and in_flight_avg == 0 and idle_for >= p.scale_to_zero_after:
        return 0, f"no request for {idle_for:.0f} s: scaled to zero"
    want = math.ceil(in_flight_avg / p.target_in_flight) if in_flight_avg > 0 else 0
    n = min(p.max_replicas, max(p.min_replicas, want, 1))
    why = (f"{in_flight_avg:.1f} requests in flight, {p.target_in_flight:g} per replica"
           if want > p.min_replicas else f"at least {max(p.min_replicas, 1)}")
    if want > p.max_replicas:
        why = f"{in_flight_avg:.1f} requests in flight wants {want}; capped at max {p.max_replicas}"
    return n, why


def split(total: int, weights: dict[int, float]) -> dict[int, int]:
    """Replicas per revision: in proportion to traffic, at least one for any
    revision that gets traffic (a canary of 10 % still needs a replica)."""
    live = {r: w for r, w in weights.items() if w > 0}
    if total <= 0 or not live:
        return {r: 0 for r in weights}
    whole = sum(live.values())
    out = {r: max(1, round(total * w / whole)) for r, w in live.items()}
    return {r: out.get(r, 0) for r in weights}
