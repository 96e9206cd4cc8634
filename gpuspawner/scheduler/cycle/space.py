"""Where a cycle puts work: its scratch copy of the free GPUs, and the one
placement strategy per way of holding GPUs (whole GPUs or a share of one).

The cycle's ordering and admission (``admission.py``), its preemptions
(``preempting.py``) and its backfill reservations (``reserving.py``) all
place through ``Space.strategy(w)``: nothing else in the cycle asks whether
a workload is a share. Every change stays in the scratch copies; the state
changes only when the caller applies the cycle's events.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

from ..backfill import Reservation
from ..model import Placement, Workload
from ..node_load import RoomClock, asks, counted, request_words
from ..placement import find_placement
from ..policy import Policy
from ..preemption import SharePlanner
from ..shares import find_share_placement, last_share, open_or_join, share_key, slots_needed
from ..preemption.shares import plan_with_shares
from ..state import ClusterState, give_back_set_aside

INF = float("inf")


class WholeGpus:
    """Placement on whole GPUs (and CPU-only work, which holds none)."""

    def __init__(self, space: "Space"):
        self.space = space

    def shape(self, w: Workload, beaten: tuple, selector) -> Optional[tuple]:
        """The key under which placement failures are cached (None with node
        selectors: every workload's nodes differ)."""
        if selector:
            return None
        return (w.pool, w.num_nodes, w.topology, w.topology_key, beaten, w.cpus, w.memory)

    def known_unplaceable(self, w: Workload, shape: Optional[tuple]) -> bool:
        """A smaller workload of the same shape already failed this cycle;
        free GPUs only shrink during a cycle, so this one fails too."""
        space = self.space
        if space.index.pool_free.get(w.pool, 0) < w.gpus:
            return True
        smallest_failed = space.failed.get(shape) if shape is not None else None
        return smallest_failed is not None and w.gpus_per_node >= smallest_failed

    def place(self, w: Workload, shape: Optional[tuple], limits, end: float,
              reservations: list[Reservation], selector) -> Optional[Placement]:
        space = self.space
        aware = space.drain_aware
        placement = find_placement(space.index, w.pool, w.gpus_per_node, w.num_nodes,
                                   selector, w.topology, w.topology_key, limits,
                                   end if aware else INF, space.drain if aware else {})
        if placement is None and shape is not None:
            space.failed[shape] = min(w.gpus_per_node, space.failed.get(shape, w.gpus_per_node))
        return placement

    def take(self, w: Workload, placement: Placement, end: float,
             reservations: list[Reservation]) -> None:
        space = self.space
        space.index.take_placement(placement)
        for r in reservations:
            r.consume(placement, end)
        if end != INF and placement:
            space.admitted_ends.setdefault(w.pool, []).append((end, placement))

    def claim_slots(self, w: Workload, key: tuple[str, int]) -> None:
        """A shared GPU that preemption frees for ``w``: no new share joins
        it while its shares are leaving."""
        self.space.slots.close(key)

    def waiting_reason(self, w: Workload, end: float, reservations: list[Reservation],
                       selector) -> str:
        space = self.space
        free = space.index.pool_free.get(w.pool, 0)
        shape = (f"{w.num_nodes} nodes × {w.gpus_per_node}" if w.num_nodes > 1
                 else f"{w.gpus_per_node} ×")
        reason = f"waiting for {shape} {w.pool} GPUs ({free} free in the pool, none placeable"
        if selector:
            labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            reason += f" on nodes labelled {labels}"
        short = space.resource_shortfall(w, selector)
        if short:
            reason += f" with {request_words(w)} free: {short}"
        return reason + ")"


class GpuShares:
    """Placement of a share of one GPU: joining a shared GPU with room, or
    opening a free GPU as shared."""

    def __init__(self, space: "Space"):
        self.space = space

    def shape(self, w: Workload, beaten: tuple, selector) -> Optional[tuple]:
        return None  # shared GPUs may have room however few GPUs are free

    def known_unplaceable(self, w: Workload, shape: Optional[tuple]) -> bool:
        return False

    def place(self, w: Workload, shape: Optional[tuple], limits, end: float,
              reservations: list[Reservation], selector) -> Optional[Placement]:
        space = self.space
        return find_share_placement(
            space.index, space.slots, space.state.nodes, w, selector, limits,
            lambda key: all(r.may_join(key, end) for r in reservations))

    def take(self, w: Workload, placement: Placement, end: float,
             reservations: list[Reservation]) -> None:
        # Opening takes a whole GPU from the reservations; joining one
        # they count on getting back takes a spare one (Reservation.joined).
        space = self.space
        node, g = key = share_key(placement)
        if key not in space.share_until:
            space.share_until[key] = space.last_share_end(key)
        space.share_until[key] = max(space.share_until[key], end)
        opened = open_or_join(space.index, space.slots, space.state.nodes[node], g, w)
        for r in reservations:
            if opened:
                r.opened(key, end)
            else:
                r.joined(key, end)

    def claim_slots(self, w: Workload, key: tuple[str, int]) -> None:
        """Its slots on a shared GPU that preemption frees, free once the
        victims exit."""
        space = self.space
        n = space.state.nodes[key[0]]
        space.slots.add(key, n.pool, n.share_units, slots_needed(w.gpu_share, n.share_units))
        space.share_until[key] = INF  # no reservation counts on it

    def open_nominated(self, w: Workload, placement: Placement) -> None:
        """The whole GPU set aside for a nominated share opens as shared:
        others may join."""
        space = self.space
        key = share_key(placement)
        if key not in space.slots:
            node = space.state.nodes[key[0]]
            space.slots.add(key, node.pool, node.share_units,
                            slots_needed(w.gpu_share, node.share_units))

    def kept_by(self, w: Workload, end: float, reservations: list[Reservation]) -> list[str]:
        """The reservations that keep ``w`` off the shared GPUs with room."""
        slots = self.space.slots
        kept = set()
        for key in slots.candidates(w.pool, 1):
            need = slots_needed(w.gpu_share, slots.units[key])
            if need is not None and slots.free(key) >= need:
                kept |= {r.workload_id for r in reservations if not r.may_join(key, end)}
        return sorted(kept)

    def waiting_reason(self, w: Workload, end: float, reservations: list[Reservation],
                       selector) -> str:
        free = self.space.index.pool_free.get(w.pool, 0)
        what = f"waiting for a {w.gpu_share:g} share of one {w.pool} GPU"
        kept = self.kept_by(w, end, reservations)
        if kept:
            return (f"{what} (the shared GPUs with room are kept for the reserved start of "
                    f"{', '.join(kept)}; a time limit ending before it would let it join)")
        return f"{what} (no shared GPU has room, {free} whole GPU(s) free, none placeable)"


class Space:
    """A cycle's scratch copy of the free GPUs, shared slots, node loads
    and drain times, and when the GPUs it hands out come back."""

    def __init__(self, state: ClusterState, policy: Policy):
        self.state = state
        self.drain_aware = policy.drain_aware_placement
        self.index = state.index.copy()
        # CPUs and memory, where nodes count them (node_load.py)
        self.load = state.node_load.copy() if counted(state.nodes.values()) else None
        self.slots = state.slots.copy()
        self.drain = dict(state.node_drain)
        # placement shape -> smallest size that failed
        self.failed: dict[tuple, int] = {}
        # pool -> [(end, placement)] admitted in this cycle, in admission order
        self.admitted_ends: dict[str, list[tuple[float, Placement]]] = {}
        # pool -> [(end, node, CPUs, memory)] that work admitted in this cycle
        # gives back at its end (where nodes count them)
        self.admitted_asks: dict[str, list[tuple[float, str, float, float]]] = {}
        # shared GPU -> when its last share ends, for GPUs that shares opened
        # or joined in this cycle (a join can keep a GPU past its old end)
        self.share_until: dict[tuple[str, int], float] = {}
        # (node, GPUs) -> how many of them come back to the free pool when
        # released (the state's health, drains and set-asides hold all cycle)
        self.returned: dict[tuple[str, tuple[int, ...]], int] = {}
        self.whole = WholeGpus(self)
        self.shares = GpuShares(self)
        # Bumped whenever free GPUs, slots or the GPUs' release times change:
        # what was worked out from them before (a reservation) may be reused.
        self.version = 0

    def strategy(self, w: Workload):
        return self.shares if w.gpu_share else self.whole

    def take(self, w: Workload, placement: Placement, end: float,
             reservations: list[Reservation]) -> None:
        """``w`` starts on ``placement`` and runs until ``end`` at the latest."""
        self.version += 1
        self.strategy(w).take(w, placement, end, reservations)
        if self.load is not None and asks(w):
            self.load.add(placement, w)
            for r in reservations:
                r.take_room(placement, w, end)
            if end != INF:
                self.admitted_asks.setdefault(w.pool, []).extend(
                    (end, node, w.cpus, w.memory) for node, _ in placement)
        for node, _ in placement:
            self.drain[node] = max(self.drain.get(node, float("-inf")), end)

    def set_aside(self, w: Workload, placement: Placement) -> None:
        """The GPUs (or slots) preemption frees for ``w``: the free ones
        now, the rest when its victims exit."""
        self.version += 1
        index = self.index
        strategy = self.strategy(w)
        if self.load is not None:  # its CPUs and memory, booked (ClusterState.nominate)
            self.load.add(placement, w)
        for node, gpus in placement:
            free = set(index.free[node])
            now_free = tuple(g for g in gpus if g in free)
            if now_free:
                index.take(node, now_free)
            for g in gpus:
                if (node, g) in self.slots:
                    strategy.claim_slots(w, (node, g))

    def give_back(self, w: Workload, nom) -> None:
        """A nomination's GPUs (or slots) are not held for it any more."""
        self.version += 1
        state = self.state
        if self.load is not None:
            self.load.add(nom.placement, w, -1)
        key = share_key(nom.placement) if w.gpu_share else None
        give_back_set_aside(self.index, self.slots, nom,
                            state.share_aside.get(key, {}).get(w.id, 0), state.placeable)

    def victim_planner(self) -> SharePlanner:
        """How preemption chooses victims when shares are in play."""
        return plan_with_shares

    def last_share_end(self, key: tuple[str, int]) -> float:
        """When shared GPU ``key``'s running shares end (never, with slots set
        aside on it for a preemptor; -inf when it has none)."""
        state = self.state
        if key in state.share_aside:
            return INF
        running = state.running
        return max((running[wid].end_estimate for wid in state.sharers.get(key, ())),
                   default=float("-inf"))

    def resource_shortfall(self, w: Workload, selector) -> str:
        """Where GPUs would fit but CPUs or memory do not: which nodes lack what."""
        if self.load is None or not asks(w):
            return ""
        free = self.index.free
        short = [self.load.shortfall(n, w) for n in self.index.nodes.values()
                 if n.pool == w.pool and (not selector or n.matches(selector))
                 and len(free.get(n.name, ())) >= w.gpus_per_node and not self.load.fits(n, w)]
        return "; ".join(short[:3]) + (f"; {len(short) - 3} more" if len(short) > 3 else "")

    def resource_caps(self, w: Workload) -> Mapping[str, int]:
        """Nodes without room for its CPUs or memory: no GPU of theirs."""
        if self.load is None or not asks(w):
            return {}
        return self.load.caps((n for n in self.index.nodes.values() if n.pool == w.pool), w)

    def room_clock(self, w: Workload, unavailable: set[str]) -> Optional[RoomClock]:
        """The pool's free CPUs and memory over time, for ``w``'s reservation
        (None where nodes count neither or ``w`` asks for neither). Work
        already leaving (``unavailable``) is not counted on to give them back."""
        if self.load is None or not asks(w):
            return None
        state = self.state
        free = {}
        for n in self.index.nodes.values():
            if n.pool == w.pool:
                open_ = n.healthy and not n.drained
                free[n.name] = self.load.free(n) if open_ else (-INF, -INF)
        running = state.running
        releases = [(end, node, r.workload.cpus, r.workload.memory)
                    for end, _start, wid in state.ends.get(w.pool, ()) if wid not in unavailable
                    for r in (running[wid],) if asks(r.workload) for node, _ in r.placement]
        releases += self.admitted_asks.get(w.pool, [])
        releases.sort(key=lambda x: x[0])
        return RoomClock(free, releases, (w.cpus, w.memory))

    def returned_count(self, node: str, gpus: tuple[int, ...]) -> int:
        """How many of a node's released GPUs come back to the free pool."""
        count = self.returned.get((node, gpus))
        if count is None:
            state = self.state
            count = self.returned[(node, gpus)] = sum(
                1 for g in gpus if (node, g) not in state.set_aside and state.placeable(node, g))
        return count

    def releases(self, pool: str, unavailable: set[str], shared_seen: list
                 ) -> tuple[Iterable, ...]:
        """When the pool's GPUs come back, as streams of (end, placement)
        sorted by end: running work, work admitted in this cycle, and shared
        GPUs this cycle's shares opened or joined. A shared GPU comes back
        when its last share ends; each one met is noted in ``shared_seen``."""
        state = self.state
        running = state.running

        def running_releases():
            for end, _start, wid in state.ends.get(pool, ()):
                if wid not in unavailable:
                    r = running[wid]
                    if not r.workload.gpu_share:
                        yield end, r.placement
                    elif share_key(r.placement) not in self.share_until and last_share(state, r):
                        shared_seen.append((end, share_key(r.placement)))
                        yield end, r.placement

        def touched_shared_releases():
            nodes = state.nodes
            for until, key in sorted((t, k) for k, t in self.share_until.items()
                                     if t != INF and k not in state.share_aside
                                     and nodes[k[0]].pool == pool):
                shared_seen.append((until, key))
                yield until, ((key[0], (key[1],)),)

        admitted = sorted(self.admitted_ends.get(pool, []), key=lambda x: x[0])
        return (running_releases(), admitted,
                *([touched_shared_releases()] if self.share_until else []))
