"""One scheduling cycle: decide, without changing the state.

``_Cycle`` keeps the order and the admission: which workload is considered
next, whether its team's quota lets it start, and what it waits for. Where
its GPUs go is the cycle's ``Space`` (one placement strategy for whole GPUs,
one for shares), the backfill reservations are ``Reservations``, and
preemption is ``Preempting``.
"""
from __future__ import annotations

from typing import Optional

from .. import events as ev
from ..fairshare import dominant_share, usage_deltas
from ..model import Placement, Workload, combined_selector
from ..node_load import asks, cpu_only_reason, place_cpu_only
from ..policy import Policy
from ..state import ClusterState
from ..steps import drain
from .capacity_reasons import CapacityReasons
from .ordering import Ordering
from .preempting import Preempting
from .reserving import Reservations, Searches
from .quotas import QuotaGate
from .results import CycleResult
from .space import Space

# Aged workloads considered ahead of the regular order per cycle and pool
# (bounds the cost when a long queue has aged).
AGED_PER_CYCLE = 16
# A cycle run step by step (``_Cycle.steps``) yields after this many workloads.
STEP = 64


class _Cycle:
    def __init__(self, state: ClusterState, policy: Policy, now: float, explain: bool,
                 searches: Optional[Searches] = None):
        self.explain = explain
        self.quotas = policy.quotas
        self.fair_share = policy.fair_share
        self.state = state
        self.policy = policy
        self.now = now
        self.ledger = state.ledger.copy()
        self.result = CycleResult()
        self.space = Space(state, policy)
        self.reservations = Reservations(self.space, policy, now, explain, searches)
        self.unavailable: set[str] = set()       # running work already leaving
        self.preempting = Preempting(state, policy, now, self.space, self.ledger,
                                     self.unavailable)
        self.gate = QuotaGate(self)
        self.quota_blocked = self.gate.quota_blocked
        self.quota_holds = self.gate.quota_holds
        usage = state.team_usage(now) if policy.fair_share else {}
        self.team_pool_usage = usage
        # GPUs per pool, and the CPUs and memory of pools that count them.
        self.share_capacity = {**state.capacity, **state.resource_capacity}
        self.shares = {team: self._share(team) for team in set(usage) | set(state.teams)}
        self.order = Ordering(self)
        self.any_aged: Optional[bool] = None  # whether any pending work has aged
        self.capacity_reasons = CapacityReasons(self)
        # Nominations dropped at the start of this cycle: their workloads
        # wait again and are considered like any other pending work.
        self.dropped: set[str] = set()

    @property
    def version(self) -> int:
        return self.order.version

    def changed(self) -> None:
        """A decision that could make a team's remaining queue hopeless."""
        self.order.version += 1

    def _share(self, team: str) -> float:
        t = self.state.teams.get(team)
        nominal = {p: q.nominal for p, q in t.quotas.items()} if t is not None else {}
        return dominant_share(self.team_pool_usage.get(team, {}), self.share_capacity,
                              t.weight if t is not None else 1.0, nominal)

    def ordered(self):
        return self.order.ordered()

    def pool_done(self, team: str, pool: str) -> bool:
        """Nothing more can happen in this pool for this team this cycle,
        unless GPUs are free: its preemption attempt was made and the pool's
        reservations are given."""
        return self.preempting.done(team, pool) and self.reservations.pool_given(pool)

    def aged_settled(self, pool: str) -> bool:
        """No aged workload can take a reservation in the pool any more (its
        aged reservations are given, or nothing has aged): work that cannot
        fit may be passed over unseen, with the same decisions as with
        explanations."""
        return not self.has_aged() or self.reservations.aged_given(pool)

    def has_aged(self) -> bool:
        """Some pending work has waited past ``aging_after``."""
        if self.any_aged is None:
            after = self.policy.aging_after
            self.any_aged = after is not None and next(
                iter(self.state.oldest_pending(self.now - after)), None) is not None
        return self.any_aged

    def aged(self, w: Workload) -> bool:
        after = self.policy.aging_after
        return after is not None and self.now - w.submit_time >= after

    # ---- the cycle -------------------------------------------------------
    def run(self) -> CycleResult:
        return drain(self.steps())

    def steps(self):
        """The cycle as a generator: it yields every ``STEP`` workloads it
        considers (the caller may let other work run in between, as long as
        nothing changes the state meanwhile) and returns the result."""
        considered = 0
        self.evict_from_unhealthy()
        self.preempting.not_victims = set(self.state.on_drained_nodes())
        self.admit_ready_nominations()
        promised = self.consider_promised()
        for w in self.ordered():
            considered += 1
            if considered % STEP == 0:
                yield
            if self.order.stopped is not None:
                self.wait(w, self.order.stopped)
                continue
            if self.nominated(w.id) or w.id in promised:
                continue
            self.consider(w)
        self.result.reservations = self.reservations.all()
        self.result.quota_holds = list(self.quota_holds.values())
        return self.result

    def consider_promised(self) -> set[str]:
        """Workloads holding a reservation from earlier cycles go first, so
        the nodes drained for them are not given to someone else at the last
        moment. Then work that has waited past ``aging_after``, oldest first,
        whatever its team's quota position: a gang larger than its team's
        nominal quota is not ordered after every within-quota workload forever."""
        promised = set()
        state = self.state
        for wid in state.reserved_order:
            w = state.pending.get(wid)
            if w is not None and not self.nominated(wid):
                promised.add(wid)
                self.consider(w, holds_reservation=True)
        if self.policy.aging_after is not None:
            budget = AGED_PER_CYCLE * max(1, len(state.capacity))
            for w in state.oldest_pending(self.now - self.policy.aging_after):
                if budget <= 0:
                    break
                if self.nominated(w.id) or w.id in promised:
                    continue
                budget -= 1
                promised.add(w.id)
                self.consider(w)
        return promised

    def nominated(self, wid: str) -> bool:
        """``wid`` waits on GPUs set aside for it (not dropped this cycle)."""
        return wid in self.state.nominations and wid not in self.dropped

    def evict_from_unhealthy(self) -> None:
        for wid in self.state.on_unhealthy_hardware():
            r = self.state.running[wid]
            self.unavailable.add(wid)
            self.ledger.charge_workload(r.workload, -1)
            self.result.events.append(ev.Event(
                ev.EVICTED, wid, self.now, attempt=r.workload.attempt + 1,
                message="its node or GPU became unhealthy; requeued"))

    def admit_ready_nominations(self) -> None:
        placeable = self.state.placeable
        pending = self.state.pending
        for wid, nom in self.state.nominations.items():
            if not all(placeable(node, g) for node, gpus in nom.placement for g in gpus):
                # Its quota and its GPUs are not held any more: this cycle's
                # admissions may use them (apply() drops it before it starts them).
                w = pending[wid]
                self.ledger.charge_workload(w, -1)
                self.preempting.catalog.admitted(w.team, w.pool, -w.gpu_units)
                self.space.give_back(w, nom)
                self.dropped.add(wid)
                self.result.events.append(ev.Event(
                    ev.NOMINATION_DROPPED, wid, self.now,
                    message="the GPUs set aside for it became unhealthy or their node was "
                            "drained; it waits again"))
            elif nom.ready:
                self.result.events.append(ev.Event(
                    ev.ADMITTED, wid, self.now, placement=nom.placement,
                    message="admitted on the GPUs its preemption freed"))
                w = pending[wid]
                if w.gpu_share:
                    self.space.shares.open_nominated(w, nom.placement)
            else:
                self.result.waiting[wid] = (
                    f"waiting for preempted workload(s) {', '.join(sorted(nom.victims))} "
                    f"to exit")

    def selector(self, w: Workload):
        return combined_selector(self.state.teams.get(w.team), w)

    def consider(self, w: Workload, holds_reservation: bool = False) -> None:
        if w.gpus == 0:
            self.consider_cpu_only(w, holds_reservation)
            return
        policy = self.policy
        shape = closed = None
        if not self.explain and not holds_reservation:
            shape, closed = self.shape_and_closed(w)
            # Without explanations a workload that cannot fit is skipped, unless
            # its quota check could still create its team's quota hold (a decision).
            may_hold = policy.quota_holds and policy.quotas and \
                (w.team, w.pool) not in self.quota_holds
            if closed and not may_hold and self.pool_done(w.team, w.pool) and not (
                    self.aged(w) and self.reservations.may_reserve(w, False, True)):
                # The same decisions as with explanations: only the team's quota
                # refusal, which its later work reads, is kept.
                if policy.quotas:
                    self.gate.note_quota_refusal(w)
                if policy.strict_fifo:
                    self.order.stopped = f"behind {w.id}"
                return
        if policy.quotas and not self.gate.quota_allows(w, holds_reservation):
            return
        if policy.quotas and not self.gate.resources_allow(w):
            return
        if closed is None:  # only now for holders: most are refused by quota first
            shape, closed = self.shape_and_closed(w)
        placement = None if closed else self.place(w, shape, self.caps_of(w))
        if placement is not None and policy.quotas and self.gate.breaks_lending(w):
            # It fits, but the GPUs it would take cover what others borrow.
            if policy.preemption and self.try_preemption(w):
                return
            self.wait(w, f"team {w.team}'s {w.pool} quota is lent out; waiting for borrowers "
                         f"to give GPUs back")
            return
        if placement is not None:
            hold = self.quota_holds.get((w.team, w.pool))
            if hold is not None:
                hold.consume(w.gpu_units, self.end_of(w))
            self.admit(w, placement)
            return
        if policy.preemption and self.try_preemption(w):
            return
        reserved = self.try_reserve(w, holds_reservation)
        if self.explain:
            self.wait(w, self.capacity_reasons.reason(w, reserved))
        if policy.strict_fifo:
            self.order.stopped = f"behind {w.id} (strict FIFO: nothing passes a blocked workload)"

    def consider_cpu_only(self, w: Workload, holds_reservation: bool = False) -> None:
        """It holds no GPU, but runs on a node of its pool (if the pool has
        nodes here): one that takes new work. One that fits nowhere may
        preempt, else gets a reservation for its CPUs and memory."""
        selector = self.selector(w)
        nodes = [n for n in self.state.nodes.values()
                 if n.pool == w.pool and n.matches(selector)]
        load = self.space.load
        if self.policy.quotas and not self.gate.resources_allow(w):
            return
        if nodes and not any(n.healthy and not n.drained for n in nodes):
            self.wait(w, f"no node of pool {w.pool} takes new work (drained or unhealthy)")
        elif nodes and load is not None and asks(w):
            # It holds CPUs and memory of one node: one with room for them,
            # beside what reservations hold there (unless it ends before them).
            end = self.end_of(w)
            kept = self.reservations.room_caps(w, self.reservations.beaten(w.pool, end), end)
            node = place_cpu_only(load, [n for n in nodes if n.name not in kept], w)
            if node is None and self.policy.preemption and self.try_preemption(w):
                return
            if node is None:
                reserved = self.try_reserve(w, holds_reservation)
                self.wait(w, reserved or cpu_only_reason(load, nodes, w, kept))
            else:
                self.admit(w, ((node, ()),))
        else:
            self.admit(w, ())

    def try_reserve(self, w: Workload, holds_reservation: bool) -> Optional[str]:
        reserved = self.reservations.try_reserve(w, holds_reservation, self.aged(w),
                                                 self.selector(w), self.unavailable,
                                                 self.policy.promised_passes_borrowers
                                                 and self.gate.borrows(w))
        if reserved is not None:
            self.changed()
        return reserved

    def try_preemption(self, w: Workload) -> bool:
        # One attempt per team and pool per cycle, made by its first blocked
        # workload; a batch job that has not waited long enough spends it.
        if not self.preempting.first_attempt(w):
            return False
        self.changed()
        # What reservations hold (not the node's own CPUs: victims may free those).
        limits = self.reservations.caps(w, self.end_of(w), {}, self.gate.passes_borrowers(w))
        return self.preempting.attempt(w, self.shares, limits, self.selector(w),
                                       self.result.events)

    def end_of(self, w: Workload) -> float:
        return self.now + w.time_limit if w.time_limit is not None else float("inf")

    def shape_and_closed(self, w: Workload) -> tuple[Optional[tuple], bool]:
        """The key under which placement failures are cached (None when the
        workload has node selectors or is a share), and whether one of that
        shape already failed."""
        strategy = self.space.strategy(w)
        beaten = self.reservations.beaten(w.pool, self.end_of(w), self.gate.passes_borrowers(w))
        shape = strategy.shape(w, beaten, self.selector(w))
        return shape, strategy.known_unplaceable(w, shape)

    def caps_of(self, w: Workload) -> dict[str, int]:
        """``Reservations.caps`` of ``w``, made only where a placement is tried:
        made for every reservation holder, most of them refused before they
        try one, they were a sixth of a long replay's time."""
        return self.reservations.caps(w, self.end_of(w), self.space.resource_caps(w),
                                      self.gate.passes_borrowers(w))

    def place(self, w: Workload, shape: Optional[tuple], limits) -> Optional[Placement]:
        placement = self.space.strategy(w).place(w, shape, limits, self.end_of(w),
                                                 self.reservations.of_pool(w.pool),
                                                 self.selector(w))
        if placement is None and shape is not None:
            self.changed()
        return placement

    def admit(self, w: Workload, placement: Placement) -> None:
        self.changed()
        self.preempting.catalog.admitted(w.team, w.pool, w.gpu_units)
        self.space.take(w, placement, self.end_of(w), self.reservations.of_pool(w.pool))
        self.ledger.charge_workload(w)
        self.reservations.changed(w.pool, placement)
        borrowed = 0
        if self.policy.quotas and w.pool:
            quota = self.ledger.quota(w.team, w.pool)
            used = self.ledger.used.get((w.team, w.pool), 0)
            borrowed = max(0, min(w.gpu_units, used - quota.nominal))
        self._count_share(w)
        msg = "admitted" + (f"; {borrowed} GPU(s) borrowed, preemptible by reclaim"
                            if borrowed else "")
        self.result.events.append(ev.Event(ev.ADMITTED, w.id, self.now, placement=placement,
                                           borrowed=borrowed, message=msg))

    def _count_share(self, w: Workload) -> None:
        if self.policy.fair_share and w.pool:
            pools = self.team_pool_usage.setdefault(w.team, {})
            for key, delta in usage_deltas(w):
                pools[key] = pools.get(key, 0.0) + delta / 2
            self.shares[w.team] = self._share(w.team)

    def count_admitted(self, w: Workload) -> None:
        """Order the rest as if ``w`` had been admitted: its team's quota
        and share include it (for the forecast, which places nothing)."""
        self.ledger.charge_workload(w)
        self._count_share(w)

    def wait(self, w: Workload, reason: str) -> None:
        if self.explain:
            self.result.waiting[w.id] = reason
