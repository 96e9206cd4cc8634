"""The order a cycle considers pending work in.

Teams compete through the heads of their queues. A head that stays within
its team's nominal quota goes before one that needs to borrow; then higher
priority; then, between teams, the lower weighted dominant share; then the
older. Inside a team the queue is priority, then age.
"""
from __future__ import annotations

import heapq
from typing import Optional

from ..model import Workload
from ..pending import SHARE_SHAPE


class Ordering:
    """The regular order of one cycle (``_Cycle`` is ``cycle``: its quota
    ledger, shares and what it has decided so far)."""

    def __init__(self, cycle):
        self.cycle = cycle
        self.queue_keys = cycle.state.queue_keys
        # Bumped whenever a decision could make a team's remaining queue
        # hopeless; a team found hopeful at the current version is not re-checked.
        self.version = 0
        self.hopeful: dict[str, int] = {}
        # Set when the cycle stops (strict FIFO): why the rest waits.
        self.stopped: Optional[str] = None

    def key(self, w: Workload) -> tuple:
        # The team's queue key is (-priority, submit time, id) or (submit
        # time, id); the team's state (borrowing? share?) slots in around it.
        cycle = self.cycle
        queue_key = self.queue_keys[w.id]
        needs_borrow = cycle.quotas and not cycle.ledger.within_nominal(w.team, w.pool,
                                                                        w.gpu_units)
        share = cycle.shares.get(w.team, 0.0) if cycle.fair_share else 0.0
        return (needs_borrow, queue_key[0], share) + queue_key[1:]

    def ordered(self):
        """Pending workloads, teams interleaved through their queue heads.

        Without explanations a team is dropped as soon as every pool it waits
        for is full and has had its preemption attempt and reservation: the
        rest of its queue cannot change this cycle's decisions.
        """
        state = self.cycle.state
        pending = state.pending
        heap = []
        cursors = {}
        for group in list(state.queues):
            queue = state.queue(group)
            cursors[group] = [queue, 0]
            head = self._next(group, cursors)
            if head is not None:
                heap.append((self.key(head), group, head))
        heapq.heapify(heap)
        explain = self.cycle.explain
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
                nkey = self.key(nxt)
                if heap and nkey > heap[0][0]:
                    heapq.heappush(heap, (nkey, group, nxt))
                    break
                w = nxt

    def _next(self, group, cursors) -> Optional[Workload]:
        queue, i = cursors[group]
        pending = self.cycle.state.pending
        while i < len(queue):
            w = queue[i]
            i += 1
            if pending.get(w.id) is w:
                cursors[group][1] = i
                return w
        cursors[group][1] = i
        return None

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
        cycle = self.cycle
        if cycle.policy.preemption and not cycle.quotas:
            return False  # preemption is per team, but the group mixes teams
        space, state = cycle.space, cycle.state
        pool_free = space.index.pool_free
        for pool, shapes in state.pending_shapes.get(group, {}).items():
            if not pool or not cycle.aged_settled(pool):
                return False
            blocked = cycle.quota_blocked.get((team, pool))
            quota_blocked = blocked[0] if blocked is not None else float("inf")
            # Aged work refused by its team's block for a full pool may still
            # take a reservation past it (QuotaGate.quota_allows).
            may_reserve_past = (blocked is not None and blocked[2]
                                and cycle.policy.reserve_past_team_block and cycle.has_aged()
                                and cycle.reservations.slot_free(pool, aged=True))
            done = cycle.pool_done(team, pool)
            if done:  # what fits but breaks lending waits too, once the attempts are made
                quota_blocked = min(quota_blocked, cycle.gate.lending_block((team, pool)))
            free = pool_free.get(pool, 0)
            for (gpn, nodes, topology, key, constrained, cpus, memory), limits in shapes.items():
                if gpn * nodes >= quota_blocked:
                    if may_reserve_past:
                        return False
                    continue
                if topology == SHARE_SHAPE:
                    return False  # may join a shared GPU however few GPUs are free
                if not done:
                    return False
                if gpn * nodes > free:
                    continue
                if constrained:
                    return False
                beaten = cycle.reservations.beaten(
                    pool, cycle.now + state.shortest_limit(limits))
                smallest_failed = space.failed.get((pool, nodes, topology, key, beaten, cpus,
                                                    memory))
                if smallest_failed is None or gpn < smallest_failed:
                    return False
        return True
