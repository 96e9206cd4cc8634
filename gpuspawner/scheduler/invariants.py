"""Checks of the properties the core promises, recomputed from scratch.

Used by the property-based tests and by ``gpuhub simulate --check``. Each
check derives its answer from the running placements and the quotas alone,
not from the indexes the cycle used, so an index bug shows up here.
"""
from __future__ import annotations

from typing import Iterable, Optional

from . import events as ev
from .model import NO_QUOTA, Quota, combined_selector
from .placement import find_placement
from .policy import Policy
from .quota import QuotaLedger, borrowed, lendable
from .shares import find_share_placement, slots_needed
from .state import ClusterState


def gpu_conflicts(state: ClusterState) -> list[str]:
    seen: dict[tuple[str, int], str] = {}
    out = []
    for wid, r in state.running.items():
        if r.workload.gpu_share:
            continue  # share_problems
        for node, gpus in r.placement:
            for g in gpus:
                other = seen.setdefault((node, g), wid)
                if other != wid:
                    out.append(f"GPU {node}/{g} held by both {other} and {wid}")
                if g in state.index.free.get(node, ()):
                    out.append(f"GPU {node}/{g} held by {wid} but listed free")
    return out


def share_problems(state: ClusterState) -> list[str]:
    """Shared GPUs, recomputed from the running shares and the nominations:
    no GPU over its slots, none both held whole and shared, the slot counts
    the state keeps match, and no shared GPU is listed free."""
    out = []
    whole = {(n, g): wid for wid, r in state.running.items() if not r.workload.gpu_share
             for n, gs in r.placement for g in gs}
    held: dict[tuple[str, int], int] = {}
    leaving: dict[tuple[str, int], int] = {}
    for wid, r in state.running.items():
        w = r.workload
        if not w.gpu_share:
            continue
        if len(r.placement) != 1 or len(r.placement[0][1]) != 1:
            out.append(f"share {wid} holds {r.placement}, not one GPU")
            continue
        ((node, (g,)),) = r.placement
        need = slots_needed(w.gpu_share, state.nodes[node].share_units)
        if need is None:
            out.append(f"share {wid} ({w.gpu_share:g}) on {node}, whose GPUs are not split "
                       f"into a whole number of its slots")
            continue
        held[(node, g)] = held.get((node, g), 0) + need
        if r.preempted_for is not None:
            leaving[(node, g)] = leaving.get((node, g), 0) + need
        if (node, g) in whole:
            out.append(f"GPU {node}/{g} held whole by {whole[(node, g)]} and shared by {wid}")
        if g in state.index.free.get(node, ()):
            out.append(f"GPU {node}/{g} shared by {wid} but listed free")
    aside: dict[tuple[str, int], int] = {}
    for key, nominees in state.share_aside.items():
        aside[key] = sum(nominees.values())
    for key, slots in held.items():
        units = state.nodes[key[0]].share_units
        if slots > units:
            out.append(f"GPU {key[0]}/{key[1]}: {slots} slots held, it has {units}")
        if slots - leaving.get(key, 0) + aside.get(key, 0) > units:
            out.append(f"GPU {key[0]}/{key[1]}: {slots} slots held and {aside[key]} set aside "
                       f"for preemptors, it has {units}")
    expect = {key: held.get(key, 0) + aside.get(key, 0) for key in set(held) | set(aside)}
    if expect != dict(state.shared_slots()):
        out.append(f"shared slots: state {dict(state.shared_slots())}, recomputed {expect}")
    return out


def partial_gangs(state: ClusterState) -> list[str]:
    out = []
    for wid, r in state.running.items():
        w = r.workload
        nodes = [n for n, _ in r.placement]
        if w.gpus == 0:
            continue
        if len(set(nodes)) != w.num_nodes or any(len(g) != w.gpus_per_node for _, g in r.placement):
            out.append(f"{wid} asked for {w.num_nodes}×{w.gpus_per_node} and holds {r.placement}")
        if any(state.nodes[n].pool != w.pool for n in nodes):
            out.append(f"{wid} placed outside pool {w.pool}")
        selector = combined_selector(state.teams.get(w.team), w)
        if any(not state.nodes[n].matches(selector) for n in nodes):
            out.append(f"{wid} placed on a node that does not match {selector}")
    return out


def _quota(state: ClusterState, team: str, pool: str) -> Quota:
    return state.teams[team].quota(pool) if team in state.teams else NO_QUOTA


def quota_violations(state: ClusterState) -> list[str]:
    held = state.held_gpus()
    out = []
    pools = set(state.capacity)
    for (team, pool), gpus in held.items():
        if not pool:
            continue
        quota = _quota(state, team, pool)
        if gpus > quota.ceiling:
            out.append(f"team {team} holds {gpus} {pool} GPUs, above its ceiling {quota.ceiling}")
    for pool in pools:
        unowned = max(0, state.capacity[pool] - sum(t.quota(pool).nominal for t in state.teams.values()))
        total_borrowed = 0
        total_lendable = 0
        names = set(state.teams) | {t for (t, p) in held if p == pool}
        for team in names:
            quota = _quota(state, team, pool)
            used = held.get((team, pool), 0)
            total_borrowed += borrowed(used, quota)
            total_lendable += lendable(used, quota)
        if total_borrowed > unowned + total_lendable:
            out.append(f"pool {pool}: {total_borrowed} GPUs borrowed but only "
                       f"{unowned} unowned + {total_lendable} lent")
    return out


def idle_but_waiting(state: ClusterState, policy: Policy, reservations=(),
                     quota_holds=()) -> list[str]:
    """Work conservation: a pending workload that fits its quota and the free
    GPUs (outside backfill reservations) should not be waiting. Work of a team
    whose quota is held for its blocked head is left out (conservative)."""
    if policy.strict_fifo:
        return []
    out = []
    ledger = QuotaLedger(state.capacity, state.teams, state.held_gpus())
    for nom in state.nominations.values():
        w = state.pending[nom.workload_id]
        ledger.charge(w.team, w.pool, w.gpu_units)
    held = {(h.team, h.pool) for h in quota_holds}
    for wid, w in state.pending.items():
        if wid in state.nominations or w.gpus == 0 or (w.team, w.pool) in held:
            continue
        if policy.quotas and (ledger.check(w.team, w.pool, w.gpu_units) is not None
                              or ledger.breaks_lending(w.team, w.pool, w.gpu_units)
                              or state.ledger.check_resources(w) is not None):
            continue
        # Conservative: keep every other reservation's nodes as they are, even
        # for work short enough to ignore them (misses some, invents none).
        limits: dict[str, int] = {}
        others = [r for r in reservations if r.workload_id != wid]
        for r in others:
            for node, spare in r.spare.items():
                limits[node] = min(spare, limits.get(node, spare))
        selector = combined_selector(state.teams.get(w.team), w)
        # Nodes without room for its CPUs or memory hold no GPU for it.
        limits.update(state.node_load.caps(
            (n for n in state.nodes.values() if n.pool == w.pool), w))
        if w.gpu_share:
            fits = find_share_placement(
                state.index, state.slots, state.nodes, w, selector, limits,
                lambda key: all(r.may_join(key, float("inf")) for r in others)) is not None
        else:
            fits = find_placement(state.index, w.pool, w.gpus_per_node, w.num_nodes, selector,
                                  w.topology, w.topology_key, limits) is not None
        if fits:
            out.append(f"{wid} fits now ({w.gpu_units:g} × {w.pool}) but waits")
    return out


def preemption_loops(history: Iterable[ev.Event]) -> list[str]:
    """X preempted Y, and later Y preempted X."""
    pairs = set()
    out = []
    for e in history:
        if e.type == ev.PREEMPTED:
            pair = (e.preemptor_id, e.workload_id)
            if (pair[1], pair[0]) in pairs:
                out.append(f"{pair[0]} preempted {pair[1]} after being preempted by it")
            pairs.add(pair)
    return out


def check_all(state: ClusterState, policy: Policy, reservations=(),
              history: Optional[Iterable[ev.Event]] = None, quota_holds=()) -> list[str]:
    problems = gpu_conflicts(state) + partial_gangs(state) + share_problems(state)
    if policy.quotas:
        problems += quota_violations(state)
    problems += idle_but_waiting(state, policy, reservations, quota_holds)
    if history is not None:
        problems += preemption_loops(history)
    return problems
