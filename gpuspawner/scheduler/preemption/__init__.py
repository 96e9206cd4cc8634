"""Choosing victims for a workload that cannot be placed.

Two rules may evict running work, and nothing else does:

* **reclaim**: a workload that stays within its team's nominal quota may
  evict work of teams holding more than their nominal quota in the pool
  (highest weighted share first; within a team lowest priority, then newest),
  only while that team is still borrowing. Notebooks and deployments are
  candidates only for the part of their team's use that is above nominal.
* **priority**: a workload may evict its own team's running work of a lower,
  preemptible priority class.

A workload never evicts one that evicted it (``Workload.preempted_by``), so
no pair can evict each other back and forth.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional, Sequence

from ..kinds import kind
from ..model import Placement, Running, Workload
from ..placement import FreeIndex, find_placement
from ..policy import Policy
from ..quota import QuotaLedger

RECLAIM = "reclaim"
PRIORITY = "priority"
MAX_GANG_CANDIDATES = 64


@dataclass(frozen=True)
class Candidate:
    running: Running
    rule: str
    team: str


@dataclass
class PreemptionPlan:
    placement: Placement
    victims: list[Candidate]


class VictimCatalog:
    """Each team's running work in a pool, in eviction order, read from the
    state's incremental index."""

    def __init__(self, state, ledger: QuotaLedger):
        self._state = state
        self._ledger = ledger
        self._above: dict[tuple[str, str], set[str]] = {}
        # (team, pool) -> its running work that is not protected, in eviction
        # order: the running set and the time do not change within a cycle.
        self._evictable: dict[tuple[str, str], list[Running]] = {}
        # GPUs charged to a team that no running workload holds yet: admitted
        # earlier in this cycle or set aside for a nominated preemptor. They
        # are the newest claims, so the first to count as borrowed, and no
        # running work is evicted for them.
        self.admitted_now: dict[tuple[str, str], float] = {}
        for nom in state.nominations.values():
            w = state.pending[nom.workload_id]
            self.admitted_now[(w.team, w.pool)] = (self.admitted_now.get((w.team, w.pool), 0)
                                                   + w.gpu_units)

    @property
    def state(self):
        return self._state

    def admitted(self, team: str, pool: str, gpus: float) -> None:
        key = (team, pool)
        self.admitted_now[key] = self.admitted_now.get(key, 0) + gpus
        self._above.pop(key, None)

    def team_victims(self, pool: str, team: str) -> Iterator[tuple[Running, bool]]:
        """(running, above_nominal) for the team's running work in the pool,
        lowest priority and newest first. ``above_nominal`` marks the work
        admitted last that takes the team past its nominal quota: that is
        what the team borrowed."""
        running = self._state.running
        order = self._state.eviction_order.get((team, pool), ())
        above = self._above_nominal(pool, team, order)
        for key in order:
            yield running[key[-1]], key[-1] in above

    def evictable(self, pool: str, team: str, policy: Policy,
                  now: Optional[float]) -> Iterator[tuple[Running, bool]]:
        """``team_victims`` without the work ``protected`` keeps running."""
        key = (team, pool)
        order = self._state.eviction_order.get(key, ())
        cached = self._evictable.get(key)
        if cached is None:
            running = self._state.running
            cached = self._evictable[key] = [
                running[k[-1]] for k in order if not protected(running[k[-1]], policy, now)]
        above = self._above_nominal(pool, team, order)
        for r in cached:
            yield r, r.workload.id in above

    def _above_nominal(self, pool: str, team: str, order) -> set[str]:
        cached = self._above.get((team, pool))
        if cached is not None:
            return cached
        excess = self.running_excess(team, pool)
        above: set[str] = set()
        if excess > 0:
            # newest first: key is (priority, -start, -submit, id)
            for key in sorted(order, key=lambda k: (k[1], k[2], k[3])):
                if excess <= 0:
                    break
                units = self._state.running[key[-1]].workload.gpu_units
                if units:  # GPU-less work borrows no GPUs
                    above.add(key[-1])
                    excess -= units
        self._above[(team, pool)] = above
        return above

    def running_excess(self, team: str, pool: str) -> float:
        """GPUs the team's running work holds above its nominal quota."""
        return (self._ledger.used.get((team, pool), 0) - self.admitted_now.get((team, pool), 0)
                - self._ledger.quota(team, pool).nominal)

    def teams_in(self, pool: str) -> list[str]:
        return [team for (team, p), order in self._state.eviction_order.items()
                if p == pool and order]


def protected(r: Running, policy: Policy, now: Optional[float]) -> bool:
    """Running work that may not be preempted now: started (or restarted
    after a preemption) less than its guard ago, or preempted
    ``max_preemptions`` times already. The guard is ``min_runtime``, or,
    with ``age_protection``, the workload's age at its (re)start (time since
    its submission) up to ``age_protection`` when that is longer: work that
    waited days for its GPUs is not thrown out an hour after it got them,
    while work that started at once is reclaimed at once. The cap holds
    against a reclaim too: a team gets its nominal quota back from such a
    borrower when it ends (by its time limit), with a backfill reservation
    meanwhile; without the cap one borrower was reclaimed 13 times in a week."""
    if now is not None:
        guard = policy.min_runtime
        if policy.age_protection is not None:
            guard = max(guard, min(policy.age_protection, r.start_time - r.workload.submit_time))
        if guard > 0 and now - r.start_time < guard:
            return True
    return policy.max_preemptions is not None and r.workload.attempt >= policy.max_preemptions


def candidates(w: Workload, catalog: VictimCatalog, ledger: QuotaLedger, policy: Policy,
               shares: Mapping[str, float], unavailable: set[str],
               now: Optional[float] = None) -> list[Candidate]:
    value = policy.priority_value
    prio = value(w.priority)
    out: list[Candidate] = []
    limit = policy.max_victim_candidates

    def free_to_take(r: Running) -> bool:
        wid = r.workload.id
        return wid not in unavailable and wid not in w.preempted_by

    if policy.quotas and ledger.within_nominal(w.team, w.pool, w.gpu_units) \
            and ledger.borrowed_total.get(w.pool, 0) > 0:
        borrowers = [u for u in catalog.teams_in(w.pool) if u != w.team
                     and catalog.running_excess(u, w.pool) > 0]
        borrowers.sort(key=lambda u: (-shares.get(u, 0.0), u))
        for u in borrowers:
            for r, above_nominal in catalog.evictable(w.pool, u, policy, now):
                if (kind(r.workload.kind).evictable or above_nominal) and free_to_take(r):
                    out.append(Candidate(r, RECLAIM, u))
                    if len(out) >= limit:
                        return out
    for r, _ in catalog.team_victims(w.pool, w.team):
        pc = policy.priority_classes[r.workload.priority]
        if value(r.workload.priority) >= prio:
            break
        if pc.preemptible and kind(r.workload.kind).evictable and free_to_take(r) \
                and not protected(r, policy, now):
            out.append(Candidate(r, PRIORITY, w.team))
            if len(out) >= limit:
                break
    return out


# Where victims are chosen when shares are in play (the cycle's placement
# strategy hands ``preemption.shares.plan_with_shares`` in):
# (w, selector, index, slots, catalog, cands, excess, limits) -> plan or None.
SharePlanner = Callable[..., Optional["PreemptionPlan"]]
# Where a single-node preemptor's victims are chosen for CPUs and memory too
# (``preemption.resources.single_node``):
# (w, selector, index, cands, excess, limits, room) -> plan or None.
RoomPlanner = Callable[..., Optional["PreemptionPlan"]]


def plan_preemption(w: Workload, selector: Mapping[str, str], index: FreeIndex,
                    ledger: QuotaLedger, cands: Sequence[Candidate], catalog: VictimCatalog,
                    limits: Mapping[str, int] = {}, slots=None,
                    with_shares: Optional[SharePlanner] = None, room=None,
                    with_room: Optional[RoomPlanner] = None) -> Optional[PreemptionPlan]:
    """The victims (fewest, most evictable) that make room for ``w``, or None.
    ``limits`` caps the GPUs ``w`` may take on reserved nodes: preempting does
    not get around a backfill reservation. ``slots`` (the cycle's
    ``shares.SlotIndex``) is where shares are, and ``with_shares`` chooses
    victims when the preemptor or a candidate is a share; without shares in
    play the plan is made on whole GPUs. ``room`` (``resources.VictimRoom``;
    None where nodes count no CPUs or memory or ``w`` asks for none) is what
    ``w`` lacks of CPUs and memory: a single-node ``w`` then evicts for those
    too (``with_room`` chooses), a gang only on nodes its victims give room."""
    if not cands:
        return None
    excess = {team: catalog.running_excess(team, w.pool)
              for team in {c.team for c in cands if c.rule == RECLAIM}}
    gpu_cands = [c for c in cands if c.running.workload.gpus]
    fixed = dict(limits)
    if room is not None:  # where its CPUs or memory do not fit now (victims aside)
        fixed.update(room.caps_without(()))
    if slots is not None and with_shares is not None and \
            (w.gpu_share or any(c.running.workload.gpu_share for c in cands)):
        plan = with_shares(w, selector, index, slots, catalog, gpu_cands, excess, fixed)
    elif w.num_nodes == 1 and room is not None and with_room is not None:
        plan = with_room(w, selector, index, cands, excess, limits, room)
    elif w.num_nodes == 1:
        plan = single_node(w, selector, index, gpu_cands, fixed,
                           lambda _node, options, need: victims_on_node(options, need, excess))
    else:
        plan = _gang(w, selector, index, (cands if room is not None else gpu_cands)[
            :MAX_GANG_CANDIDATES], excess, limits, room)
    if plan is None:
        return None
    plan = _satisfy_quota(w, plan, ledger, gpu_cands, catalog.admitted_now)
    # A plan that evicts nothing is no preemption (it fit and its quota holds).
    return plan if plan is not None and plan.victims else None


def single_node(w, selector, index, cands, limits, choose) -> Optional[PreemptionPlan]:
    """The node where evicting the fewest GPUs makes room (then the fewest
    victims, then the most evictable ones), so a one-GPU workload does not
    evict an eight-GPU job when a one-GPU job would do. A gang victim counts
    all its GPUs, on every node it spans: it stops on all of them.
    ``choose(node, options, need)``: the victims among ``options`` ((rank,
    candidate, its GPUs there)) that give ``w`` what it lacks on ``node``
    (``need`` GPUs; ``resources.single_node`` counts CPUs and memory too);
    None or empty when they cannot."""
    g = w.gpus_per_node
    on_node: dict[str, list[tuple[int, Candidate, tuple[int, ...]]]] = {}
    for rank, c in enumerate(cands):
        for node, gpus in c.running.placement:
            if node in limits and limits[node] < g:
                continue
            if node in index.free and (not selector or index.nodes[node].matches(selector)):
                on_node.setdefault(node, []).append((rank, c, gpus))
    best = None
    for node, options in on_node.items():
        need = g - len(index.free[node])
        chosen = choose(node, options, need)
        if not chosen:
            continue
        freed = sum(c.running.workload.gpu_units for _, c, _ in chosen)
        cost = (freed - max(need, 0), len(chosen), max(rank for rank, _, _ in chosen), node)
        if best is None or cost < best[0]:
            best = (cost, node, chosen)
    if best is None:
        return None
    _, node, chosen = best
    gpus = (index.free[node] + [x for _, _, gpus in chosen for x in gpus])[:g]
    return PreemptionPlan(((node, tuple(sorted(gpus))),), [c for _, c, _ in chosen])


def victims_on_node(options, need, excess):
    """Victims on one node covering ``need`` GPUs: the smallest single victim
    that suffices, else the most evictable first until covered."""
    def allowed(c: Candidate, taken: dict) -> bool:
        return c.rule != RECLAIM or taken.get(c.team, 0) < excess[c.team]

    singles = [o for o in options if len(o[2]) >= need and allowed(o[1], {})]
    if singles:
        return [min(singles, key=lambda o: (o[1].running.workload.gpus, o[0]))]
    chosen, taken, freed = [], {}, 0
    for rank, c, gpus in options:
        if not allowed(c, taken):
            continue
        chosen.append((rank, c, gpus))
        taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
        freed += len(gpus)
        if freed >= need:
            return chosen
    return None


def _gang(w, selector, index, cands, excess, limits, room=None) -> Optional[PreemptionPlan]:
    def caps(victims: list[Candidate]) -> Mapping[str, int]:
        """``limits``, and the nodes where its CPUs or memory do not fit even
        with ``victims`` gone."""
        return limits if room is None else {**limits, **room.caps_without(victims)}

    def placement_without(victims: list[Candidate]):
        trial = index.copy()
        for c in victims:
            for node, gpus in c.running.placement:
                if node in trial.free:
                    trial.give(node, gpus)
        return find_placement(trial, w.pool, w.gpus_per_node, w.num_nodes, selector,
                              w.topology, w.topology_key, caps(victims))

    chosen: list[Candidate] = []
    taken: dict[str, int] = {}
    placement = None
    trial = index.copy()  # the free GPUs with every victim chosen so far given back
    for c in cands:
        if c.rule == RECLAIM and taken.get(c.team, 0) >= excess[c.team]:
            continue
        taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
        chosen.append(c)
        for node, gpus in c.running.placement:
            if node in trial.free:
                trial.give(node, gpus)
        if trial.pool_free.get(w.pool, 0) < w.gpus:
            continue
        placement = find_placement(trial, w.pool, w.gpus_per_node, w.num_nodes, selector,
                                   w.topology, w.topology_key, caps(chosen))
        if placement is not None:
            break
    if placement is None:
        return None
    for c in reversed(chosen[:-1]):  # drop victims the gang does not need
        trial = [x for x in chosen if x is not c]
        p = placement_without(trial)
        if p is not None:
            chosen, placement = trial, p
    return PreemptionPlan(placement, chosen)


def _satisfy_quota(w, plan: PreemptionPlan, ledger: QuotaLedger, cands, not_running
                   ) -> Optional[PreemptionPlan]:
    """Add victims until the team's quota and the pool's lending rule hold:
    the smallest one that suffices alone, else the most evictable first (as
    ``victims_on_node`` covers GPUs), so a quarter GPU short does not evict
    a 2-GPU job when a 0.25 share would do."""
    trial = ledger.copy()
    for c in plan.victims:
        trial.charge(c.team, w.pool, -c.running.workload.gpu_units)

    def ok() -> bool:
        if trial.check(w.team, w.pool, w.gpu_units) is not None:
            return False
        trial.charge(w.team, w.pool, w.gpu_units)
        fine = trial.borrowing_ok(w.pool)
        trial.charge(w.team, w.pool, -w.gpu_units)
        return fine

    def may_take(c: Candidate) -> bool:
        """Reclaim takes from a team only while it is still borrowing."""
        return c.rule != RECLAIM or trial.used.get((c.team, w.pool), 0) - not_running.get(
            (c.team, w.pool), 0) - trial.quota(c.team, w.pool).nominal > 0

    def ok_without(c: Candidate) -> bool:
        trial.charge(c.team, w.pool, -c.running.workload.gpu_units)
        fine = ok()
        trial.charge(c.team, w.pool, c.running.workload.gpu_units)
        return fine

    if ok():
        return plan
    chosen = {id(c) for c in plan.victims}
    rest = [c for c in cands if id(c) not in chosen]
    singles = [(c.running.workload.gpu_units, rank, c) for rank, c in enumerate(rest)
               if may_take(c) and ok_without(c)]
    if singles:
        plan.victims.append(min(singles, key=lambda s: s[:2])[2])
        return plan
    for c in rest:
        if not may_take(c):
            continue
        trial.charge(c.team, w.pool, -c.running.workload.gpu_units)
        plan.victims.append(c)
        if ok():
            return plan
    return None
