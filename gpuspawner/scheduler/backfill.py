"""EASY backfill reservations.

When the workload at the head of the order cannot be placed, it gets a
reservation: the earliest time its gang fits, given when running work must
end at the latest (start + time limit), and the nodes it will use then.
Later workloads may still start if they end before that time, or if they
leave the reserved nodes enough GPUs (each reserved node's ``spare``).

Where nodes count CPUs and memory and the reserved workload asks for them,
the walk waits for those too (``node_load.RoomClock``), and the reservation
holds them: each reserved node's ``room`` is the CPUs and memory later work
(not ending before ``start``) may take there.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional

from .model import TOPOLOGY_NONE, TOPOLOGY_REQUIRED, Node, Placement, Workload
from .node_load import EPS, RoomClock


@dataclass
class Reservation:
    workload_id: str
    start: float
    # node -> GPUs on it that later work (not ending before ``start``) may take.
    spare: dict[str, int] = field(default_factory=dict)
    # Shared GPUs on the reserved nodes that it counts on getting back by
    # ``start`` (every share on them ends by then): a share that would stay
    # past ``start`` joins one only by taking one of the node's spare GPUs.
    returning: set[tuple[str, int]] = field(default_factory=set)
    # node -> (CPUs, memory) on it that later work may take (absent: not held).
    room: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Its holder would borrow (its team past its nominal quota): promised
    # work may pass it (``Policy.promised_passes_borrowers``).
    borrowing: bool = False

    def limits_for(self, end: float) -> Mapping[str, int]:
        return {} if end <= self.start else self.spare

    def consume(self, placement: Placement, end: float) -> None:
        if end <= self.start:
            return
        for node, gpus in placement:
            if node in self.spare:
                self.spare[node] -= len(gpus)

    def room_caps(self, w: Workload, end: float) -> dict[str, int]:
        """Reserved nodes where ``w`` (ending at ``end``) would take CPUs or
        memory the reserved workload needs: no GPU of theirs (cap 0)."""
        if end <= self.start or not self.room:
            return {}
        return {n: 0 for n, (cpus, memory) in self.room.items()
                if w.cpus > cpus + EPS or w.memory > memory}

    def take_room(self, placement: Placement, w: Workload, end: float) -> None:
        """``w`` (ending at ``end``) starts on ``placement``: its CPUs and
        memory on reserved nodes come out of their room."""
        if end <= self.start or not self.room:
            return
        for node, _ in placement:
            if node in self.room:
                cpus, memory = self.room[node]
                self.room[node] = (cpus - w.cpus, memory - w.memory)

    def may_join(self, key: tuple[str, int], end: float) -> bool:
        """Whether a share ending at ``end`` may join shared GPU ``key``."""
        return end <= self.start or key not in self.returning or self.spare[key[0]] >= 1

    def opened(self, key: tuple[str, int], end: float) -> None:
        """A share ending at ``end`` opened free GPU ``key`` as shared."""
        if end <= self.start and key[0] in self.spare:
            self.returning.add(key)  # still counted free at ``start``
        else:
            self.consume(((key[0], (key[1],)),), end)

    def joined(self, key: tuple[str, int], end: float) -> None:
        """A share ending at ``end`` joined shared GPU ``key``."""
        if end > self.start and key in self.returning:
            self.returning.discard(key)
            self.spare[key[0]] -= 1


def find_reservation(
    workload_id: str,
    nodes: Mapping[str, Node],
    free_now: Mapping[str, int],
    releases: Iterable[tuple[float, Placement]],
    gpus_per_node: int,
    num_nodes: int,
    selector: Mapping[str, str],
    topology: str,
    topology_key: str,
    returned: Callable[[str, tuple[int, ...]], int],
    room: Optional[RoomClock] = None,
) -> Optional[Reservation]:
    """Walk future releases in time order until the gang fits.

    ``free_now`` holds the free GPU count of each candidate node (only the
    pool's nodes matching the selector); ``releases`` yields
    ``(end, placement)`` sorted by end; ``returned(node, gpus)`` says how many
    of a node's released GPUs come back to the free pool (not unhealthy, not
    set aside). ``room`` (optional) follows the candidate nodes' free CPUs and
    memory over the same walk: a node counts only once the workload's CPUs
    and memory fit there too, and ``releases`` then also carries the times
    its CPUs and memory come back (as placements of no GPUs).
    """
    free = ({n: c for n, c in free_now.items() if nodes[n].matches(selector)} if selector
            else dict(free_now))
    domains: dict[str, set[str]] = defaultdict(set)

    def domain(n: str) -> str:
        return nodes[n].topology.get(topology_key, "") if topology != TOPOLOGY_NONE else ""

    def ok(n: str) -> bool:
        return free[n] >= gpus_per_node and (room is None or room.fits(n))

    for n in free:
        if ok(n):
            domains[domain(n)].add(n)

    def fits() -> Optional[list[str]]:
        if topology != TOPOLOGY_NONE:
            ok = [d for d, ns in domains.items() if len(ns) >= num_nodes]
            if ok:
                d = min(ok, key=lambda d: (len(domains[d]), d))
                return sorted(domains[d], key=lambda n: (free[n], n))[:num_nodes]
            if topology == TOPOLOGY_REQUIRED:
                return None
        everywhere = [n for ns in domains.values() for n in ns]
        if len(everywhere) >= num_nodes:
            return sorted(everywhere, key=lambda n: (free[n], n))[:num_nodes]
        return None

    def reservation(start: float, chosen: list[str]) -> Reservation:
        return Reservation(workload_id, start,
                           {n: free[n] - gpus_per_node for n in chosen},
                           room={n: room.spare(n) for n in chosen} if room is not None else {})

    if fits() is not None:
        # It fits now by count, so other reservations are what hold it back:
        # those come first, and this one waits for them.
        return None
    for end, placement in releases:
        changed = False
        touched = room.advance(end) if room is not None else []
        for node, gpus in placement:
            if node not in free:
                continue
            back = returned(node, gpus)
            if back:
                free[node] += back
                touched.append(node)
        for node in touched:
            if node in free and ok(node) and node not in domains[domain(node)]:
                domains[domain(node)].add(node)
                changed = True
        if changed:
            chosen = fits()
            if chosen is not None:
                return reservation(end, chosen)
    return None


def merged_releases(*sorted_streams: Iterable[tuple[float, Placement]]):
    return heapq.merge(*sorted_streams, key=lambda item: item[0])
