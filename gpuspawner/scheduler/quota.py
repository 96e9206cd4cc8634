"""Quota arithmetic with Kueue's semantics, per pool.

A team may hold up to ``nominal + borrowing_limit`` GPUs of a pool. What it
holds above nominal is borrowed, and all borrowing in a pool must be covered
by capacity nobody owns plus what lenders let go of their idle nominal quota:

    sum(borrowed) <= unowned + sum(min(idle nominal, lending_limit))

Without lending limits this is exactly "the pool is not over-full"; with
them it is stricter, which is what a lending limit is for.

Amounts are GPU units: a share of a GPU counts its fraction (0.25 for a
quarter). Shares are 1/N with N a power of two, so the sums are exact.

CPUs and memory (``Quota.cpus``, ``Quota.memory``) are ceilings, checked
beside the GPUs: the CPUs and memory a team's running work in a pool asked
for (on each of its nodes) may not pass them. A quota without them does
not limit them.
"""
from __future__ import annotations

from typing import Mapping, Optional

from .model import NO_QUOTA, Quota, Team, Workload
from .node_load import gib

INF = float("inf")
EPS = 1e-9
# ``check``'s refusal where nobody reads why (a cycle without explanations:
# with a long queue, writing every refusal out was a twentieth of a cycle).
REFUSED = "refused by its team's quota"


def borrowed(used: float, quota: Quota) -> float:
    return max(0, used - quota.nominal)


def lendable(used: float, quota: Quota) -> float:
    idle = max(0, quota.nominal - used)
    return idle if quota.lending_limit is None else min(idle, quota.lending_limit)


def units(x: float) -> str:
    """GPU units as a person reads them: 3, 0.25, 1.5."""
    return f"{x:g}"


def describe_ceiling(quota: Quota) -> str:
    if quota.borrowing_limit is None:
        return f"nominal {quota.nominal}, no borrowing limit"
    return f"nominal {quota.nominal} + borrowing limit {quota.borrowing_limit}"


class QuotaLedger:
    """GPUs charged to each team in each pool, with the pool-wide sums the
    borrowing rule needs kept up to date incrementally (O(1) per charge)."""

    def __init__(self, capacity: Mapping[str, int], teams: Mapping[str, Team],
                 used: Mapping[tuple[str, str], float] = (),
                 resources: Mapping[tuple[str, str], tuple[float, int]] = ()):
        self.capacity = dict(capacity)
        self.teams = teams
        self.used: dict[tuple[str, str], float] = {}
        # (team, pool) -> CPUs and memory bytes its work holds.
        self.resources: dict[tuple[str, str], tuple[float, int]] = dict(resources)
        self.nominal_total: dict[str, int] = {p: 0 for p in self.capacity}
        self.borrowed_total: dict[str, float] = {p: 0 for p in self.capacity}
        self.lendable_total: dict[str, float] = {p: 0 for p in self.capacity}
        for team in teams.values():
            for pool, quota in team.quotas.items():
                if pool in self.capacity:
                    self.nominal_total[pool] += quota.nominal
                    self.lendable_total[pool] += lendable(0, quota)
        for (team, pool), gpus in dict(used).items():
            self.charge(team, pool, gpus)

    def copy(self) -> "QuotaLedger":
        new = QuotaLedger.__new__(QuotaLedger)
        new.capacity = self.capacity
        new.teams = self.teams
        new.used = dict(self.used)
        new.resources = dict(self.resources)
        new.nominal_total = self.nominal_total
        new.borrowed_total = dict(self.borrowed_total)
        new.lendable_total = dict(self.lendable_total)
        return new

    def quota(self, team: str, pool: str) -> Quota:
        t = self.teams.get(team)
        return t.quota(pool) if t is not None else NO_QUOTA

    def unowned(self, pool: str) -> int:
        return max(0, self.capacity.get(pool, 0) - self.nominal_total.get(pool, 0))

    def charge(self, team: str, pool: str, gpus: float) -> None:
        """Add (or with a negative number, remove) GPU units held by a team."""
        if gpus == 0:
            return
        quota = self.quota(team, pool)
        before = self.used.get((team, pool), 0)
        after = before + gpus
        if after < 0:
            raise ValueError(f"team {team} would hold {units(after)} GPUs of {pool}")
        self.used[(team, pool)] = after
        self.borrowed_total[pool] = (self.borrowed_total.get(pool, 0)
                                     + borrowed(after, quota) - borrowed(before, quota))
        self.lendable_total[pool] = (self.lendable_total.get(pool, 0)
                                     + lendable(after, quota) - lendable(before, quota))

    def charge_workload(self, w: Workload, sign: int = 1) -> None:
        """Charge (sign -1: give back) all a workload holds: its GPU units,
        and the CPUs and memory it asked for on each of its nodes."""
        self.charge(w.team, w.pool, sign * w.gpu_units)
        if w.cpus or w.memory:
            key = (w.team, w.pool)
            cpus, memory = self.resources.get(key, (0.0, 0))
            cpus += sign * w.cpus * w.num_nodes
            memory += sign * w.memory * w.num_nodes
            if abs(cpus) < EPS and memory == 0:
                self.resources.pop(key, None)
            else:
                self.resources[key] = (cpus, memory)

    def check_resources(self, w: Workload) -> Optional[str]:
        """None when ``w``'s CPUs and memory fit its team's quota in its
        pool beside what the team's work holds, else why not (naming CPUs
        or memory)."""
        quota = self.quota(w.team, w.pool)
        if quota.cpus is None and quota.memory is None:
            return None
        cpus, memory = self.resources.get((w.team, w.pool), (0.0, 0))
        asked_cpus, asked_memory = w.cpus * w.num_nodes, w.memory * w.num_nodes
        if quota.cpus is not None and asked_cpus and cpus + asked_cpus > quota.cpus + EPS:
            return (f"team {w.team} holds {cpus:g} of its {quota.cpus:g} {w.pool} CPUs (quota); "
                    f"this workload asks for {asked_cpus:g} CPU{'s' if asked_cpus != 1 else ''}")
        if quota.memory is not None and asked_memory and memory + asked_memory > quota.memory:
            return (f"team {w.team} holds {gib(memory)} of its {gib(quota.memory)} {w.pool} "
                    f"memory (quota); this workload asks for {gib(asked_memory)}")
        return None

    def borrowing_ok(self, pool: str) -> bool:
        return self._lending_deficit(pool) <= 0

    def _lending_deficit(self, pool: str) -> float:
        return (self.borrowed_total.get(pool, 0) - self.unowned(pool)
                - self.lendable_total.get(pool, 0))

    def breaks_lending(self, team: str, pool: str, gpus: float) -> bool:
        """Admitting ``gpus`` more for the team would leave more borrowed in
        the pool than is lent: a lender taking back nominal quota from GPUs
        that are free but not lendable."""
        before = self._lending_deficit(pool)
        self.charge(team, pool, gpus)
        after = self._lending_deficit(pool)
        self.charge(team, pool, -gpus)
        return after > 0 and after > before

    def within_nominal(self, team: str, pool: str, gpus: float) -> bool:
        return self.used.get((team, pool), 0) + gpus <= self.quota(team, pool).nominal

    def check(self, team: str, pool: str, gpus: float, explain: bool = True) -> Optional[str]:
        """None when ``gpus`` more GPUs fit the team's quota, else why not
        (``explain`` False: ``REFUSED``, for a cycle that shows no reasons)."""
        quota = self.quota(team, pool)
        used = self.used.get((team, pool), 0)
        after = used + gpus
        if after > quota.ceiling:
            if not explain:
                return REFUSED
            return (f"team {team} holds {units(used)} {pool} GPUs and may hold at most "
                    f"{quota.nominal + quota.borrowing_limit} ({describe_ceiling(quota)}); "
                    f"this workload needs {units(gpus)}")
        extra = borrowed(after, quota) - borrowed(used, quota)
        if extra <= 0:
            return None
        lendable_after = (self.lendable_total.get(pool, 0)
                          - lendable(used, quota) + lendable(after, quota))
        room = self.unowned(pool) + lendable_after - self.borrowed_total.get(pool, 0)
        if extra <= room:
            return None
        if not explain:
            return REFUSED
        if room <= 0:
            return (f"team {team} is at {units(used)}/{quota.nominal} {pool} GPUs and nothing "
                    f"can be borrowed")
        return (f"team {team} is at {units(used)}/{quota.nominal} {pool} GPUs and only "
                f"{units(room)} can be borrowed; this workload needs {units(extra)} more")

    def headroom(self, team: str, pool: str) -> int:
        """GPUs the team could be admitted for now by quota alone."""
        quota = self.quota(team, pool)
        used = self.used.get((team, pool), 0)
        own = max(0, quota.nominal - used)
        room = (self.unowned(pool) + self.lendable_total.get(pool, 0)
                - lendable(used, quota) - self.borrowed_total.get(pool, 0))
        can_borrow = max(0, min(room, quota.ceiling - max(used, quota.nominal)))
        return int(own + can_borrow)
