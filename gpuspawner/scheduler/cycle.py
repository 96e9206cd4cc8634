"""One scheduling cycle: decide, without changing the state.

``plan_cycle`` reads a ``ClusterState`` and returns the events of this
cycle (admissions, nominations, preemptions, evictions) plus, for every
workload left waiting, a reason a person can read. It works on scratch
copies of the free-GPU index and the quota ledger; the caller persists the
events and then applies them (``Scheduler.apply``).

Order: teams compete through the heads of their queues. A head that stays
within its team's nominal quota goes before one that needs to borrow; then
higher priority; then, between teams, the lower weighted dominant share;
then the older. Inside a team the queue is priority, then age.
"""
from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Iterable, Optional

from . import events as ev
from .backfill import Reservation, find_reservation, merged_releases
from .fairshare import dominant_share
from .model import JOB, Placement, Workload, combined_selector
from .node_load import asks, counted, cpu_only_reason, place_cpu_only, request_words
from .placement import find_placement
from .policy import Policy
from .preemption import PRIORITY, VictimCatalog, candidates, plan_preemption
from .shares import find_share_placement, last_share, open_or_join, share_key, slots_needed
from .state import SHARE_SHAPE, ClusterState, give_back_set_aside
from .steps import drain


# Aged workloads considered ahead of the regular order per cycle and pool
# (bounds the cost when a long queue has aged).
AGED_PER_CYCLE = 16
# A cycle run step by step (``_Cycle.steps``) yields after this many workloads.
STEP = 64


@dataclass
class QuotaHold:
    """A team's quota kept for its first quota-blocked workload from
    ``start`` on; ``spare`` GPUs of it may go to later work that runs past."""

    workload_id: str
    team: str
    pool: str
    start: float
    spare: float

    def allows(self, gpus: int, end: float) -> bool:
        return end <= self.start or gpus <= self.spare

    def consume(self, gpus: int, end: float) -> None:
        if end > self.start:
            self.spare -= gpus


@dataclass
class CycleResult:
    events: list[ev.Event] = field(default_factory=list)
    # workload id -> why it is still waiting
    waiting: dict[str, str] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    quota_holds: list[QuotaHold] = field(default_factory=list)

    def of_type(self, type_: str) -> list[ev.Event]:
        return [e for e in self.events if e.type == type_]


class _Cycle:
    def __init__(self, state: ClusterState, policy: Policy, now: float, explain: bool):
        self.explain = explain
        self.quotas = policy.quotas
        self.fair_share = policy.fair_share
        self.queue_keys = state.queue_keys
        # Bumped whenever a decision could make a team's remaining queue
        # hopeless; a team found hopeful at the current version is not re-checked.
        self.version = 0
        self.hopeful: dict[str, int] = {}
        self.state = state
        self.policy = policy
        self.now = now
        self.index = state.index.copy()
        # CPUs and memory, where nodes count them (node_load.py)
        self.counts_resources = counted(state.nodes.values())
        self.load = state.node_load.copy() if self.counts_resources else None
        self.slots = state.slots.copy()
        self.drain = dict(state.node_drain)
        self.ledger = state.ledger.copy()
        self.result = CycleResult()
        self.reservations: dict[str, list[Reservation]] = {}
        # pool -> the start times of its reservations, sorted
        self.reservation_starts: dict[str, list[float]] = {}
        # (pool, ``beaten`` key) -> the per-node caps of the reservations a
        # workload does not end before; emptied when a reservation changes.
        self.limits_by_beats: dict[tuple, dict[str, int]] = {}
        # (node, GPUs) -> how many of them come back to the free pool when
        # released (the state's health, drains and set-asides hold all cycle)
        self.returned: dict[tuple[str, tuple[int, ...]], int] = {}
        # pool -> how many of its reservations aged workloads hold
        self.aged_reservations: dict[str, int] = {}
        # pool -> [(end, placement)] admitted in this cycle, sorted by end
        self.admitted_ends: dict[str, list[tuple[float, Placement]]] = {}
        # shared GPU -> when its last share ends, for GPUs that shares opened
        # or joined in this cycle (a join can keep a GPU past its old end)
        self.share_until: dict[tuple[str, int], float] = {}
        self.unavailable: set[str] = set()       # running work already leaving
        self.not_victims: set[str] = set()
        self.preempt_tried: set[tuple[str, str]] = set()
        self.failed: dict[tuple, int] = {}       # placement shape -> smallest size that failed
        # (team, pool) -> (smallest GPU units refused, why, refused only for a full pool)
        self.quota_blocked: dict[tuple[str, str], tuple[float, str, bool]] = {}
        self.quota_holds: dict[tuple[str, str], QuotaHold] = {}
        self.catalog = VictimCatalog(state, self.ledger)
        usage = state.team_usage(now) if policy.fair_share else {}
        self.team_pool_usage = usage
        self.shares = {team: self._share(team) for team in set(usage) | set(state.teams)}
        self.stopped: Optional[str] = None

    def _share(self, team: str) -> float:
        t = self.state.teams.get(team)
        nominal = {p: q.nominal for p, q in t.quotas.items()} if t is not None else {}
        return dominant_share(self.team_pool_usage.get(team, {}), self.state.capacity,
                              t.weight if t is not None else 1.0, nominal)

    # ---- order -----------------------------------------------------------
    def order_key(self, w: Workload) -> tuple:
        # The team's queue key is (-priority, submit time, id) or (submit
        # time, id); the team's state (borrowing? share?) slots in around it.
        queue_key = self.queue_keys[w.id]
        needs_borrow = self.quotas and not self.ledger.within_nominal(w.team, w.pool, w.gpu_units)
        share = self.shares.get(w.team, 0.0) if self.fair_share else 0.0
        return (needs_borrow, queue_key[0], share) + queue_key[1:]

    def ordered(self):
        """Pending workloads, teams interleaved through their queue heads.

        Without explanations a team is dropped as soon as every pool it waits
        for is full and has had its preemption attempt and reservation: the
        rest of its queue cannot change this cycle's decisions.
        """
        state = self.state
        pending = state.pending
        heap = []
        cursors = {}
        for group in list(state.queues):
            queue = state.queue(group)
            cursors[group] = [queue, 0]
            head = self._next(group, cursors)
            if head is not None:
                heap.append((self.order_key(head), group, head))
        heapq.heapify(heap)
        explain = self.explain
        while heap:
            key, group, w = heapq.heappop(heap)
            while True:
                if not explain and self.exhausted(group, w.team):
                    break
                if pending.get(w.id) is w:
                    yield w
                    if self.stopped is not None and not explain:
                        return
                nxt = self._next(group, cursors)
                if nxt is None:
                    break
                nkey = self.order_key(nxt)
                if heap and nkey > heap[0][0]:
                    heapq.heappush(heap, (nkey, group, nxt))
                    break
                w = nxt

    def _next(self, group, cursors) -> Optional[Workload]:
        queue, i = cursors[group]
        pending = self.state.pending
        while i < len(queue):
            w = queue[i]
            i += 1
            if pending.get(w.id) is w:
                cursors[group][1] = i
                return w
        cursors[group][1] = i
        return None

    def pool_done(self, team: str, pool: str) -> bool:
        """Nothing more can happen in this pool for this team this cycle,
        unless GPUs are free: its preemption attempt was made and the pool's
        reservations are given."""
        policy = self.policy
        if policy.preemption and (team, pool) not in self.preempt_tried:
            return False
        return not policy.backfill or self.regular_reservations(pool) >= \
            policy.max_reservations_per_pool

    def regular_reservations(self, pool: str) -> int:
        return len(self.reservations.get(pool, ())) - self.aged_reservations.get(pool, 0)

    def aged(self, w: Workload) -> bool:
        after = self.policy.aging_after
        return after is not None and self.now - w.submit_time >= after

    def may_reserve(self, w: Workload, holds_reservation: bool) -> bool:
        policy = self.policy
        if not policy.backfill:
            return False
        if holds_reservation or self.regular_reservations(w.pool) < \
                policy.max_reservations_per_pool:
            return True
        return self.aged(w) and self.aged_reservations.get(w.pool, 0) < \
            policy.max_aged_reservations_per_pool

    def exhausted(self, group: str, team: str) -> bool:
        """Every shape the group waits with is known not to fit, and every
        pool's preemption attempt and reservation are made."""
        if self.hopeful.get(group) == self.version:
            return False
        if self._exhausted(group, team):
            return True
        self.hopeful[group] = self.version
        return False

    def _exhausted(self, group: str, team: str) -> bool:
        if self.policy.preemption and not self.quotas:
            return False  # preemption is per team, but the group mixes teams
        pool_free = self.index.pool_free
        for pool, shapes in self.state.pending_shapes.get(group, {}).items():
            if not pool:
                return False
            quota_blocked = self.quota_blocked.get((team, pool), (float("inf"),))[0]
            done = self.pool_done(team, pool)
            free = pool_free.get(pool, 0)
            for (gpn, nodes, topology, key, constrained), limits in shapes.items():
                if gpn * nodes >= quota_blocked:
                    continue
                if topology == SHARE_SHAPE:
                    return False  # may join a shared GPU however few GPUs are free
                if not done:
                    return False
                if gpn * nodes > free:
                    continue
                if constrained:
                    return False
                beaten = self.beaten(pool, self.now + self.state.shortest_limit(limits))
                smallest_failed = self.failed.get((pool, nodes, topology, key, beaten))
                if smallest_failed is None or gpn < smallest_failed:
                    return False
        return True

    # ---- the cycle -------------------------------------------------------
    def run(self) -> CycleResult:
        return drain(self.steps())

    def steps(self):
        """The cycle as a generator: it yields every ``STEP`` workloads it
        considers (the caller may let other work run in between, as long as
        nothing changes the state meanwhile) and returns the result."""
        considered = 0
        self.evict_from_unhealthy()
        # Preempting work on a drained node would free GPUs nobody may use.
        self.not_victims = set(self.state.on_drained_nodes())
        self.admit_ready_nominations()
        # Workloads holding a reservation from earlier cycles go first, so the
        # nodes drained for them are not given to someone else at the last moment.
        promised = set()
        for wid in self.state.reserved_order:
            w = self.state.pending.get(wid)
            if w is not None and wid not in self.state.nominations:
                promised.add(wid)
                self.consider(w, holds_reservation=True)
        # Then work that has waited past ``aging_after``, oldest first, whatever
        # its team's quota position: a gang larger than its team's nominal
        # quota is not ordered after every within-quota workload forever.
        if self.policy.aging_after is not None:
            budget = AGED_PER_CYCLE * max(1, len(self.state.capacity))
            for w in self.state.oldest_pending(self.now - self.policy.aging_after):
                if budget <= 0:
                    break
                if w.id in self.state.nominations or w.id in promised:
                    continue
                budget -= 1
                promised.add(w.id)
                self.consider(w)
        for w in self.ordered():
            considered += 1
            if considered % STEP == 0:
                yield
            if self.stopped is not None:
                self.wait(w, self.stopped)
                continue
            if w.id in self.state.nominations or w.id in promised:
                continue
            self.consider(w)
        self.result.reservations = [r for rs in self.reservations.values() for r in rs]
        self.result.quota_holds = list(self.quota_holds.values())
        return self.result

    def evict_from_unhealthy(self) -> None:
        for wid in self.state.on_unhealthy_hardware():
            r = self.state.running[wid]
            self.unavailable.add(wid)
            self.ledger.charge(r.workload.team, r.workload.pool, -r.workload.gpu_units)
            self.result.events.append(ev.Event(
                ev.EVICTED, wid, self.now, attempt=r.workload.attempt + 1,
                message="its node or GPU became unhealthy; requeued"))

    def admit_ready_nominations(self) -> None:
        placeable = self.state.placeable
        for wid, nom in self.state.nominations.items():
            if not all(placeable(node, g) for node, gpus in nom.placement for g in gpus):
                # Its quota and its GPUs are not held any more: this cycle's
                # admissions may use them (apply() drops it before it starts them).
                w = self.state.pending[wid]
                self.ledger.charge(w.team, w.pool, -w.gpu_units)
                key = share_key(nom.placement) if w.gpu_share else None
                give_back_set_aside(self.index, self.slots, nom,
                                    self.state.share_aside.get(key, {}).get(wid, 0), placeable)
                self.result.events.append(ev.Event(
                    ev.NOMINATION_DROPPED, wid, self.now,
                    message="the GPUs set aside for it became unhealthy or their node was "
                            "drained; it waits again"))
            elif nom.ready:
                self.result.events.append(ev.Event(
                    ev.ADMITTED, wid, self.now, placement=nom.placement,
                    message="admitted on the GPUs its preemption freed"))
                w = self.state.pending[wid]
                key = share_key(nom.placement) if w.gpu_share else None
                if key is not None and key not in self.slots:
                    # The whole GPU set aside for it opens as shared: others may join.
                    node = self.state.nodes[key[0]]
                    self.slots.add(key, node.pool, node.share_units,
                                   slots_needed(w.gpu_share, node.share_units))
            else:
                self.result.waiting[wid] = (
                    f"waiting for preempted workload(s) {', '.join(sorted(nom.victims))} "
                    f"to exit")

    def selector(self, w: Workload):
        return combined_selector(self.state.teams.get(w.team), w)

    def consider(self, w: Workload, holds_reservation: bool = False) -> None:
        if w.gpus == 0:
            # It holds no GPU, but runs on a node of its pool (if the pool
            # has nodes here): one that takes new work.
            selector = self.selector(w)
            nodes = [n for n in self.state.nodes.values()
                     if n.pool == w.pool and n.matches(selector)]
            if nodes and not any(n.healthy and not n.drained for n in nodes):
                self.wait(w, f"no node of pool {w.pool} takes new work (drained or unhealthy)")
            elif nodes and self.load is not None and asks(w):
                # It holds CPUs and memory of one node: one with room for them.
                node = place_cpu_only(self.load, nodes, w)
                if node is None:
                    self.wait(w, cpu_only_reason(self.load, nodes, w))
                else:
                    self.admit(w, ((node, ()),))
            else:
                self.admit(w, ())
            return
        policy = self.policy
        shape, limits = self.shape_of(w)
        closed = self.known_unplaceable(w, shape)
        # Without explanations a workload that cannot fit is skipped, unless
        # its quota check could still create its team's quota hold (a decision).
        may_hold = policy.quota_holds and policy.quotas and \
            (w.team, w.pool) not in self.quota_holds
        if closed and not self.explain and not may_hold and self.pool_done(w.team, w.pool) \
                and not holds_reservation \
                and not (self.aged(w) and self.may_reserve(w, holds_reservation)):
            if policy.strict_fifo:
                self.stopped = f"behind {w.id}"
            return
        if policy.quotas:
            blocked = self.quota_blocked.get((w.team, w.pool))
            if blocked is not None and w.gpu_units >= blocked[0]:
                reserved = None
                if blocked[2] and policy.reserve_past_team_block and \
                        (holds_reservation or self.aged(w)) and self.ceiling_allows(w):
                    # A teammate's refusal for a full pool says this one does
                    # not fit now either, not that it may not reserve: a
                    # holder keeps its reservation, aged work may take one.
                    reserved = self.try_reserve(w, holds_reservation)
                self.wait(w, reserved or blocked[1])
                return
            reason = self.ledger.check(w.team, w.pool, w.gpu_units)
            if reason is not None:
                # Its own team's lower-priority work may give the quota back.
                if policy.preemption and self.outranks_own_work(w) and self.try_preemption(w):
                    return
                pool_full = self.ceiling_allows(w)
                self.quota_blocked[(w.team, w.pool)] = (w.gpu_units, reason, pool_full)
                self.version += 1
                # Blocked only because the pool is full (its team's ceiling
                # allows it): it waits for GPUs like any other workload, with
                # a reservation when its turn comes, so that a gang larger
                # than its team's nominal quota is not passed forever. One
                # that holds a reservation keeps it: the pool it found with
                # room may have been filled since by work backfilled around
                # that reservation, and losing it would let the next backfill
                # take the GPUs drained for it (a start later than promised).
                # Such a wait for capacity holds no quota: the reservation is
                # its protection, and a hold of the team's nominal quota would
                # keep the team's small work back for the gang's whole wait.
                if policy.quota_holds and not pool_full and \
                        (w.team, w.pool) not in self.quota_holds:
                    self.hold_quota(w)
                reserved = None
                after = policy.reserve_for_borrowers_after
                borrower_turn = holds_reservation or (
                    after is not None and self.now - w.submit_time >= after)
                if borrower_turn and pool_full:
                    reserved = self.try_reserve(w, holds_reservation)
                self.wait(w, reserved or reason)
                return
            hold = self.quota_holds.get((w.team, w.pool))
            if hold is not None and not hold.allows(w.gpu_units, self.end_of(w)):
                self.wait(w, f"waiting behind {hold.workload_id} of team {w.team}, which needs "
                             f"the team's {w.pool} quota first")
                return
        placement = None if closed else self.place(w, shape, limits)
        if placement is not None and policy.quotas and \
                self.ledger.breaks_lending(w.team, w.pool, w.gpu_units):
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
            self.wait(w, reserved or self.capacity_reason(w))
        if policy.strict_fifo:
            self.stopped = f"behind {w.id} (strict FIFO: nothing passes a blocked workload)"

    def ceiling_allows(self, w: Workload) -> bool:
        """Its team's ceiling (nominal + borrowing limit) has room for it: a
        quota refusal then only says the pool is full."""
        return self.ledger.used.get((w.team, w.pool), 0) + w.gpu_units <= \
            self.ledger.quota(w.team, w.pool).ceiling

    def try_reserve(self, w: Workload, holds_reservation: bool) -> Optional[str]:
        """A reservation for ``w`` if a slot is free (its own, a regular one,
        else an aged one): the waiting reason, or None."""
        if not self.may_reserve(w, holds_reservation):
            return None
        aged_slot = self.aged(w) and (holds_reservation or self.regular_reservations(
            w.pool) >= self.policy.max_reservations_per_pool)
        reserved = self.reserve(w)
        if reserved is not None and aged_slot:
            self.aged_reservations[w.pool] = self.aged_reservations.get(w.pool, 0) + 1
        return reserved

    def end_of(self, w: Workload) -> float:
        return self.now + w.time_limit if w.time_limit is not None else float("inf")

    def shape_of(self, w: Workload) -> tuple[Optional[tuple], dict[str, int]]:
        """The key under which placement failures are cached (None when the
        workload has node selectors), and the per-node caps that backfill
        reservations put on it."""
        end = self.end_of(w)
        beaten = self.beaten(w.pool, end)
        limits = self.limits_by_beats.get((w.pool, beaten))
        if limits is None:
            limits = self.limits_by_beats[(w.pool, beaten)] = {}
            for r in self.reservations.get(w.pool, ()):
                for node, spare in r.limits_for(end).items():
                    limits[node] = min(spare, limits.get(node, spare))
        if self.load is not None and asks(w):
            # Nodes without room for its CPUs or memory: no GPU of theirs.
            caps = self.load.caps((n for n in self.index.nodes.values() if n.pool == w.pool), w)
            if caps:
                limits = {**limits, **caps}
        if self.selector(w) or w.gpu_share:
            return None, limits
        return (w.pool, w.num_nodes, w.topology, w.topology_key, beaten, w.cpus, w.memory), limits

    def beaten(self, pool: str, end: float) -> tuple[int, int]:
        """Which of the pool's reservations work ending at ``end`` ends
        before (``end <= start``): the pool's number of reservations and how
        many start before ``end``. Two ends get the same key exactly when
        they end before the same reservations."""
        starts = self.reservation_starts.get(pool, [])
        return len(starts), bisect.bisect_left(starts, end)

    def known_unplaceable(self, w: Workload, shape: Optional[tuple]) -> bool:
        """A smaller workload of the same shape already failed this cycle;
        free GPUs only shrink during a cycle, so this one fails too."""
        if w.gpu_share:
            return False  # shared GPUs may have room however few GPUs are free
        if self.index.pool_free.get(w.pool, 0) < w.gpus:
            return True
        smallest_failed = self.failed.get(shape) if shape is not None else None
        return smallest_failed is not None and w.gpus_per_node >= smallest_failed

    def place(self, w: Workload, shape: Optional[tuple], limits) -> Optional[Placement]:
        if w.gpu_share:
            end = self.end_of(w)
            pool_res = self.reservations.get(w.pool, ())
            return find_share_placement(
                self.index, self.slots, self.state.nodes, w, self.selector(w), limits,
                lambda key: all(r.may_join(key, end) for r in pool_res))
        drain_aware = self.policy.drain_aware_placement
        placement = find_placement(self.index, w.pool, w.gpus_per_node, w.num_nodes,
                                   self.selector(w), w.topology, w.topology_key, limits,
                                   self.end_of(w) if drain_aware else float("inf"),
                                   self.drain if drain_aware else {})
        if placement is None and shape is not None:
            self.failed[shape] = min(w.gpus_per_node, self.failed.get(shape, w.gpus_per_node))
            self.version += 1
        return placement

    def admit(self, w: Workload, placement: Placement) -> None:
        self.version += 1
        self.catalog.admitted(w.team, w.pool, w.gpu_units)
        end = self.end_of(w)
        if w.gpu_share:
            # Opening takes a whole GPU from the reservations; joining one
            # they count on getting back takes a spare one (Reservation.joined).
            node, g = key = share_key(placement)
            if key not in self.share_until:
                self.share_until[key] = self._last_share_end(key)
            self.share_until[key] = max(self.share_until[key], end)
            opened = open_or_join(self.index, self.slots, self.state.nodes[node], g, w)
            for r in self.reservations.get(w.pool, ()):
                if opened:
                    r.opened(key, end)
                else:
                    r.joined(key, end)
        else:
            self.index.take_placement(placement)
            for r in self.reservations.get(w.pool, ()):
                r.consume(placement, end)
        if self.load is not None:
            self.load.add(placement, w)
        self.ledger.charge(w.team, w.pool, w.gpu_units)
        self.limits_by_beats.clear()
        for node, _ in placement:
            self.drain[node] = max(self.drain.get(node, float("-inf")), end)
        if end != float("inf") and placement and not w.gpu_share:
            self.admitted_ends.setdefault(w.pool, []).append((end, placement))
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

    def _last_share_end(self, key: tuple[str, int]) -> float:
        """When shared GPU ``key``'s running shares end (never, with slots set
        aside on it for a preemptor; -inf when it has none)."""
        if key in self.state.share_aside:
            return float("inf")
        running = self.state.running
        return max((running[wid].end_estimate for wid in self.state.sharers.get(key, ())),
                   default=float("-inf"))

    def _count_share(self, w: Workload) -> None:
        if self.policy.fair_share and w.pool:
            pools = self.team_pool_usage.setdefault(w.team, {})
            pools[w.pool] = pools.get(w.pool, 0.0) + w.gpu_units / 2
            self.shares[w.team] = self._share(w.team)

    def count_admitted(self, w: Workload) -> None:
        """Order the rest as if ``w`` had been admitted: its team's quota
        and share include it (for the forecast, which places nothing)."""
        self.ledger.charge(w.team, w.pool, w.gpu_units)
        self._count_share(w)

    def hold_quota(self, w: Workload) -> None:
        """Backfill inside a team: the first workload its team's ceiling
        (nominal + borrowing limit) blocks gets the time the team's running
        work frees enough of it; later work of the team may start only if it
        ends by then or leaves room."""
        used = self.ledger.used.get((w.team, w.pool), 0)
        bound = self.ledger.quota(w.team, w.pool).ceiling
        if w.gpu_units > bound:
            return
        running = self.state.running
        for end, _start, wid in self.state.team_ends.get((w.team, w.pool), ()):
            if wid in self.unavailable:
                continue
            used -= running[wid].workload.gpu_units
            if used + w.gpu_units <= bound:
                self.quota_holds[(w.team, w.pool)] = QuotaHold(w.id, w.team, w.pool, end,
                                                                bound - used - w.gpu_units)
                self.version += 1
                return

    def outranks_own_work(self, w: Workload) -> bool:
        order = self.state.eviction_order.get((w.team, w.pool))
        return bool(order) and order[0][0] < self.policy.priority_value(w.priority)

    def try_preemption(self, w: Workload) -> bool:
        key = (w.team, w.pool)
        if key in self.preempt_tried:
            return False
        # One attempt per team and pool per cycle, made by its first blocked
        # workload; a batch job that has not waited long enough spends it.
        self.preempt_tried.add(key)
        self.version += 1
        if w.kind == JOB and self.now - w.submit_time < self.policy.preemption_delay:
            return False
        cands = candidates(w, self.catalog, self.ledger, self.policy, self.shares,
                           self.unavailable | self.not_victims if self.not_victims
                           else self.unavailable, self.now)
        _shape, limits = self.shape_of(w)
        plan = plan_preemption(w, self.selector(w), self.index, self.ledger, cands,
                               self.catalog, limits, self.slots)
        if plan is None:
            return False
        kill_grace = self.policy.default_grace_period
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
            self.result.events.append(ev.Event(
                ev.PREEMPTED, victim.id, self.now, message=why, preemptor_id=w.id,
                kill_at=self.now + grace, attempt=victim.attempt + 1))
        for node, gpus in plan.placement:
            free = set(self.index.free[node])
            now_free = tuple(g for g in gpus if g in free)
            if now_free:
                self.index.take(node, now_free)
            for g in gpus:
                if (node, g) not in self.slots:
                    continue
                if w.gpu_share:  # its slots, free once the victims exit
                    n = self.state.nodes[node]
                    self.slots.add((node, g), n.pool, n.share_units,
                                   slots_needed(w.gpu_share, n.share_units))
                    self.share_until[(node, g)] = float("inf")  # no reservation counts on it
                else:  # no new share joins a GPU its shares are leaving
                    self.slots.close((node, g))
        self.ledger.charge(w.team, w.pool, w.gpu_units)
        self.catalog.admitted(w.team, w.pool, w.gpu_units)
        victims = ", ".join(c.running.workload.id for c in plan.victims)
        self.result.events.append(ev.Event(
            ev.NOMINATED, w.id, self.now, placement=plan.placement,
            message=f"GPUs set aside; waiting for preempted {victims} to exit"))
        return True

    def shared_gpus_kept(self, w: Workload) -> list[str]:
        """The reservations that keep share ``w`` off the shared GPUs with room."""
        end = self.end_of(w)
        kept = set()
        for key in self.slots.candidates(w.pool, 1):
            need = slots_needed(w.gpu_share, self.slots.units[key])
            if need is not None and self.slots.free(key) >= need:
                kept |= {r.workload_id for r in self.reservations.get(w.pool, ())
                         if not r.may_join(key, end)}
        return sorted(kept)

    def capacity_reason(self, w: Workload) -> str:
        free = self.index.pool_free.get(w.pool, 0)
        if w.gpu_share:
            what = f"waiting for a {w.gpu_share:g} share of one {w.pool} GPU"
            kept = self.shared_gpus_kept(w)
            if kept:
                return (f"{what} (the shared GPUs with room are kept for the reserved start of "
                        f"{', '.join(kept)}; a time limit ending before it would let it join)")
            return f"{what} (no shared GPU has room, {free} whole GPU(s) free, none placeable)"
        shape = (f"{w.num_nodes} nodes × {w.gpus_per_node}" if w.num_nodes > 1
                 else f"{w.gpus_per_node} ×")
        reason = f"waiting for {shape} {w.pool} GPUs ({free} free in the pool, none placeable"
        selector = self.selector(w)
        if selector:
            labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            reason += f" on nodes labelled {labels}"
        short = self.resource_shortfall(w)
        if short:
            reason += f" with {request_words(w)} free: {short}"
        return reason + ")"

    def resource_shortfall(self, w: Workload) -> str:
        """Where GPUs would fit but CPUs or memory do not: which nodes lack what."""
        if self.load is None or not asks(w):
            return ""
        selector = self.selector(w)
        free = self.index.free
        short = [self.load.shortfall(n, w) for n in self.index.nodes.values()
                 if n.pool == w.pool and (not selector or n.matches(selector))
                 and len(free.get(n.name, ())) >= w.gpus_per_node and not self.load.fits(n, w)]
        return "; ".join(short[:3]) + (f"; {len(short) - 3} more" if len(short) > 3 else "")

    def reserve(self, w: Workload) -> Optional[str]:
        pool_res = self.reservations.setdefault(w.pool, [])
        state = self.state
        running = state.running
        set_aside = state.set_aside
        nodes = state.nodes

        shared_seen: list[tuple[float, tuple[str, int]]] = []

        def running_releases():
            for end, _start, wid in state.ends.get(w.pool, ()):
                if wid not in self.unavailable:
                    r = running[wid]
                    if not r.workload.gpu_share:
                        yield end, r.placement
                    # A shared GPU comes back when its last share ends.
                    elif share_key(r.placement) not in self.share_until and last_share(state, r):
                        shared_seen.append((end, share_key(r.placement)))
                        yield end, r.placement

        def touched_shared_releases():
            for until, key in sorted((t, k) for k, t in self.share_until.items()
                                     if t != float("inf") and k not in state.share_aside
                                     and nodes[k[0]].pool == w.pool):
                shared_seen.append((until, key))
                yield until, ((key[0], (key[1],)),)

        def returned(node: str, gpus: tuple[int, ...]) -> int:
            count = self.returned.get((node, gpus))
            if count is None:
                count = self.returned[(node, gpus)] = sum(
                    1 for g in gpus if (node, g) not in set_aside and state.placeable(node, g))
            return count

        reservation = find_reservation(
            w.id, nodes, self.index.free_counts(w.pool),
            merged_releases(running_releases(),
                            sorted(self.admitted_ends.get(w.pool, []), key=lambda x: x[0]),
                            *([touched_shared_releases()] if self.share_until else [])),
            w.gpus_per_node, w.num_nodes, self.selector(w), w.topology, w.topology_key, returned)
        if reservation is None:
            return None
        reservation.returning = {key for end, key in shared_seen
                                 if end <= reservation.start and key[0] in reservation.spare}
        pool_res.append(reservation)
        bisect.insort(self.reservation_starts.setdefault(w.pool, []), reservation.start)
        self.limits_by_beats.clear()
        self.version += 1
        # Placement failures cached before this reservation stay valid: it only
        # takes capacity away from later workloads.
        wait_s = max(0.0, reservation.start - self.now)
        what = (f"a {w.gpu_share:g} share of one {w.pool} GPU" if w.gpu_share
                else f"{w.gpus} {w.pool} GPUs")
        return (f"waiting for {what}; reserved to start within "
                f"{_duration(wait_s)} (backfill keeps that start)")

    def wait(self, w: Workload, reason: str) -> None:
        if self.explain:
            self.result.waiting[w.id] = reason


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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


def plan_cycle(state: ClusterState, policy: Policy, now: float,
               explain: bool = True) -> CycleResult:
    """Decide this cycle. ``explain=False`` skips the waiting reasons (and the
    work that only they need), for callers that do not show them."""
    return _Cycle(state, policy, now, explain).run()


def plan_cycle_steps(state: ClusterState, policy: Policy, now: float, explain: bool = True):
    """``plan_cycle`` as a generator (``yield from`` it: it returns the result)."""
    return (yield from _Cycle(state, policy, now, explain).steps())
