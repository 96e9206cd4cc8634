"""Victims for CPUs and memory: a preemptor whose node lacks CPU cores or
memory (its GPUs may be free) evicts lower-ranked work on that node under
the same rules as for GPUs (``candidates`` chose them: the kinds table, the
preemption delay, ``max_preemptions``). ``plan_preemption`` hands over here
when nodes count CPUs and memory and the preemptor asks for them.

A victim frees its GPUs and its CPUs and memory on every node it holds; one
that frees nothing the preemptor still lacks on a node is never chosen there.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from ..model import Node, Workload
from ..node_load import EPS, NodeLoad
from . import RECLAIM, Candidate, PreemptionPlan
from . import single_node as plan_on_one_node
from . import victims_on_node


class VictimRoom:
    """What a preemptor ``w`` lacks of CPUs and memory on each node of its
    pool, and where it would fit once given victims have left."""

    def __init__(self, load: NodeLoad, nodes: Mapping[str, Node], w: Workload):
        self.load = load
        self.w = w
        self.nodes = [n for n in nodes.values() if n.pool == w.pool]

    def short(self, node: Node) -> tuple[float, float]:
        """CPUs and memory ``w`` lacks on ``node`` now (<= 0: none)."""
        cpus, memory = self.load.free(node)
        return self.w.cpus - cpus, self.w.memory - memory

    def caps_without(self, victims: Sequence[Candidate]) -> dict[str, int]:
        """Nodes where ``w``'s CPUs or memory do not fit even with
        ``victims`` gone: cap 0 (``find_placement``'s ``limits``)."""
        freed: dict[str, list[float]] = {}
        for c in victims:
            v = c.running.workload
            for node, _ in c.running.placement:
                f = freed.setdefault(node, [0.0, 0.0])
                f[0] += v.cpus
                f[1] += v.memory
        caps = {}
        for n in self.nodes:
            cpus, memory = self.short(n)
            f = freed.get(n.name, (0.0, 0.0))
            if cpus - f[0] > EPS or memory - f[1] > 0:
                caps[n.name] = 0
        return caps


def single_node(w: Workload, selector: Mapping[str, str], index, cands: Sequence[Candidate],
                excess: Mapping[str, float], limits: Mapping[str, int], room: VictimRoom
                ) -> Optional[PreemptionPlan]:
    """The node where evicting the fewest GPUs (then the fewest victims,
    then the most evictable ones) gives ``w`` its GPUs, CPUs and memory."""
    def choose(node: str, options, gpus: int) -> Optional[list]:
        cpus, memory = room.short(index.nodes[node])
        if cpus <= EPS and memory <= 0:
            # Its CPUs and memory fit: victims for its GPUs, or, with none
            # lacking, the smallest that gives its team's quota back.
            return victims_on_node(options, gpus, excess)
        return _cover(options, (gpus, cpus, memory), excess)
    return plan_on_one_node(w, selector, index, cands, limits, choose)


def _frees(c: Candidate, gpus: tuple[int, ...]) -> tuple[float, float, float]:
    v = c.running.workload
    return len(gpus), v.cpus, v.memory


def _cover(options, need: tuple[float, float, float], excess) -> Optional[list]:
    """Victims on one node covering ``need`` (GPUs, CPUs, memory): the
    smallest single victim that covers it all, else the most evictable first
    (each freeing something still lacking) until covered. None when nothing
    is lacking (no eviction is called for) or it cannot be covered."""
    def lacking(freed) -> list[bool]:
        return [n - f > (EPS if i == 1 else 0) for i, (n, f) in enumerate(zip(need, freed))]

    def allowed(c: Candidate, taken: dict) -> bool:
        return c.rule != RECLAIM or taken.get(c.team, 0) < excess[c.team]

    if not any(lacking((0, 0, 0))):
        return None
    singles = [o for o in options if not any(lacking(_frees(o[1], o[2])))
               and allowed(o[1], {})]
    if singles:
        return [min(singles, key=lambda o: (o[1].running.workload.gpus, o[0]))]
    chosen, taken, freed = [], {}, [0.0, 0.0, 0.0]
    for rank, c, gpus in options:
        short = lacking(freed)
        gives = _frees(c, gpus)
        if not allowed(c, taken) or not any(s and x > 0 for s, x in zip(short, gives)):
            continue
        chosen.append((rank, c, gpus))
        taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
        freed = [f + x for f, x in zip(freed, gives)]
        if not any(lacking(freed)):
            return chosen
    return None
