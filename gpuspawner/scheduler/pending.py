"""Pending work, indexed for the cycle (``PendingQueues``): the queues teams
compete through, the shapes they wait with, the oldest for aging, and each
workload's place in its queue."""
from __future__ import annotations

import bisect
import heapq
import time
from typing import Callable, Iterable, Mapping, Optional

from .model import Team, Workload

# The topology field of a share's shape class (``ClusterState.shape_class``).
SHARE_SHAPE = "share"


class PendingQueues:
    """Pending work, indexed for the cycle: each group's queue (a team's, or
    one for all), the shapes each group waits with, the oldest first for
    aging, and counts per team, pool and kind."""

    def __init__(self, teams: Mapping[str, Team], queue_key: Callable[[Workload], tuple],
                 group_by_team: bool):
        self.teams = teams  # ClusterState's, changed in place
        self.queue_key = queue_key
        self.group_by_team = group_by_team
        self.pending: dict[str, Workload] = {}
        # group -> queue of workloads (lazy: stale entries are skipped).
        self.queues: dict[str, list[Workload]] = {}
        # group -> the queue keys of its stale entries, sorted: a place in
        # the queue is then two bisections (``position``), not a walk.
        self._stale_keys: dict[str, list[tuple]] = {}
        # Odd while a queue is compacted (in the cycle's worker thread, while
        # the event loop may be reading positions): ``position`` reads again.
        self._compactions = 0
        # group -> pool -> shape -> heap of (time limit, id) of its pending
        # workloads (lazy: entries of workloads gone are dropped when on top).
        # Lets a cycle skip a team once every shape it waits with cannot fit.
        self.pending_shapes: dict[str, dict[str, dict[tuple, list]]] = {}
        # id -> its queue key, computed once at ``add``, for the pending
        # workloads only (a removal takes its own).
        self.queue_keys: dict[str, tuple] = {}
        # (team, pool, kind) -> [pending workloads, their GPU units]: kept
        # as work comes and goes, so that what shows the queue's size (the
        # pools, the metrics, the queue page) does not count it every time.
        self.pending_counts: dict[tuple[str, str, str], list] = {}
        # (submit time, id, attempt) of pending work, oldest first, for aging
        # (lazy: stale entries are skipped, and dropped when they are half).
        self.by_submit: list[tuple[float, str, int]] = []
        self._by_submit_stale = 0

    def group_of(self, w: Workload) -> str:
        return w.team if self.group_by_team else ""

    def add(self, w: Workload) -> None:
        if w.id in self.pending:
            raise ValueError(f"workload {w.id} already exists")
        self.pending[w.id] = w
        counted = self.pending_counts.setdefault((w.team, w.pool, w.kind), [0, 0.0])
        counted[0] += 1
        counted[1] += w.gpu_units
        group = self.group_of(w)
        shapes = self.pending_shapes.setdefault(group, {}).setdefault(w.pool, {})
        limit = w.time_limit if w.time_limit is not None else float("inf")
        heapq.heappush(shapes.setdefault(self.shape_class(w), []), (limit, w.id, w.attempt))
        self.queue_keys[w.id] = self.queue_key(w)
        bisect.insort(self.by_submit, (w.submit_time, w.id, w.attempt))
        # Kept sorted on insertion: arrivals are few per cycle, sorting whole
        # queues every cycle is not.
        bisect.insort(self.queues.setdefault(group, []), w, key=self.queue_key)

    def remove(self, w: Workload) -> None:
        del self.pending[w.id]
        key = (w.team, w.pool, w.kind)
        counted = self.pending_counts[key]
        counted[0] -= 1
        counted[1] -= w.gpu_units
        if not counted[0]:
            del self.pending_counts[key]
        self._by_submit_stale += 1
        if self._by_submit_stale * 2 > len(self.by_submit):
            self.by_submit = [e for e in self.by_submit if self._is_pending(e)]
            self._by_submit_stale = 0
        group = self.group_of(w)
        bisect.insort(self._stale_keys.setdefault(group, []), self.queue_keys.pop(w.id))
        pools = self.pending_shapes[group]
        shapes = pools[w.pool]
        shape = self.shape_class(w)
        heap = shapes[shape]
        while heap and not self._is_pending(heap[0]):
            heapq.heappop(heap)
        if not heap:
            del shapes[shape]
            if not shapes:
                del pools[w.pool]

    def oldest(self, submitted_by: float) -> Iterable[Workload]:
        """Pending workloads submitted at or before ``submitted_by``, oldest first."""
        for submit, wid, _attempt in self.by_submit:
            if submit > submitted_by:
                return
            w = self.pending.get(wid)
            if w is not None and w.submit_time == submit and w.attempt == _attempt:
                yield w

    def _is_pending(self, entry: tuple) -> bool:
        w = self.pending.get(entry[1])
        return w is not None and w.attempt == entry[2]

    def shortest_limit(self, heap: list) -> float:
        """Smallest time limit among a shape's pending workloads."""
        while heap and not self._is_pending(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def shape_class(self, w: Workload) -> tuple:
        team = self.teams.get(w.team)
        constrained = bool(w.node_selector) or bool(w.dataset_nodes) or \
            (team is not None and bool(team.node_selector))
        if w.gpu_share:
            return (w.gpu_share, 1, SHARE_SHAPE, "", constrained, w.cpus, w.memory)
        # The parts ``WholeGpus.shape`` keys failures by (the early exit's lookup).
        return (w.gpus_per_node, w.num_nodes, w.topology, w.topology_key, constrained,
                w.cpus, w.memory)

    def queue(self, group: str) -> list[Workload]:
        """The group's pending workloads in queue order (stale entries removed
        when they are many, so callers must still check ``pending``)."""
        queue = self.queues.get(group, [])
        if len(self._stale_keys.get(group, ())) * 2 > len(queue):
            pending = self.pending
            self._compactions += 1
            queue[:] = [w for w in queue if pending.get(w.id) is w]
            self._stale_keys[group] = []
            self._compactions += 1
        return queue

    def position(self, w: Workload) -> Optional[int]:
        """``w``'s place in its group's queue (1: the next of it to be
        considered), None if it is not pending. The entries before it less
        the stale ones before it, two bisections: the Jobs panel asks for its
        newest, at the end of a queue that may be 100,000 long."""
        key = self.queue_keys.get(w.id)  # a read may race the loop's removal
        if key is None or self.pending.get(w.id) is not w:
            return None
        group = self.group_of(w)
        while True:
            begun = self._compactions
            if begun % 2 == 0:
                try:
                    before = (bisect.bisect_left(self.queues.get(group, ()), key,
                                                 key=self.queue_key)
                              - bisect.bisect_left(self._stale_keys.get(group, ()), key))
                except IndexError:  # the queue was compacted under the bisection
                    before = None
                if before is not None and self._compactions == begun:
                    return before + 1
            time.sleep(0)  # the interpreter to the compacting thread, until it is done
