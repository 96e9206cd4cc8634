"""Fair sharing: decayed usage and weighted dominant shares.

A team's usage of a pool is the mean of what it holds now and what it held
on average over the recent past (decayed with a configurable half-life).
Its share of the pool is its usage above its nominal quota over the pool's
capacity; its dominant share is the largest across pools, divided by its
weight (DRF over pools). Current holdings make the order react within a
cycle; the decayed history keeps a team that just finished a large run from
jumping the queue again.
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
                   weight: float, nominal: Mapping[str, int] = {}) -> float:
    """max over pools of (usage above the team's nominal quota) / capacity,
    divided by the team's weight.

    Only use above nominal counts: a team's nominal quota is its entitlement,
    so a large team using its own large quota is not "ahead" of a small one
    (Kueue's fair sharing measures borrowing the same way).
    """
    share = 0.0
    for pool, used in team_usage.items():
        cap = capacity.get(pool, 0)
        if cap > 0:
            share = max(share, max(0.0, used - nominal.get(pool, 0)) / cap)
    return share / weight if weight > 0 else math.inf
