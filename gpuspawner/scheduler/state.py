"""The cluster as the core sees it, with the indexes a cycle needs.

``ClusterState`` is plain in-memory data plus incremental indexes (free GPUs
by node, quota charged per team and pool, running work ordered by end time,
per-team queues). It never does I/O: the service rebuilds it from its
database at start and feeds it the same events it persists.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Optional

from .fairshare import DecayedUsage, add_resource_capacity, usage_deltas
from .model import Node, Placement, Running, RunState, Team, Workload
from .node_load import NodeLoad, counted_request, holds_node
from .pending import PendingQueues
from .placement import FreeIndex
from .quota import QuotaLedger
from .shares import SlotIndex, open_or_join, share_key, slots_needed


@dataclass
class Nomination:
    """GPUs set aside for a preemptor while its victims exit."""

    workload_id: str
    placement: Placement
    victims: set[str] = field(default_factory=set)
    # GPUs of the placement still held by a victim.
    outstanding: set[tuple[str, int]] = field(default_factory=set)

    @property
    def ready(self) -> bool:
        """Every victim has exited: its GPUs and its quota are free."""
        return not self.outstanding and not self.victims


class RunningOrder:
    """Running work ordered two ways: by end (``ends`` per pool, ``team_ends``
    per team and pool: sorted [(end_estimate, start_time, id)] of work with a
    bound) and for eviction (``eviction_order`` per team and pool: sorted
    [(priority, -start, -submit, id)] of RUNNING work, lowest priority and
    newest first)."""

    def __init__(self, priority_value: Callable[[str], int]):
        self.priority_value = priority_value
        self.ends: dict[str, list[tuple[float, float, str]]] = {}
        self.team_ends: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
        self.eviction_order: dict[tuple[str, str], list[tuple]] = {}

    def add(self, r: Running) -> None:
        w = r.workload
        self.add_end(r)
        bisect.insort(self.eviction_order.setdefault((w.team, w.pool), []), self._eviction_key(r))

    def add_end(self, r: Running) -> None:
        end = r.end_estimate
        if end != float("inf"):
            w = r.workload
            entry = (end, r.start_time, w.id)
            bisect.insort(self.ends[w.pool], entry)
            bisect.insort(self.team_ends.setdefault((w.team, w.pool), []), entry)

    def remove_end(self, r: Running) -> None:
        end = r.end_estimate
        if end != float("inf"):
            w = r.workload
            entry = (end, r.start_time, w.id)
            for ends in (self.ends[w.pool], self.team_ends.get((w.team, w.pool), [])):
                i = bisect.bisect_left(ends, entry)
                if i < len(ends) and ends[i] == entry:
                    del ends[i]

    def _eviction_key(self, r: Running) -> tuple:
        w = r.workload
        return (self.priority_value(w.priority), -r.start_time, -w.submit_time, w.id)

    def remove_eviction(self, r: Running) -> None:
        order = self.eviction_order.get((r.workload.team, r.workload.pool))
        if order:
            key = self._eviction_key(r)
            i = bisect.bisect_left(order, key)
            if i < len(order) and order[i] == key:
                del order[i]


class UsageMeter:
    """Each team's decayed GPU use per pool (and CPUs and memory), for fair share."""

    def __init__(self, half_life: float):
        self.half_life = half_life
        self.usage: dict[tuple[str, str], DecayedUsage] = {}

    def advance(self, team: str, pool: str, now: float, delta: float) -> None:
        if not pool:
            return
        u = self.usage.setdefault((team, pool), DecayedUsage(updated_at=now))
        u.advance(now, self.half_life, u.rate + delta)

    def team_usage(self, now: float) -> dict[str, dict[str, float]]:
        """team -> pool -> the mean of the GPUs it holds now and the GPUs it
        held on average (decayed over the half-life)."""
        out: dict[str, dict[str, float]] = {}
        for (team, pool), u in self.usage.items():
            out.setdefault(team, {})[pool] = (u.rate + u.average_gpus(now, self.half_life)) / 2
        return out


class ClusterState:
    def __init__(self, nodes: Iterable[Node] = (), teams: Iterable[Team] = (), *,
                 queue_key: Callable[[Workload], tuple],
                 priority_value: Callable[[str], int], group_by_team: bool = True,
                 half_life: float = 7 * 24 * 3600.0):
        self.queue_key = queue_key
        self.priority_value = priority_value
        self.group_by_team = group_by_team
        self.half_life = half_life
        self.nodes: dict[str, Node] = {}
        self.teams: dict[str, Team] = {t.name: t for t in teams}
        self.running: dict[str, Running] = {}
        self.nominations: dict[str, Nomination] = {}
        # (node, gpu) -> preemptor id, for GPUs a nomination waits for.
        self.set_aside: dict[tuple[str, int], str] = {}
        # (node, gpu) -> id of the workload holding it.
        self.owner: dict[tuple[str, int], str] = {}
        self.index = FreeIndex()
        # Shared GPUs: their used slots, and the running shares on each.
        self.slots = SlotIndex()
        self.sharers: dict[tuple[str, int], dict[str, int]] = {}
        # (node, gpu) -> {preemptor id: slots} set aside on a shared GPU.
        self.share_aside: dict[tuple[str, int], dict[str, int]] = {}
        self.capacity: dict[str, int] = {}
        # cpus@POOL, memory@POOL -> the pools' counted CPUs and memory (fair share's).
        self.resource_capacity: dict[str, float] = {}
        self.whole_cpu_pools: set[str] = set()  # pools whose nodes allocate whole cores
        self.meter = UsageMeter(half_life)  # ``usage``
        self.running_by_pool: dict[str, dict[str, None]] = {}
        # Running work by end and in eviction order (``RunningOrder``); the same dicts here.
        self.order = RunningOrder(priority_value)
        self.ends, self.team_ends = self.order.ends, self.order.team_ends
        self.eviction_order = self.order.eviction_order
        # Pending work and its queues (``PendingQueues``); the same dicts here.
        self.waiting = PendingQueues(self.teams, queue_key, group_by_team)
        self.queues, self.pending_shapes = self.waiting.queues, self.waiting.pending_shapes
        self.queue_keys, self.pending_counts = self.waiting.queue_keys, self.waiting.pending_counts
        self.pending: dict[str, Workload] = self.waiting.pending
        w = self.waiting  # its reads, as the cycle and the service ask them of the state
        self.group_of, self.queue, self.shape_class = w.group_of, w.queue, w.shape_class
        self.oldest_pending, self.shortest_limit = w.oldest, w.shortest_limit
        # node -> latest end estimate of the work running on it.
        self.node_drain: dict[str, float] = {}
        # Workloads that hold a backfill reservation, oldest grant first.
        self.reserved_order: list[str] = []
        # Changes of what is pending, running, set aside or reserved, of nodes
        # and teams (``_counting_changes``).
        self.changes = 0
        # Nodes with a GPU that is not usable.
        self.unhealthy_nodes: set[str] = set()
        # node -> CPUs and memory asked for by the running work on it.
        self.node_load = NodeLoad()
        for node in nodes:
            self._add_node(node)
        self.ledger = self._new_ledger()

    @property
    def usage(self) -> dict[tuple[str, str], DecayedUsage]:
        return self.meter.usage

    @usage.setter
    def usage(self, value: dict[tuple[str, str], DecayedUsage]) -> None:
        self.meter.usage = value  # the service's rebuild replays it from the database

    # ---- nodes and teams -------------------------------------------------
    def _add_node(self, node: Node) -> None:
        self.nodes[node.name] = node
        if len(node.usable_gpus()) < node.gpus:
            self.unhealthy_nodes.add(node.name)
        else:
            self.unhealthy_nodes.discard(node.name)
        free = [g for g in node.placeable_gpus()
                if (node.name, g) not in self.owner and (node.name, g) not in self.set_aside
                and (node.name, g) not in self.slots]
        self.index.add_node(node, free)
        self.capacity[node.pool] = self.capacity.get(node.pool, 0) + len(node.usable_gpus())
        add_resource_capacity(self.resource_capacity, node)
        if node.whole_cpus:
            self.whole_cpu_pools.add(node.pool)
        self.running_by_pool.setdefault(node.pool, {})
        self.ends.setdefault(node.pool, [])

    def set_node(self, node: Node) -> None:
        """Add a node or change it (health, labels). Work on hardware that
        became unhealthy is evicted by the next cycle."""
        old = self.nodes.get(node.name)
        if old is not None:
            if old.pool != node.pool and (any(n == node.name for (n, _g) in self.owner)
                                          or node.name in self.slots.on_node):
                raise ValueError(f"node {node.name} has running work; drain it before moving pools")
            self.capacity[old.pool] -= len(old.usable_gpus())
            add_resource_capacity(self.resource_capacity, old, -1)
            self.index.remove_node(node.name)
        self._add_node(node)
        self.ledger = self._new_ledger()

    def set_team(self, team: Team) -> None:
        self.teams[team.name] = team
        self.ledger = self._new_ledger()

    def _new_ledger(self) -> QuotaLedger:
        ledger = QuotaLedger(self.capacity, self.teams)
        for r in self.running.values():
            ledger.charge_workload(r.workload)
        for nom in self.nominations.values():
            ledger.charge_workload(self.pending[nom.workload_id])
        return ledger

    # ---- queue (PendingQueues) ---------------------------------------------
    def add_pending(self, w: Workload) -> None:
        if w.id in self.running:
            raise ValueError(f"workload {w.id} already exists")
        self.waiting.add(counted_request(w, self.whole_cpu_pools))

    def remove_pending(self, wid: str) -> Workload:
        w = self.pending[wid]
        self.waiting.remove(w)
        nom = self.nominations.pop(wid, None)
        if nom is not None:
            self._drop_nomination(nom, w)
        return w

    # ---- running ---------------------------------------------------------
    def start(self, wid: str, placement: Placement, now: float) -> Running:
        w = self.pending[wid]
        nom = self.nominations.pop(wid, None)
        if nom is not None:
            if not nom.ready:
                raise ValueError(f"workload {wid} still waits for its victims to exit")
            placement = nom.placement
            for node, gpus in placement:
                for g in gpus:
                    self.set_aside.pop((node, g), None)
            if w.gpu_share:
                key = share_key(placement)
                aside = self.share_aside.get(key, {})
                if aside.pop(wid, None) is None:  # a whole GPU was set aside: open it
                    node = self.nodes[key[0]]
                    self.slots.add(key, node.pool, node.share_units,
                                   slots_needed(w.gpu_share, node.share_units))
                elif not aside:
                    del self.share_aside[key]
        else:
            for node, gpus in placement:
                for g in gpus:
                    if (node, g) in self.owner or (node, g) in self.set_aside or \
                            (not w.gpu_share and (node, g) in self.slots):
                        raise ValueError(f"GPU {node}/{g} is not free")
            if w.gpu_share:
                node, g = share_key(placement)
                open_or_join(self.index, self.slots, self.nodes[node], g, w)
            else:
                self.index.take_placement(placement)
            self.ledger.charge_workload(w)
        self.waiting.remove(w)
        if w.gpu_share:
            key = share_key(placement)
            self.sharers.setdefault(key, {})[wid] = slots_needed(
                w.gpu_share, self.nodes[key[0]].share_units)
        else:
            for node, gpus in placement:
                for g in gpus:
                    self.owner[(node, g)] = wid
        r = Running(workload=w, placement=placement, start_time=now)
        self.running[wid] = r
        if nom is None:  # a nominee's CPUs and memory were booked when it was nominated
            self.node_load.add(placement, w)
        for node, _ in placement:
            self.node_drain[node] = max(self.node_drain.get(node, float("-inf")), r.end_estimate)
        for key, delta in usage_deltas(w):
            self.meter.advance(w.team, key, now, delta)
        if w.gpus:
            self.running_by_pool.setdefault(w.pool, {})[wid] = None
        if holds_node(w, placement):  # by end and eviction order (CPU-only work on a node too)
            self.order.add(r)
        return r

    def preempt(self, victim_id: str, preemptor_id: Optional[str], kill_at: float) -> None:
        r = self.running[victim_id]
        self.order.remove_end(r)
        self.order.remove_eviction(r)
        r.state = RunState.TERMINATING
        r.preempted_for = preemptor_id
        r.kill_at = kill_at
        self.order.add_end(r)
        self._redrain(node for node, _ in r.placement)

    def nominate(self, wid: str, placement: Placement, victims: Iterable[str]) -> None:
        w = self.pending[wid]
        nom = Nomination(wid, placement, set(victims))
        if w.gpu_share and share_key(placement) in self.slots:
            # Slots of a shared GPU: counted used now, free once the victims exit.
            key = share_key(placement)
            node = self.nodes[key[0]]
            need = slots_needed(w.gpu_share, node.share_units)
            self.share_aside.setdefault(key, {})[wid] = need
            self.slots.add(key, node.pool, node.share_units, need)
            placement = ()
        for node, gpus in placement:
            for g in gpus:
                key = (node, g)
                self.set_aside[key] = wid
                if key in self.owner:
                    nom.outstanding.add(key)
                elif key in self.slots:  # freed when its last share leaves
                    nom.outstanding.add(key)
                    self.slots.close(key)
                else:
                    self.index.take(node, (g,))
        self.nominations[wid] = nom
        self.ledger.charge_workload(w)
        # Its CPUs and memory are booked now: work that comes while its
        # victims leave may not take them.
        self.node_load.add(nom.placement, w)

    def release(self, wid: str, now: float) -> Running:
        """A running workload stopped: its GPUs go back (or to a nominee)."""
        r = self.running.pop(wid)
        w = r.workload
        self.node_load.add(r.placement, w, -1)
        if w.gpu_share:
            self._release_share(wid, share_key(r.placement))
        for node, gpus in (() if w.gpu_share else r.placement):
            give = []
            for g in gpus:
                key = (node, g)
                self.owner.pop(key, None)
                nominee = self.set_aside.get(key)
                if nominee is not None:
                    self.nominations[nominee].outstanding.discard(key)
                elif self.placeable(node, g):
                    give.append(g)
            if give:
                self.index.give(node, give)
        self.ledger.charge_workload(w, -1)
        for key, delta in usage_deltas(w, -1):
            self.meter.advance(w.team, key, now, delta)
        for nom in self.nominations.values():
            nom.victims.discard(wid)
        self._redrain(node for node, _ in r.placement)
        if w.gpus:
            self.running_by_pool[w.pool].pop(wid, None)
        if holds_node(w, r.placement):
            self.order.remove_end(r)
            if r.state is RunState.RUNNING:
                self.order.remove_eviction(r)
        return r

    def _release_share(self, wid: str, key: tuple[str, int]) -> None:
        holders = self.sharers[key]
        slots = holders.pop(wid)
        if not holders:
            del self.sharers[key]
        if self.slots.remove(key, slots):  # the last share left: the GPU is whole again
            nominee = self.set_aside.get(key)
            if nominee is not None:
                self.nominations[nominee].outstanding.discard(key)
            elif self.placeable(*key):
                self.index.give(key[0], [key[1]])

    def shared_slots(self) -> Mapping[tuple[str, int], int]:
        """(node, gpu) -> slots used on each shared GPU (running shares and
        slots set aside for nominated ones)."""
        return self.slots.used

    def holders(self, node: str, gpu: int) -> list[str]:
        """Workloads running on a GPU: its whole holder, or its shares."""
        wid = self.owner.get((node, gpu))
        if wid is not None:
            return [wid]
        return list(self.sharers.get((node, gpu), ()))

    def _redrain(self, nodes: Iterable[str]) -> None:
        for name in nodes:
            node = self.nodes.get(name)
            ends = {self.running[wid].end_estimate for g in range(node.gpus if node else 0)
                    for wid in self.holders(name, g)}
            if ends:
                self.node_drain[name] = max(ends)
            else:
                self.node_drain.pop(name, None)

    def _drop_nomination(self, nom: Nomination, w: Workload) -> None:
        key = share_key(nom.placement) if w.gpu_share else None
        share_slots = 0
        if key is not None and w.id in self.share_aside.get(key, {}):
            aside = self.share_aside[key]
            share_slots = aside.pop(w.id)
            if not aside:
                del self.share_aside[key]
        else:
            for node, gpus in nom.placement:
                for g in gpus:
                    del self.set_aside[(node, g)]
        give_back_set_aside(self.index, self.slots, nom, share_slots, self.placeable)
        self.ledger.charge_workload(w, -1)
        self.node_load.add(nom.placement, w, -1)

    def drop_nomination(self, wid: str) -> None:
        nom = self.nominations.pop(wid)
        self._drop_nomination(nom, self.pending[wid])

    def usable(self, node: str, gpu: int) -> bool:
        n = self.nodes.get(node)
        return n is not None and n.healthy and gpu not in n.unhealthy_gpus and gpu < n.gpus

    def placeable(self, node: str, gpu: int) -> bool:
        """Usable and on a node that takes new work (not drained)."""
        return self.usable(node, gpu) and not self.nodes[node].drained

    def on_drained_nodes(self) -> list[str]:
        """Running workloads on drained nodes: they run on, but stopping
        them frees nothing new work could use."""
        drained = {name for name, n in self.nodes.items() if n.drained}
        if not drained:
            return []
        return sorted({wid for name in drained for g in range(self.nodes[name].gpus)
                       for wid in self.holders(name, g)})

    def on_unhealthy_hardware(self) -> list[str]:
        """Running workloads holding a GPU that is no longer usable."""
        out = set()
        for name in self.unhealthy_nodes:
            node = self.nodes[name]
            for g in range(node.gpus):
                if not self.usable(name, g):
                    out.update(self.holders(name, g))
        return sorted(out)

    def team_usage(self, now: float) -> dict[str, dict[str, float]]:
        return self.meter.team_usage(now)

    # ---- requeue ---------------------------------------------------------
    def requeue(self, wid: str, now: float, preempted_by: Optional[str] = None) -> Workload:
        """Release a running workload and queue it again as attempt + 1."""
        r = self.release(wid, now)
        w = r.workload
        blockers = frozenset(w.preempted_by | {preempted_by}) if preempted_by else w.preempted_by
        again = replace(w, attempt=w.attempt + 1, preempted_by=blockers)
        self.add_pending(again)
        return again

    def held_gpus(self) -> Mapping[tuple[str, str], float]:
        """GPU units actually held (running + terminating) per (team, pool):
        a share counts its fraction."""
        held: dict[tuple[str, str], float] = {}
        for r in self.running.values():
            key = (r.workload.team, r.workload.pool)
            held[key] = held.get(key, 0) + r.workload.gpu_units
        return held


def _counting_changes(cls, mutators: tuple[str, ...], queue_only: tuple[str, ...]):
    """``cls`` whose ``mutators`` each add one to ``changes`` (the service
    remakes a long queue's waiting reasons only once something changed) and,
    but for the ``queue_only`` ones, to ``layout_changes``: what runs where,
    what is set aside, the nodes and the teams (a backfill reservation's
    search reads only those: ``cycle.reserving.Searches``)."""
    cls.layout_changes = 0
    for name in mutators:
        def counted(self, *args, _mutate=getattr(cls, name), _layout=name not in queue_only,
                    **kwargs):
            self.changes += 1
            if _layout:
                self.layout_changes += 1
            return _mutate(self, *args, **kwargs)
        setattr(cls, name, functools.wraps(getattr(cls, name))(counted))
    return cls


_counting_changes(ClusterState, ("set_node", "set_team", "add_pending", "remove_pending", "start",
                                 "preempt", "nominate", "release", "drop_nomination", "requeue"),
                  queue_only=("add_pending",))


def give_back_set_aside(index: FreeIndex, slots: SlotIndex, nom: Nomination, share_slots: int,
                        placeable: Callable[[str, int], bool]) -> None:
    """Return what dropped nomination ``nom`` set aside to ``index`` and
    ``slots``: its ``share_slots`` slots of a shared GPU (a share's
    nomination), else its whole GPUs that are free (not still outstanding)
    and placeable; a shared GPU closed for it takes new shares again."""
    if share_slots:
        key = share_key(nom.placement)
        if slots.remove(key, share_slots) and placeable(*key):
            index.give(key[0], [key[1]])
        return
    for node, gpus in nom.placement:
        back = []
        for g in gpus:
            if (node, g) in slots:
                slots.reopen((node, g))
            elif (node, g) not in nom.outstanding and placeable(node, g):
                back.append(g)
        if back:
            index.give(node, back)
