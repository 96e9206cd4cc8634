"""Backfill inside one cycle: the reservations blocked workloads get, and
the caps they put on everything placed after them (EASY backfill,
``backfill.py``), on the cycle's scratch ``Space``."""
from __future__ import annotations

import bisect
from typing import Optional

from ..backfill import Reservation, find_reservation, merged_releases
from ..model import Workload
from ..node_load import asks, request_words
from ..policy import Policy
from .results import duration
from .space import Space


# What ``reserve`` says of a reservation in a cycle without explanations,
# where no waiting reason is shown: a long queue's holders renew theirs every
# cycle, and saying when each starts was a tenth of a replay's time.
RESERVED = "reserved"
_UNKNOWN = object()  # a shape not yet searched for


class Searches:
    """Reservation searches made before anything changed in a cycle, kept
    for the next cycles while the state's layout is the same
    (``ClusterState.layout_changes``: nothing started, ended, was set aside
    or changed on nodes and teams; submits may have come). A search reads
    only that layout and the gang's shape, so it finds the same again: with
    a long queue most cycles follow a submit, and their holders' first
    searches were a sixth of a replay's time."""

    def __init__(self):
        self.state = None
        self.layout = -1
        self.found: dict[tuple, Optional[tuple]] = {}

    def of(self, state) -> dict[tuple, Optional[tuple]]:
        """The searches kept for ``state`` as it is now (emptied once its
        layout changed)."""
        if self.state is not state or self.layout != state.layout_changes:
            self.state, self.layout = state, state.layout_changes
            self.found = {}
        return self.found


class Reservations:
    def __init__(self, space: Space, policy: Policy, now: float, explain: bool = True,
                 searches: Optional[Searches] = None):
        self.space = space
        self.searches = searches
        self.policy = policy
        self.now = now
        self.explain = explain
        self.by_pool: dict[str, list[Reservation]] = {}
        # pool -> the start times of its reservations, sorted
        self.starts: dict[str, list[float]] = {}
        # pool -> its reservations in start order, and the per-node caps of
        # the first k of them (k = 0, 1, ...: what work ending after the k-th
        # start and before the next is capped by); the caps are dropped when
        # something is admitted (the spare GPUs change) and cut back to where
        # a new reservation goes.
        self.by_start: dict[str, list[Reservation]] = {}
        self.prefix: dict[str, list[dict[str, int]]] = {}
        # pool -> how many of its reservations aged workloads hold
        self.aged: dict[str, int] = {}
        # (gang shape, space version) -> (start, spare, returning) or None:
        # workloads of one shape get the same reservation while nothing was
        # placed, set aside or released in between (the holders, one after
        # the other at the start of a cycle).
        self.found: dict[tuple, Optional[tuple]] = {}

    def of_pool(self, pool: str) -> list[Reservation]:
        return self.by_pool.get(pool, [])

    def all(self) -> list[Reservation]:
        return [r for rs in self.by_pool.values() for r in rs]

    def changed(self, pool: str, placement) -> None:
        """Something admitted in ``pool`` on ``placement``: its reservations'
        spare GPUs on those nodes may have changed (``Reservation.consume``).
        The caps are kept and mended on those nodes only, level by level:
        rebuilding every level after every admission was most of a long
        queue's replay time."""
        prefix = self.prefix.get(pool)
        if not prefix or len(prefix) == 1:
            return
        by_start = self.by_start[pool]
        nodes = {node for node, _gpus in placement}
        for k in range(1, len(prefix)):
            below, level, spare = prefix[k - 1], prefix[k], by_start[k - 1].spare
            for node in nodes:
                cap = below.get(node)
                if node in spare:
                    cap = spare[node] if cap is None else min(cap, spare[node])
                if cap is None:
                    level.pop(node, None)
                else:
                    level[node] = cap

    def regular(self, pool: str) -> int:
        return len(self.by_pool.get(pool, ())) - self.aged.get(pool, 0)

    def pool_given(self, pool: str) -> bool:
        """The pool's regular reservations are all given (or backfill is off)."""
        return not self.policy.backfill or self.regular(pool) >= \
            self.policy.max_reservations_per_pool

    def aged_given(self, pool: str) -> bool:
        """The pool's reservations for aged work are all given (or backfill is off)."""
        return not self.policy.backfill or self.aged.get(pool, 0) >= \
            self.policy.max_aged_reservations_per_pool

    def may_reserve(self, w: Workload, holds_reservation: bool, aged: bool) -> bool:
        return self.slot_free(w.pool, aged, holds_reservation)

    def slot_free(self, pool: str, aged: bool, holds_reservation: bool = False) -> bool:
        """A workload of ``pool`` (``aged``: waited past ``aging_after``)
        could get a reservation now: its own, a regular one, else an aged one."""
        policy = self.policy
        if not policy.backfill:
            return False
        cap = policy.max_held_reservations_per_pool
        if cap is not None and len(self.by_pool.get(pool, ())) >= cap:
            return False
        if holds_reservation or self.regular(pool) < policy.max_reservations_per_pool:
            return True
        return aged and self.aged.get(pool, 0) < policy.max_aged_reservations_per_pool

    def beaten(self, pool: str, end: float, passes_borrowers: bool = False) -> tuple:
        """Which of the pool's reservations work ending at ``end`` ends
        before (``end <= start``): the pool's number of reservations and how
        many start before ``end``. Two ends get the same key exactly when
        they end before the same reservations. ``passes_borrowers``: work
        that borrowers' reservations do not hold back (a third item, True,
        where one of those starting before ``end`` is a borrower's)."""
        starts = self.starts.get(pool, [])
        k = bisect.bisect_left(starts, end)
        if passes_borrowers and any(r.borrowing for r in self.by_start.get(pool, [])[:k]):
            return len(starts), k, True
        return len(starts), k

    def limits(self, pool: str, beaten: tuple[int, int], end: float) -> dict[str, int]:
        """The per-node caps that the pool's reservations put on work
        ending at ``end``: those of the ones starting before it (``beaten``),
        which are the first in start order."""
        by_start = self.by_start.get(pool, [])
        if len(beaten) > 2:  # borrowers' reservations passed: not cached
            limits: dict[str, int] = {}
            for r in by_start[:beaten[1]]:
                if not r.borrowing:
                    _cap_by(limits, r)
            return limits
        prefix = self.prefix.setdefault(pool, [{}])
        while len(prefix) <= beaten[1]:
            # The caps of the first k reservations, one more each time.
            prefix.append(_cap_by(dict(prefix[-1]), by_start[len(prefix) - 1]))
        return prefix[beaten[1]]

    def caps(self, w: Workload, end: float, resource_caps: dict[str, int],
             passes_borrowers: bool = False) -> dict[str, int]:
        """The per-node caps on ``w`` ending at ``end``: those of the
        reservations starting before then (but borrowers' where
        ``passes_borrowers``), the nodes' own room for it
        (``resource_caps``) and, where it asks for CPUs or memory, the room
        those reservations hold."""
        beaten = self.beaten(w.pool, end, passes_borrowers)
        limits = self.limits(w.pool, beaten, end)
        caps = resource_caps
        if asks(w):
            caps = {**caps, **self.room_caps(w, beaten, end)}
        return {**limits, **caps} if caps else limits

    def try_reserve(self, w: Workload, holds_reservation: bool, aged: bool, selector,
                    unavailable: set[str], borrowing: bool = False) -> Optional[str]:
        """A reservation for ``w`` if a slot is free (its own, a regular one,
        else an aged one): the waiting reason, or None."""
        if not self.may_reserve(w, holds_reservation, aged):
            return None
        aged_slot = aged and (holds_reservation or self.regular(
            w.pool) >= self.policy.max_reservations_per_pool)
        reserved = self.reserve(w, selector, unavailable, borrowing)
        if reserved is not None and aged_slot:
            self.aged[w.pool] = self.aged.get(w.pool, 0) + 1
        return reserved

    def find(self, w: Workload, selector, unavailable: set[str]) -> Optional[Reservation]:
        """The earliest start of ``w``'s gang, and the nodes it will use then
        (with room for its CPUs and memory, where nodes count them)."""
        space = self.space
        key = (w.pool, w.gpus_per_node, w.num_nodes,
               tuple(sorted(selector.items())) if selector else (),
               w.topology, w.topology_key, space.version, w.cpus, w.memory)
        found = self.found.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._search(w, key, selector, unavailable)
        return None if found is None else Reservation(
            w.id, found[0], dict(found[1]), set(found[2]), dict(found[3]))

    def _search(self, w: Workload, key: tuple, selector, unavailable: set[str]
                ) -> Optional[tuple]:
        """``find``'s answer for a shape not yet known in this space version
        (start, spare, returning, room), kept for the next workloads of the
        shape and, before anything changed this cycle, for the next cycles."""
        space = self.space
        # Before anything changed this cycle, the space is the state's layout.
        kept = self.searches.of(space.state) if self.searches is not None and \
            space.version == 0 and not unavailable else None
        if len(self.found) > 256:
            self.found.clear()
        if kept is not None and key in kept:
            found = self.found[key] = kept[key]
            return found
        shared_seen: list[tuple[float, tuple[str, int]]] = []
        room = space.room_clock(w, unavailable)
        streams = space.releases(w.pool, unavailable, shared_seen)
        if room is not None:
            streams = (*streams, room.times())
        reservation = find_reservation(
            w.id, space.state.nodes, space.index.free_counts(w.pool),
            merged_releases(*streams), w.gpus_per_node, w.num_nodes, selector, w.topology,
            w.topology_key, space.returned_count, room)
        found = None
        if reservation is not None:
            returning = {k for end, k in shared_seen
                         if end <= reservation.start and k[0] in reservation.spare}
            found = (reservation.start, reservation.spare, returning, reservation.room)
        self.found[key] = found
        if kept is not None and len(kept) < 256:
            kept[key] = found
        return found

    def room_caps(self, w: Workload, beaten: tuple[int, int], end: float) -> dict[str, int]:
        """Nodes where ``w`` (ending at ``end``) would take CPUs or memory
        that a reservation starting before ``end`` holds: cap 0."""
        caps: dict[str, int] = {}
        for r in self.by_start.get(w.pool, [])[:beaten[1]]:
            if r.room and not (len(beaten) > 2 and r.borrowing):
                caps.update(r.room_caps(w, end))
        return caps

    def reserve(self, w: Workload, selector, unavailable: set[str],
                borrowing: bool = False) -> Optional[str]:
        pool_res = self.by_pool.setdefault(w.pool, [])
        reservation = self.find(w, selector, unavailable)
        if reservation is None:
            return None
        reservation.borrowing = borrowing
        pool_res.append(reservation)
        starts = self.starts.setdefault(w.pool, [])
        at = bisect.bisect_right(starts, reservation.start)
        starts.insert(at, reservation.start)
        self.by_start.setdefault(w.pool, []).insert(at, reservation)
        del self.prefix.setdefault(w.pool, [{}])[at + 1:]
        # Placement failures cached before this reservation stay valid: it only
        # takes capacity away from later workloads.
        if not self.explain:
            return RESERVED
        wait_s = max(0.0, reservation.start - self.now)
        what = (f"a {w.gpu_share:g} share of one {w.pool} GPU" if w.gpu_share
                else f"{w.gpus} {w.pool} GPUs" if w.gpus
                else f"{request_words(w)} on a node of pool {w.pool}")
        return (f"waiting for {what}; reserved to start within "
                f"{duration(wait_s)} (backfill keeps that start)")


def _cap_by(limits: dict[str, int], r: Reservation) -> dict[str, int]:
    """``limits`` (changed in place) capped by ``r``'s spare GPUs per node."""
    for node, spare in r.spare.items():
        limits[node] = min(spare, limits.get(node, spare))
    return limits
