"""Victims where shares are in play (``preemption.plan_preemption`` hands
over here when the preemptor is a share or a candidate victim is one).

A whole-GPU preemptor gains a shared GPU only when every share on it is
evicted, so a shared GPU is one option whose victims are all its shares,
offered only when all of them are candidates; shares that would free
nothing are never evicted. A share preemptor takes slots: on a shared GPU by
evicting some of its shares (fewest units first), or on a GPU a whole-GPU
candidate holds, which its eviction frees whole. A gang's victims are
chosen as before, a shared GPU counting as freed once all its shares are
chosen, and then every victim its placement does not need is dropped. A
preemptor that fits as things are (only its quota is short) frees no GPU or
slot: its victims are only what its quota lacks (``_satisfy_quota``).
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from ..model import Workload
from ..placement import FreeIndex, find_placement
from . import (MAX_GANG_CANDIDATES, RECLAIM, Candidate, PreemptionPlan,
                         VictimCatalog)
from ..shares import SlotIndex, find_share_placement, share_key, slots_needed

# An option: (rank of its least evictable victim, its victims, how many GPUs or
# slots it frees[, the GPUs it frees]): the unit the victim search chooses.


def _units(victims: Sequence[Candidate]) -> float:
    return sum(c.running.workload.gpu_units for c in victims)


def _allowed(victims: Sequence[Candidate], taken: Mapping[str, float],
             excess: Mapping[str, float]) -> bool:
    """Reclaim takes from a team only while it is still above its nominal quota."""
    taken = dict(taken)
    for c in victims:
        if c.rule == RECLAIM:
            if taken.get(c.team, 0) >= excess[c.team]:
                return False
            taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
    return True


def _cover(options: list, need: int, excess) -> Optional[list]:
    """Options covering ``need`` (GPUs or slots; ``option[2]`` is how many
    one frees): the smallest single option that suffices, else the most
    evictable first until covered."""
    singles = [o for o in options if o[2] >= need and _allowed(o[1], {}, excess)]
    if singles:
        return [min(singles, key=lambda o: (_units(o[1]), o[0]))]
    chosen, taken, freed = [], {}, 0
    for o in options:
        if not _allowed(o[1], taken, excess):
            continue
        chosen.append(o)
        for c in o[1]:
            taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
        freed += o[2]
        if freed >= need:
            return chosen
    return None


def plan_with_shares(w: Workload, selector: Mapping[str, str], index: FreeIndex,
                     slots: SlotIndex, catalog: VictimCatalog, cands: Sequence[Candidate],
                     excess: Mapping[str, float], limits: Mapping[str, int]
                     ) -> Optional[PreemptionPlan]:
    if w.gpu_share:
        # Joins only on nodes where the reservations starting before ``w``
        # ends (``limits``) leave a spare GPU: there none of them counts on
        # getting a shared GPU back (``Reservation.may_join``).
        fits = find_share_placement(index, slots, catalog.state.nodes, w, selector, limits,
                                    lambda key: limits.get(key[0], 1) >= 1)
    else:
        fits = find_placement(index, w.pool, w.gpus_per_node, w.num_nodes, selector,
                              w.topology, w.topology_key, limits)
    if fits is not None:
        # Only its quota needs victims (``_satisfy_quota``). Choosing one for
        # room here would free room it does not take: a 0.75 share evicted
        # where a 0.25 one covers the quota (issue 32).
        return PreemptionPlan(fits, [])
    if w.gpu_share:
        return _for_share(w, selector, slots, catalog.state, cands, excess, limits)
    if w.num_nodes > 1:
        return _for_gang(w, selector, index, slots, catalog.state,
                         cands[:MAX_GANG_CANDIDATES], excess, limits)
    return _for_whole(w, selector, index, slots, catalog.state, cands, excess, limits)


def _for_whole(w, selector, index, slots, state, cands, excess, limits):
    g = w.gpus_per_node
    nodes = state.nodes

    def eligible(name: str) -> bool:
        return name in index.free and (not selector or nodes[name].matches(selector)) \
            and not (name in limits and limits[name] < g)

    by_id = {c.running.workload.id: (rank, c) for rank, c in enumerate(cands)}
    on_node: dict[str, list] = {}
    for rank, c in enumerate(cands):
        if c.running.workload.gpu_share:
            continue
        for name, gpus in c.running.placement:
            if eligible(name):
                on_node.setdefault(name, []).append((rank, [c], len(gpus), gpus))
    for key in _freeable(state, slots, cands):
        if not eligible(key[0]):
            continue
        group = [by_id[h] for h in state.sharers[key]]
        on_node.setdefault(key[0], []).append(
            (max(r for r, _ in group), [c for _, c in group], 1, (key[1],)))
    best = None
    for name, options in on_node.items():
        options.sort(key=lambda o: o[0])
        need = g - len(index.free[name])
        chosen = _cover(options, need, excess)
        if chosen is None:
            continue
        victims = [c for o in chosen for c in o[1]]
        cost = (_units(victims) - need, len(victims), max(o[0] for o in chosen), name)
        if best is None or cost < best[0]:
            best = (cost, name, chosen, victims)
    if best is None:
        return None
    _, name, chosen, victims = best
    gpus = (index.free[name] + [x for o in chosen for x in o[3]])[:g]
    return PreemptionPlan(((name, tuple(sorted(gpus))),), victims)


def _freeable(state, slots, cands) -> set:
    """Shared GPUs every slot of which is a candidate's: evicting all of them
    frees the GPU (nothing admitted or set aside on it this cycle)."""
    ids = {c.running.workload.id for c in cands}
    return {key for key, holders in state.sharers.items()
            if key in slots and key not in slots.closed and state.placeable(*key)
            and slots.used[key] == sum(holders.values()) and all(h in ids for h in holders)}


def _for_gang(w, selector, index, slots, state, cands, excess, limits):
    freeable = _freeable(state, slots, cands)
    cands = [c for c in cands if not c.running.workload.gpu_share
             or share_key(c.running.placement) in freeable]

    def give_back(trial, left, c):
        """``c``'s GPUs back into ``trial``; a share's once its GPU's last
        slot (``left``: slots still held per shared GPU) is given back."""
        if c.running.workload.gpu_share:
            key = share_key(c.running.placement)
            left[key] = left.get(key, slots.used[key]) - state.sharers[key][c.running.workload.id]
            if left[key] == 0 and key[0] in trial.free:
                trial.give(key[0], [key[1]])
            return
        for node, gpus in c.running.placement:
            if node in trial.free:
                trial.give(node, gpus)

    def trial_without(victims):
        trial, left = index.copy(), {}
        for c in victims:
            give_back(trial, left, c)
        return trial

    def place(trial):
        if trial.pool_free.get(w.pool, 0) < w.gpus:
            return None
        return find_placement(trial, w.pool, w.gpus_per_node, w.num_nodes, selector,
                              w.topology, w.topology_key, limits)

    chosen, taken, placement = [], {}, None
    trial, left = index.copy(), {}  # the free GPUs with every victim chosen so far given back
    for c in cands:
        if not _allowed([c], taken, excess):
            continue
        taken[c.team] = taken.get(c.team, 0) + c.running.workload.gpu_units
        chosen.append(c)
        give_back(trial, left, c)
        placement = place(trial)
        if placement is not None:
            break
    if placement is None:
        return None
    for c in reversed(chosen[:-1]):  # drop the victims the gang does not need
        fewer = [x for x in chosen if x is not c]
        p = place(trial_without(fewer))
        if p is not None:
            chosen, placement = fewer, p
    return PreemptionPlan(placement, chosen)


def _for_share(w, selector, slots, state, cands, excess, limits):
    nodes = state.nodes
    by_id = {c.running.workload.id: (rank, c) for rank, c in enumerate(cands)}
    best = None
    for key, holders in state.sharers.items():
        if key not in slots or key in slots.closed or not state.placeable(*key):
            continue
        node = nodes[key[0]]
        if selector and not node.matches(selector):
            continue
        need = slots_needed(w.gpu_share, slots.units[key])
        short = None if need is None else need - (slots.units[key] - slots.used[key])
        if short is None or short <= 0:
            continue
        options = sorted((by_id[h][0], [by_id[h][1]], holders[h]) for h in holders if h in by_id)
        chosen = _cover(options, short, excess)
        if chosen is None:
            continue
        victims = [c for o in chosen for c in o[1]]
        cost = (_units(victims), len(victims), max(o[0] for o in chosen), key)
        if best is None or cost < best[0]:
            best = (cost, key, victims)
    for rank, c in enumerate(cands):
        if c.running.workload.gpu_share or not _allowed([c], {}, excess):
            continue
        for name, gpus in c.running.placement:
            node = nodes[name]
            if slots_needed(w.gpu_share, node.share_units) is None or \
                    (name in limits and limits[name] < 1) or \
                    (selector and not node.matches(selector)):
                continue
            usable = [x for x in gpus if state.placeable(name, x)
                      and (name, x) not in state.set_aside]
            if usable:
                cost = (c.running.workload.gpu_units, 1, rank, (name, usable[0]))
                if best is None or cost < best[0]:
                    best = (cost, (name, usable[0]), [c])
    if best is None:
        return None
    _, (name, gpu), victims = best
    return PreemptionPlan(((name, (gpu,)),), victims)
