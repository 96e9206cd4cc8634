"""Fair sharing: decayed usage and weighted dominant shares.

A team's share of a pool is what it holds now plus its decayed average use
over the recent past (half-life configurable), over the pool's capacity.
Its dominant share is the largest of those across pools, divided by its
weight (DRF over pools). Including current holdings makes the order react
within a cycle; the decayed history keeps a team that just finished a large
run from jumping the queue again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping


@dataclass
class DecayedUsage:
    """Exponentially decayed integral of GPUs held, in GPU-seconds."""

    value: float = 0.0
    updated_at: float = 0.0
    rate: int = 0  # GPUs held since updated_at

    def at(self, now: float, half_life: float) -> float:
        dt = max(0.0, now - self.updated_at)
        if dt == 0.0:
            return self.value
        decay = 0.5 ** (dt / half_life)
        return self.value * decay + self.rate * (half_life / math.log(2)) * (1.0 - decay)

    def advance(self, now: float, half_life: float, rate: int) -> None:
        """Bring the integral up to ``now``; from now on ``rate`` GPUs are held."""
        self.value = self.at(now, half_life)
        self.updated_at = max(self.updated_at, now)
        self.rate = rate

    def average_gpus(self, now: float, half_life: float) -> float:
        """Decayed average number of GPUs held (steady use of N GPUs -> N)."""
        return self.at(now, half_life) * math.log(2) / half_life


def dominant_share(team_usage: Mapping[str, float], capacity: Mapping[str, int],
                   weight: float) -> float:
    """max over pools of usage / capacity, divided by the team's weight."""
    share = 0.0
    for pool, used in team_usage.items():
        cap = capacity.get(pool, 0)
        if cap > 0:
            share = max(share, used / cap)
    return share / weight if weight > 0 else math.inf
