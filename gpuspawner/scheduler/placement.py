"""Where a workload's GPUs go: a free-GPU index and gang placement.

Nodes are bucketed by their number of free GPUs, so best-fit ("the fullest
node that still fits") is a walk over at most ``gpus_per_node`` buckets.
Packing small workloads onto already busy nodes keeps whole nodes free for
the big gangs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Optional

from .model import (TOPOLOGY_NONE, TOPOLOGY_REQUIRED, Node, Placement)


# How many best-fit candidates a placement looks through for one that does
# not extend its node's drain time (bounds the cost on big pools).
DRAIN_AWARE_CANDIDATES = 32


class FreeIndex:
    """Free (usable, unallocated, not set aside) GPUs of every node."""

    def __init__(self, nodes: Iterable[Node] = ()):
        self.nodes: dict[str, Node] = {}
        self.free: dict[str, list[int]] = {}
        self.buckets: dict[str, list[dict[str, None]]] = {}
        self.pool_free: dict[str, int] = defaultdict(int)
        # pool -> node -> its free GPUs, built when asked, dropped when they change
        self.counts: dict[str, dict[str, int]] = {}
        for node in nodes:
            self.add_node(node, node.usable_gpus())

    def copy(self) -> "FreeIndex":
        new = FreeIndex.__new__(FreeIndex)
        new.nodes = self.nodes
        # Free lists are replaced, never changed in place (``take``, ``give``):
        # a copy may share them.
        new.free = dict(self.free)
        new.buckets = {pool: [dict(b) for b in buckets] for pool, buckets in self.buckets.items()}
        new.pool_free = defaultdict(int, self.pool_free)
        new.counts = dict(self.counts)  # never changed in place either
        return new

    def add_node(self, node: Node, free_gpus: Iterable[int]) -> None:
        if node.name in self.free:
            self.remove_node(node.name)
        self.nodes[node.name] = node
        buckets = self.buckets.setdefault(node.pool, [])
        while len(buckets) <= node.gpus:
            buckets.append({})
        gpus = sorted(free_gpus)
        self.free[node.name] = gpus
        buckets[len(gpus)][node.name] = None
        self.pool_free[node.pool] += len(gpus)
        self.counts.pop(node.pool, None)

    def remove_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        gpus = self.free.pop(name)
        del self.buckets[node.pool][len(gpus)][name]
        self.pool_free[node.pool] -= len(gpus)
        self.counts.pop(node.pool, None)

    def free_counts(self, pool: str) -> Mapping[str, int]:
        """node -> its number of free GPUs, for every node of the pool (not
        to be changed: it is kept until the pool's free GPUs change)."""
        counts = self.counts.get(pool)
        if counts is None:
            counts = self.counts[pool] = {name: k for k, bucket in
                                          enumerate(self.buckets.get(pool, ())) for name in bucket}
        return counts

    def take(self, node: str, gpus: Iterable[int]) -> None:
        free = self.free[node]
        pool = self.nodes[node].pool
        buckets = self.buckets[pool]
        del buckets[len(free)][node]
        left = free[:]
        for g in gpus:
            left.remove(g)
        self.free[node] = left
        buckets[len(left)][node] = None
        self.pool_free[pool] -= len(free) - len(left)
        self.counts.pop(pool, None)

    def give(self, node: str, gpus: Iterable[int]) -> None:
        if node not in self.free:  # node removed meanwhile: nothing to give back to
            return
        free = self.free[node]
        pool = self.nodes[node].pool
        buckets = self.buckets[pool]
        del buckets[len(free)][node]
        now_free = self.free[node] = sorted([*free, *gpus])
        buckets[len(now_free)][node] = None
        self.pool_free[pool] += len(now_free) - len(free)
        self.counts.pop(pool, None)

    def take_placement(self, placement: Placement) -> None:
        for node, gpus in placement:
            self.take(node, gpus)

    def candidates(self, pool: str, min_free: int, selector: Mapping[str, str],
                   limits: Mapping[str, int]) -> Iterable[tuple[str, int]]:
        """(node, usable) for nodes with at least ``min_free`` usable GPUs,
        fullest first. ``limits`` caps what may be used on some nodes
        (backfill reservations)."""
        buckets = self.buckets.get(pool, ())
        nodes = self.nodes
        for k in range(max(min_free, 0), len(buckets)):
            for name in buckets[k]:
                if selector and not nodes[name].matches(selector):
                    continue
                usable = min(k, limits[name]) if name in limits else k
                if usable >= min_free:
                    yield name, usable


def find_placement(index: FreeIndex, pool: str, gpus_per_node: int, num_nodes: int = 1,
                   selector: Mapping[str, str] = {}, topology: str = TOPOLOGY_NONE,
                   topology_key: str = "rack", limits: Mapping[str, int] = {},
                   end: float = float("inf"), drain: Mapping[str, float] = {}
                   ) -> Optional[Placement]:
    """Best-fit placement of a whole gang, or None if it does not fit now.

    A single-node workload ending at ``end`` prefers, among the fullest
    nodes, one whose running work lasts at least as long (``drain``: when a
    node's current work ends at the latest): it then does not delay the day
    that node is empty again for a whole-node job.
    """
    if index.pool_free.get(pool, 0) < gpus_per_node * num_nodes:
        return None
    if num_nodes == 1:
        first = None
        for seen, (name, _) in enumerate(index.candidates(pool, gpus_per_node, selector, limits)):
            if first is None:
                first = name
            if drain.get(name, float("-inf")) >= end or seen >= DRAIN_AWARE_CANDIDATES:
                break
        else:
            name = first
        if first is None:
            return None
        if drain.get(name, float("-inf")) < end:
            name = first
        return ((name, tuple(index.free[name][:gpus_per_node])),)
    if topology == TOPOLOGY_NONE:
        chosen = []
        for name, _ in index.candidates(pool, gpus_per_node, selector, limits):
            chosen.append(name)
            if len(chosen) == num_nodes:
                break
        else:
            return None
    else:
        chosen = _choose_in_domain(index, pool, gpus_per_node, num_nodes, selector,
                                   topology, topology_key, limits)
        if chosen is None:
            return None
    return tuple((name, tuple(index.free[name][:gpus_per_node])) for name in chosen)


def _choose_in_domain(index, pool, gpus_per_node, num_nodes, selector, topology,
                      topology_key, limits) -> Optional[list[str]]:
    by_domain: dict[str, list[str]] = defaultdict(list)
    order: list[str] = []
    for name, _ in index.candidates(pool, gpus_per_node, selector, limits):
        domain = index.nodes[name].topology.get(topology_key, "")
        by_domain[domain].append(name)
        order.append(name)
    if len(order) < num_nodes:
        return None
    # The smallest domain that holds the gang: keeps large domains whole.
    fitting = [d for d, names in by_domain.items() if len(names) >= num_nodes]
    if fitting:
        best = min(fitting, key=lambda d: (len(by_domain[d]), d))
        return by_domain[best][:num_nodes]
    if topology == TOPOLOGY_REQUIRED:
        return None
    # Preferred: spread over as few domains as possible, largest first.
    chosen: list[str] = []
    for domain in sorted(by_domain, key=lambda d: (-len(by_domain[d]), d)):
        chosen.extend(by_domain[domain][: num_nodes - len(chosen)])
        if len(chosen) == num_nodes:
            return chosen
    return None
