"""CPUs and memory: what each node's running work asked for, and whether a
workload's request fits beside it.

A node counts a resource only when it declares a capacity for it
(``Node.cpus``, ``Node.memory``; 0: not counted), and a workload asks for a
resource only when its request is above 0, so traces and tests without
them schedule exactly as before. A request is per node: a gang asks for it
on each of its nodes.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Collection, Iterable, Mapping, Optional

from .model import Node, Placement, Workload

EPS = 1e-9


def asks(w: Workload) -> bool:
    return w.cpus > 0 or w.memory > 0


def counted_request(w: Workload, whole_cpu_pools: Collection[str]) -> Workload:
    """``w`` as its pool's nodes allocate it: in a pool whose nodes allocate
    whole cores (``Node.whole_cpus``: Slurm), its CPUs rounded up to whole
    cores, as the backend asks for them (``--cpus-per-task``), so the node's
    load, the team's quota and fair share count what is really held."""
    if w.cpus and w.pool in whole_cpu_pools:
        whole = float(max(1, math.ceil(w.cpus - EPS)))
        if whole != w.cpus:
            return replace(w, cpus=whole)
    return w


def holds_node(w: Workload, placement: Placement) -> bool:
    """Whether running ``w`` holds something of a node: GPUs, or the CPUs and
    memory of the node it was placed on (it then ends, and may be preempted,
    like GPU work)."""
    return bool(w.gpus) or (asks(w) and bool(placement))


def counted(nodes: Iterable[Node]) -> bool:
    """Whether any node counts CPUs or memory (else this is all skipped)."""
    return any(n.cpus or n.memory for n in nodes)


class NodeLoad:
    """node -> (CPUs, memory bytes) asked for by the work placed on it."""

    def __init__(self, used: Optional[Mapping[str, tuple[float, int]]] = None):
        self.used: dict[str, tuple[float, int]] = dict(used or {})

    def copy(self) -> "NodeLoad":
        return NodeLoad(self.used)

    def add(self, placement: Placement, w: Workload, sign: int = 1) -> None:
        if not asks(w):
            return
        for node, _ in placement:
            cpus, memory = self.used.get(node, (0.0, 0))
            cpus, memory = cpus + sign * w.cpus, memory + sign * w.memory
            if abs(cpus) < EPS and memory == 0:
                self.used.pop(node, None)
            else:
                self.used[node] = (cpus, memory)

    def free(self, node: Node) -> tuple[float, int]:
        """Free CPUs and memory (inf where the node does not count it)."""
        cpus, memory = self.used.get(node.name, (0.0, 0))
        return (node.cpus - cpus if node.cpus else float("inf"),
                node.memory - memory if node.memory else float("inf"))

    def fits(self, node: Node, w: Workload) -> bool:
        cpus, memory = self.free(node)
        return w.cpus <= cpus + EPS and w.memory <= memory

    def caps(self, nodes: Iterable[Node], w: Workload) -> dict[str, int]:
        """Per-node GPU caps (``FreeIndex.candidates``' ``limits``): 0 on
        every node where ``w``'s CPUs or memory do not fit."""
        if not asks(w):
            return {}
        return {n.name: 0 for n in nodes if not self.fits(n, w)}

    def shortfall(self, node: Node, w: Workload) -> str:
        """What of ``w``'s request ``node`` lacks, in a person's words:
        "node x has 0.5 of 2 CPUs free"."""
        cpus, memory = self.free(node)
        out = []
        if w.cpus > cpus + EPS:
            out.append(f"{max(cpus, 0):g} of {node.cpus:g} CPUs")
        if w.memory > memory:
            out.append(f"{gib(max(memory, 0))} of {gib(node.memory)} memory")
        return f"node {node.name} has {' and '.join(out)} free" if out else ""


def gib(n: int) -> str:
    return f"{n / (1 << 30):.3g}GiB"


def request_words(w: Workload) -> str:
    """"1 CPU and 8GiB memory": what a workload asks for besides GPUs."""
    parts = []
    if w.cpus > 0:
        parts.append(f"{w.cpus:g} CPU{'s' if w.cpus != 1 else ''}")
    if w.memory > 0:
        parts.append(f"{gib(w.memory)} memory")
    return " and ".join(parts)


def place_cpu_only(load: NodeLoad, nodes: list[Node], w: Workload) -> Optional[str]:
    """The node a GPU-less workload goes to: of those that take new work and
    have room for its request, the fullest (best fit by CPUs, then memory,
    then name); None if none has room."""
    best, best_key = None, None
    for n in nodes:
        if not n.healthy or n.drained or not load.fits(n, w):
            continue
        cpus, memory = load.free(n)
        key = (cpus, memory, n.name)
        if best_key is None or key < best_key:
            best, best_key = n.name, key
    return best


def cpu_only_reason(load: NodeLoad, nodes: list[Node], w: Workload,
                    kept: Iterable[str] = ()) -> str:
    """Why no node has room: the request, and the node that comes closest
    (or, where the room is there, that a reservation keeps it)."""
    open_nodes = [n for n in nodes if n.healthy and not n.drained]
    held = sorted(n.name for n in open_nodes if n.name in kept and load.fits(n, w))
    if held:
        return (f"waiting for {request_words(w)} on a node of pool {w.pool}: the CPUs and "
                f"memory free on {', '.join(held)} are held for a reserved start (a time "
                f"limit ending before it would let it run)")
    closest = max(open_nodes, key=lambda n: (load.free(n), n.name))
    more = f" (and {len(open_nodes) - 1} more node(s) without room)" if len(open_nodes) > 1 else ""
    return (f"waiting for {request_words(w)} on a node of pool {w.pool}: "
            f"{load.shortfall(closest, w)}{more}")


def too_big_for_pool(w: Workload, nodes: Iterable[Node]) -> Optional[str]:
    """Why no node of ``w``'s pool could ever hold its CPUs or memory (each
    counted on some node of the pool), or None."""
    if not asks(w):
        return None
    pool = [n for n in nodes if n.pool == w.pool]
    for what, asked, cap, show in (
            ("CPUs", w.cpus, lambda n: n.cpus, lambda v: f"{v:g}"),
            ("memory", w.memory, lambda n: n.memory, gib)):
        counting = [cap(n) for n in pool if cap(n)]
        if asked and counting and len(counting) == len(pool) and asked > max(counting) + EPS:
            return (f"asks for {show(asked)} {what} on one node but every {w.pool} node has "
                    f"at most {show(max(counting))}")
    return None


class RoomClock:
    """The free CPUs and memory of a pool's nodes as running work ends, for a
    reservation's walk through future releases (``backfill.find_reservation``).

    ``free`` is each node's free (CPUs, memory) now (-inf: the node takes no
    new work); ``releases`` the (end, node, CPUs, memory) that work gives
    back, sorted by end; ``need`` what the reserved workload asks for on
    each of its nodes."""

    def __init__(self, free: Mapping[str, tuple[float, float]],
                 releases: list[tuple[float, str, float, float]], need: tuple[float, float]):
        self.free = dict(free)
        self.releases = releases
        self.need = need
        self.at = 0  # releases[:at] are applied

    def fits(self, node: str) -> bool:
        cpus, memory = self.free.get(node, (float("inf"), float("inf")))
        return self.need[0] <= cpus + EPS and self.need[1] <= memory

    def spare(self, node: str) -> tuple[float, float]:
        """What is left on ``node`` beside the reserved workload's request."""
        cpus, memory = self.free.get(node, (float("inf"), float("inf")))
        return cpus - self.need[0], memory - self.need[1]

    def advance(self, t: float) -> list[str]:
        """Apply the releases up to ``t``: the nodes whose room grew."""
        grew = []
        releases = self.releases
        while self.at < len(releases) and releases[self.at][0] <= t:
            _, node, cpus, memory = releases[self.at]
            self.at += 1
            if node in self.free:
                free_cpus, free_memory = self.free[node]
                self.free[node] = (free_cpus + cpus, free_memory + memory)
                grew.append(node)
        return grew

    def times(self):
        """The releases as (end, placement of no GPUs), to merge with the GPUs'."""
        return ((end, ((node, ()),)) for end, node, _, _ in self.releases)
