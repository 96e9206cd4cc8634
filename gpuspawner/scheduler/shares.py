"""Fractional GPUs: shared GPUs, their slots, and where a share goes.

A node with ``share_units = N`` may split a GPU into N equal slots; a
workload asking for ``gpu_share = s`` takes ``s * N`` of them on one GPU
(memory and compute alike). A GPU is either whole (free, or held by one
workload) or shared (held by shares only): a whole-GPU workload is never
placed on a shared GPU, and the last share leaving gives the GPU back.

``SlotIndex`` holds the shared GPUs with their used slots, bucketed per pool
by free slots as ``FreeIndex`` buckets nodes by free GPUs, so best fit ("the
fullest shared GPU that still has room") is a walk over at most N buckets.
Shares are packed: onto the fullest shared GPU first, and a new GPU is
opened only when none has room, on a node that already has shared GPUs
(else the fullest node), so whole nodes stay free for gangs.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

from .model import Node, Placement, Workload
from .placement import FreeIndex

GpuKey = tuple[str, int]
# Tolerance for s * N being a whole number of slots.
SLOT_EPS = 1e-9


def slots_needed(share: float, units: int) -> Optional[int]:
    """Slots a share takes on a GPU split into ``units``, or None when it
    cannot be placed there (GPU not shared, or s * N not a whole number >= 1)."""
    if units < 2 or not 0 < share < 1:
        return None
    exact = share * units
    slots = round(exact)
    if abs(exact - slots) > SLOT_EPS or slots < 1:
        return None
    return slots


def share_fits_pool(w: Workload, nodes: Iterable[Node]) -> Optional[str]:
    """Why no node of the workload's pool can ever hold its share, or None."""
    units = sorted({n.share_units for n in nodes if n.pool == w.pool})
    if not any(units):
        return f"pool {w.pool} does not share GPUs; ask for a whole GPU"
    if not any(slots_needed(w.gpu_share, u) for u in units):
        sizes = ", ".join(f"1/{u}" for u in units if u)
        return (f"a {w.gpu_share:g} GPU share is not a whole number of {w.pool}'s GPU slots "
                f"({sizes} of a GPU)")
    return None


class SlotIndex:
    """Shared GPUs: used slots (held by running shares and set aside for
    nominated ones) and, per pool, the open ones bucketed by free slots.
    A shared GPU set aside whole for a preemptor is closed: it takes no new
    share while its shares leave."""

    def __init__(self):
        self.used: dict[GpuKey, int] = {}
        self.units: dict[GpuKey, int] = {}
        self.pool_of: dict[GpuKey, str] = {}
        self.closed: set[GpuKey] = set()
        self.buckets: dict[str, list[dict[GpuKey, None]]] = {}
        # node -> how many of its GPUs are shared
        self.on_node: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.used)

    def __contains__(self, key: GpuKey) -> bool:
        return key in self.used

    def copy(self) -> "SlotIndex":
        new = SlotIndex.__new__(SlotIndex)
        new.used = dict(self.used)
        new.units = dict(self.units)
        new.pool_of = dict(self.pool_of)
        new.closed = set(self.closed)
        new.buckets = {p: [dict(b) for b in bs] for p, bs in self.buckets.items()}
        new.on_node = dict(self.on_node)
        return new

    def free(self, key: GpuKey) -> int:
        return max(0, self.units[key] - self.used[key])

    def _unbucket(self, key: GpuKey) -> None:
        if key not in self.closed:
            del self.buckets[self.pool_of[key]][self.free(key)][key]

    def _bucket(self, key: GpuKey) -> None:
        if key not in self.closed:
            buckets = self.buckets.setdefault(self.pool_of[key], [])
            while len(buckets) <= self.units[key]:
                buckets.append({})
            buckets[self.free(key)][key] = None

    def add(self, key: GpuKey, pool: str, units: int, slots: int) -> None:
        """``slots`` more used on ``key`` (opening it as a shared GPU if new)."""
        if key in self.used:
            self._unbucket(key)
            self.used[key] += slots
        else:
            self.used[key] = slots
            self.units[key] = units
            self.pool_of[key] = pool
            self.on_node[key[0]] = self.on_node.get(key[0], 0) + 1
        self._bucket(key)

    def remove(self, key: GpuKey, slots: int) -> bool:
        """``slots`` fewer used on ``key``; True when none are left (the GPU
        is whole again and no longer in this index)."""
        self._unbucket(key)
        self.used[key] -= slots
        if self.used[key] > 0:
            self._bucket(key)
            return False
        del self.used[key], self.units[key], self.pool_of[key]
        self.closed.discard(key)
        left = self.on_node[key[0]] - 1
        if left:
            self.on_node[key[0]] = left
        else:
            del self.on_node[key[0]]
        return True

    def close(self, key: GpuKey) -> None:
        if key in self.used and key not in self.closed:
            self._unbucket(key)
            self.closed.add(key)

    def reopen(self, key: GpuKey) -> None:
        """Undo ``close``: the preemptor it was closed for no longer waits."""
        if key in self.closed:
            self.closed.discard(key)
            self._bucket(key)

    def candidates(self, pool: str, min_free: int) -> Iterable[GpuKey]:
        """Open shared GPUs of ``pool`` with at least ``min_free`` free slots,
        fullest first."""
        buckets = self.buckets.get(pool, ())
        for k in range(max(1, min_free), len(buckets)):
            yield from buckets[k]


def _placeable(node: Node, gpu: int) -> bool:
    return node.healthy and not node.drained and gpu not in node.unhealthy_gpus


def find_share_placement(index: FreeIndex, slots: SlotIndex, nodes: Mapping[str, Node],
                         w: Workload, selector: Mapping[str, str] = {},
                         limits: Mapping[str, int] = {},
                         may_join: Callable[[GpuKey], bool] = lambda key: True,
                         ) -> Optional[Placement]:
    """Best fit for a share: the fullest open shared GPU of its pool with
    room (on a node that takes new work and matches ``selector``, and that
    ``may_join`` allows); else one whole free GPU opened as shared, on a node
    with shared GPUs already (fullest first), else on the fullest node.
    Opening takes a whole GPU, so it respects ``limits`` (backfill
    reservations); ``may_join`` keeps joins off the shared GPUs reservations
    count on getting back."""
    share = w.gpu_share
    for key in slots.candidates(w.pool, 1):
        node = nodes[key[0]]
        need = slots_needed(share, slots.units[key])
        if need is None or slots.free(key) < need:
            continue
        if _placeable(node, key[1]) and (not selector or node.matches(selector)) \
                and may_join(key):
            return ((key[0], (key[1],)),)
    if not index.pool_free.get(w.pool, 0):
        return None
    best = None
    for name in slots.on_node:
        free = index.free.get(name)
        node = nodes.get(name)
        if not free or node is None or node.pool != w.pool or \
                slots_needed(share, node.share_units) is None:
            continue
        if (name in limits and limits[name] < 1) or (selector and not node.matches(selector)):
            continue
        if best is None or (len(free), name) < (len(index.free[best]), best):
            best = name
    if best is None:
        for name, _usable in index.candidates(w.pool, 1, selector, limits):
            if slots_needed(share, nodes[name].share_units) is not None:
                best = name
                break
    if best is None:
        return None
    return ((best, (index.free[best][0],)),)


def open_or_join(index: FreeIndex, slots: SlotIndex, node: Node, gpu: int,
                 w: Workload) -> bool:
    """Take the slots of ``w`` on ``node``/``gpu``: join the shared GPU, or
    open the whole free GPU as shared. True when a whole GPU was opened."""
    key = (node.name, gpu)
    need = slots_needed(w.gpu_share, node.share_units)
    if need is None:
        raise ValueError(f"a {w.gpu_share:g} GPU share does not fit node {node.name}'s "
                         f"{node.share_units} slots per GPU")
    if key in slots:
        if key in slots.closed or slots.free(key) < need:
            raise ValueError(f"shared GPU {node.name}/{gpu} has no room for {w.id}")
        slots.add(key, node.pool, node.share_units, need)
        return False
    index.take(node.name, (gpu,))
    slots.add(key, node.pool, node.share_units, need)
    return True


def share_key(placement: Placement) -> GpuKey:
    ((node, (gpu,)),) = placement
    return (node, gpu)


def last_share(state, r) -> bool:
    """Whether running share ``r`` is the one whose end gives its GPU back:
    the latest-ending of the GPU's shares (by end, then id), none unbounded,
    and no slots set aside on it for a preemptor."""
    key = share_key(r.placement)
    if key in state.share_aside:
        return False
    mine = (r.end_estimate, r.workload.id)
    for wid in state.sharers.get(key, ()):
        other = state.running[wid]
        if (other.end_estimate, wid) > mine:
            return False
    return mine[0] != float("inf")


def running_shares(state) -> dict[GpuKey, list[tuple[str, float]]]:
    """(node, gpu) -> (workload id, share) of the shares running on each
    shared GPU (a ClusterState's; what the service's views and its memory
    watch go through)."""
    return {key: [(wid, state.running[wid].workload.gpu_share) for wid in holders
                  if wid in state.running]
            for key, holders in list(state.sharers.items())}
