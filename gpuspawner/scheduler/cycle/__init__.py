"""One scheduling cycle: decide, without changing the state.

``plan_cycle`` reads a ``ClusterState`` and returns the events of this
cycle (admissions, nominations, preemptions, evictions) plus, for every
workload left waiting, a reason a person can read. It works on scratch
copies of the free-GPU index and the quota ledger; the caller persists the
events and then applies them (``Scheduler.apply``).

The parts: ``admission`` (the cycle: what is considered when, and whether
its team's quota lets it start), ``ordering`` (the order: teams through
their queue heads), ``space`` (where GPUs go: one placement strategy for
whole GPUs, one for shares, used by all the others), ``reserving`` (backfill
reservations), ``preempting`` (one preemption attempt per team and pool),
``results`` (what a cycle returns).
"""
from __future__ import annotations

from typing import Iterable, Optional

from ..model import Workload
from ..policy import Policy
from ..state import ClusterState
from .admission import AGED_PER_CYCLE, STEP, _Cycle
from .reserving import Searches
from .results import CycleResult, QuotaHold

__all__ = ["AGED_PER_CYCLE", "STEP", "ConsiderationOrder", "CycleResult", "QuotaHold",
           "Searches", "plan_cycle", "plan_cycle_steps"]


class ConsiderationOrder:
    """Pending workloads in the order the next cycle would consider them:
    reservation holders, then aged work, then the regular order (teams
    through their queue heads). What the start forecast books in turn: call
    ``admitted(w)`` for each workload it counts as started, so the rest are
    ordered as a cycle would order them after that admission (its team's
    quota and share include it)."""

    def __init__(self, state: ClusterState, policy: Policy, now: float,
                 then: Iterable[Workload] = ()):
        self._then = list(then)  # to go right after the aged work
        self._state = state
        self._policy = policy
        self._now = now
        self._cycle = _Cycle(state, policy, now, explain=True)

    def __iter__(self):
        seen: set[str] = set()
        state, pending = self._state, self._state.pending
        firsts = [pending[wid] for wid in state.reserved_order if wid in pending]
        if self._policy.aging_after is not None:
            firsts.extend(state.oldest_pending(self._now - self._policy.aging_after))
        for w in firsts + self._then:
            if w.id not in seen:
                seen.add(w.id)
                yield w
        for w in self._cycle.ordered():
            if w.id not in seen:
                seen.add(w.id)
                yield w

    def admitted(self, w: Workload) -> None:
        self._cycle.count_admitted(w)


def plan_cycle(state: ClusterState, policy: Policy, now: float, explain: bool = True,
               searches: Optional[Searches] = None) -> CycleResult:
    """Decide this cycle. ``explain=False`` skips the waiting reasons (and the
    work that only they need), for callers that do not show them.
    ``searches``: reservation searches kept from the caller's earlier cycles
    (``Searches``)."""
    return _Cycle(state, policy, now, explain, searches).run()


def plan_cycle_steps(state: ClusterState, policy: Policy, now: float, explain: bool = True,
                     searches: Optional[Searches] = None):
    """``plan_cycle`` as a generator (``yield from`` it: it returns the result)."""
    return (yield from _Cycle(state, policy, now, explain, searches).steps())
