"""Preemption inside one cycle: one attempt per team and pool, made by its
first blocked workload; the victims' events and the preemptor's nomination
(``preemption.py`` chooses the victims, the cycle's ``Space`` sets the
GPUs aside)."""
from __future__ import annotations

from typing import Mapping

from .. import events as ev
from ..kinds import preemption_wait
from ..model import Workload
from ..policy import Policy
from ..node_load import asks
from ..preemption import PRIORITY, VictimCatalog, candidates, plan_preemption
from ..preemption.resources import VictimRoom, single_node
from ..quota import QuotaLedger
from ..state import ClusterState
from .space import Space


class Preempting:
    def __init__(self, state: ClusterState, policy: Policy, now: float, space: Space,
                 ledger: QuotaLedger, unavailable: set[str]):
        self.state = state
        self.policy = policy
        self.now = now
        self.space = space
        self.ledger = ledger
        self.catalog = VictimCatalog(state, ledger)
        # running work already leaving (shared with the cycle)
        self.unavailable = unavailable
        # Preempting work on a drained node would free GPUs nobody may use.
        self.not_victims: set[str] = set()
        self.tried: set[tuple[str, str]] = set()

    def done(self, team: str, pool: str) -> bool:
        """The team's attempt in the pool is made (or preemption is off)."""
        return not self.policy.preemption or (team, pool) in self.tried

    def outranks_own_work(self, w: Workload) -> bool:
        order = self.state.eviction_order.get((w.team, w.pool))
        return bool(order) and order[0][0] < self.policy.priority_value(w.priority)

    def first_attempt(self, w: Workload) -> bool:
        """Whether this is its team's attempt in its pool (it spends it)."""
        key = (w.team, w.pool)
        if key in self.tried:
            return False
        self.tried.add(key)
        return True

    def attempt(self, w: Workload, shares: Mapping[str, float], limits, selector,
                events: list[ev.Event]) -> bool:
        """Preempt for ``w`` if victims make room: their events and its
        nomination go to ``events``; its GPUs are set aside and its quota
        charged. A kind that waits before preempting spends the attempt.
        ``limits`` are the reservations' caps: where its node lacks CPUs or
        memory, victims may free those too (``preemption/resources.py``)."""
        now, policy = self.now, self.policy
        wait = preemption_wait(w, policy.preemption_delay)
        if wait and now - w.submit_time < wait:
            return False
        unavailable = self.unavailable | self.not_victims if self.not_victims \
            else self.unavailable
        cands = candidates(w, self.catalog, self.ledger, policy, shares, unavailable, now)
        space = self.space
        room = VictimRoom(space.load, self.state.nodes, w) \
            if space.load is not None and asks(w) else None
        plan = plan_preemption(w, selector, space.index, self.ledger, cands, self.catalog,
                               limits, space.slots, space.victim_planner(), room, single_node)
        if plan is None:
            return False
        kill_grace = policy.default_grace_period
        for c in plan.victims:
            victim = c.running.workload
            grace = victim.grace_period if victim.grace_period is not None else kill_grace
            # The victim stays charged to its team until it has exited: its
            # quota is the preemptor's, not free for the team's other work.
            self.unavailable.add(victim.id)
            if c.rule == PRIORITY:
                why = f"preempted by higher-priority {w.priority} workload {w.id} of team {w.team}"
            else:
                why = (f"preempted: team {w.team} reclaims its nominal {w.pool} quota "
                       f"for workload {w.id}; team {victim.team} was borrowing")
            events.append(ev.Event(
                ev.PREEMPTED, victim.id, now, message=why, preemptor_id=w.id,
                kill_at=now + grace, attempt=victim.attempt + 1))
        space.set_aside(w, plan.placement)
        self.ledger.charge_workload(w)
        self.catalog.admitted(w.team, w.pool, w.gpu_units)
        victims = ", ".join(c.running.workload.id for c in plan.victims)
        events.append(ev.Event(
            ev.NOMINATED, w.id, now, placement=plan.placement,
            message=f"GPUs set aside; waiting for preempted {victims} to exit"))
        return True
