"""Fair sharing: decayed usage and weighted dominant shares.

A team's usage of a pool is the mean of what it holds now and what it held
on average over the recent past (decayed with a configurable half-life).
Its share of the pool is its usage above its nominal quota over the pool's
capacity; its dominant share is the largest across pools, divided by its
weight (DRF over pools). Current holdings make the order react within a
cycle; the decayed history keeps a team that just finished a large run from
jumping the queue again.

Where a pool's nodes count CPUs and memory, they are resources of the
dominant share too (DRF proper): the team's CPUs over the pool's CPUs, its
memory over the pool's memory, under their own keys (``cpus@POOL``,
``memory@POOL``) beside the pool's GPUs. A team with no nominal quota of
them: all its use counts.
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


def cpus_key(pool: str) -> str:
    return f"cpus@{pool}"


def memory_key(pool: str) -> str:
    return f"memory@{pool}"


def usage_deltas(w, sign: int = 1) -> list[tuple[str, float]]:
    """What starting (sign -1: ending) ``w`` adds to its team's usage, per
    key: its GPU units in its pool, and the CPUs and memory it asked for on
    all its nodes (only those it asked for). Nothing without a pool."""
    if not w.pool:
        return []
    out = [(w.pool, sign * w.gpu_units)]
    if w.cpus:
        out.append((cpus_key(w.pool), sign * w.cpus * w.num_nodes))
    if w.memory:
        out.append((memory_key(w.pool), sign * w.memory * w.num_nodes))
    return out


def add_resource_capacity(capacity: dict[str, float], node, sign: int = 1) -> None:
    """Add (sign -1: take away) a healthy node's counted CPUs and memory to
    ``capacity``: ``cpus@POOL`` and ``memory@POOL`` -> the pool's."""
    if not node.healthy:
        return
    for key, amount in ((cpus_key(node.pool), node.cpus), (memory_key(node.pool), node.memory)):
        if amount:
            capacity[key] = capacity.get(key, 0.0) + sign * amount


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
