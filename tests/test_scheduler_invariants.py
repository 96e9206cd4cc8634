"""Property-based tests: random clusters, random action sequences, and after
every scheduling cycle the promised properties, checked twice: with
``scheduler.invariants`` and with an independent recomputation written here
from the running placements, the nodes and the quotas alone.

Run for each of the four policies; the quota properties only where the
policy enforces quotas. Some pools split their GPUs into slots and some
workloads ask for a share of one GPU (issue 22).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuspawner.scheduler import (DEPLOYMENT, JOB, NOTEBOOK, POLICIES, Node, Quota, RunState,
                                  Scheduler, Team, Workload)
from gpuspawner.scheduler import events as ev
from gpuspawner.scheduler import invariants
from gpuspawner.scheduler.cycle import plan_cycle

POOLS = ("p0", "p1", "p2")
PRIORITIES = ("best-effort", "batch", "interactive", "production")
REGIONS = ("eu", "eu", "us")  # eu more often: teams restricted to eu find nodes
RACKS = ("r0", "r1")


# ---- random clusters and actions ---------------------------------------------

@st.composite
def clusters(draw):
    pools = POOLS[:draw(st.integers(2, 3))]
    share_units = {pool: draw(st.sampled_from([0, 0, 2, 4, 4])) for pool in pools}
    nodes = []
    for i in range(draw(st.sampled_from([2, 3, 4, 4, 5, 5, 6, 6]))):
        pool = pools[i] if i < len(pools) else draw(st.sampled_from(pools))
        nodes.append(Node(f"n{i}", pool, draw(st.integers(2, 8)),
                          topology={"rack": draw(st.sampled_from(RACKS))},
                          labels={"region": draw(st.sampled_from(REGIONS))},
                          share_units=share_units[pool]))
    teams = []
    for j in range(draw(st.integers(2, 4))):
        quotas = {}
        for pool in pools:
            quotas[pool] = Quota(draw(st.integers(0, 8)),
                                 draw(st.one_of(st.none(), st.integers(0, 6))),
                                 draw(st.one_of(st.none(), st.integers(0, 6))))
        teams.append(Team(f"t{j}", quotas, weight=draw(st.sampled_from([1.0, 2.0])),
                          node_selector=draw(st.sampled_from([{}, {}, {}, {"region": "eu"}]))))
    return nodes, teams


# How often each action comes up: mostly submissions and cycles, so that
# queues build up, preemptions and reservations happen.
ACTION_KINDS = (["submit"] * 5 + ["cycle"] * 4 + ["finish"] * 2 + ["exit-preempted"] * 2
                + ["cancel", "advance", "advance", "health"])


@st.composite
def actions(draw):
    kind = draw(st.sampled_from(ACTION_KINDS))
    if kind == "submit":
        return (
            "submit",
            draw(st.integers(0, 3)),                                 # team (mod teams)
            draw(st.sampled_from([0, 0, 0, 1, 1, 2])),               # pool (mod pools)
            draw(st.integers(1, 4)),                                 # GPUs per node
            draw(st.sampled_from([1] * 6 + [2, 2, 3])),               # nodes
            draw(st.sampled_from([JOB, JOB, JOB, NOTEBOOK, NOTEBOOK, DEPLOYMENT])),
            draw(st.sampled_from(PRIORITIES)),                       # jobs only
            draw(st.sampled_from([None, 60.0, 600.0, 3600.0])),      # time limit
            draw(st.sampled_from(["none", "none", "preferred", "required"])),
            draw(st.sampled_from([{}] * 6 + [{"region": "eu"}, {"region": "us"}])),
            draw(st.sampled_from([0.0] * 4 + [0.25, 0.25, 0.5])),   # share of one GPU
        )
    if kind in ("finish", "exit-preempted", "cancel"):
        return (kind, draw(st.integers(0, 50)))
    if kind == "advance":
        return (kind, draw(st.sampled_from([1.0, 10.0, 60.0, 300.0, 600.0, 3600.0])))
    if kind == "health":
        return (kind, draw(st.integers(0, 5)), draw(st.booleans()))
    return ("cycle",)


# ---- independent recomputation ---------------------------------------------

def usable(node: Node, gpu: int) -> bool:
    return node.healthy and gpu not in node.unhealthy_gpus and 0 <= gpu < node.gpus


def selectors_ok(node: Node, team: Team | None, w: Workload) -> bool:
    """A node must match the team's selector AND the workload's: a team's
    selector is a restriction (data residency) that a workload cannot lift."""
    team_sel = dict(team.node_selector) if team is not None else {}
    return node.matches(team_sel) and node.matches(w.node_selector)


def held(state):
    """GPU units held: a share counts its fraction."""
    out = {}
    for r in state.running.values():
        w = r.workload
        key = (w.team, w.pool)
        out[key] = out.get(key, 0) + (w.gpu_share or w.gpus)
    return out


def share_slots(node: Node, share: float):
    """Slots of ``node``'s GPU a share takes, or None if it cannot go there."""
    if node.share_units < 2:
        return None
    exact = share * node.share_units
    return round(exact) if abs(exact - round(exact)) < 1e-9 and round(exact) >= 1 else None


def shared_use(state):
    """(node, gpu) -> slots used by running shares and set aside for
    nominated ones; and the GPUs set aside whole."""
    used = {}
    for r in state.running.values():
        w = r.workload
        if w.gpu_share:
            ((n, (g,)),) = r.placement
            used[(n, g)] = used.get((n, g), 0) + share_slots(state.nodes[n], w.gpu_share)
    aside_whole = set()
    for nom in state.nominations.values():
        w = state.pending[nom.workload_id]
        if slots_aside(state, nom):
            ((n, (g,)),) = nom.placement
            used[(n, g)] = used.get((n, g), 0) + share_slots(state.nodes[n], w.gpu_share)
            continue
        for n, gs in nom.placement:
            aside_whole.update((n, g) for g in gs)
    return used, aside_whole


def slots_aside(state, nom) -> bool:
    """A share nominated onto slots of a shared GPU (rather than a whole GPU
    its victims free): the state's own classification."""
    if not state.pending[nom.workload_id].gpu_share:
        return False
    ((n, (g,)),) = nom.placement
    return nom.workload_id in state.share_aside.get((n, g), {})


def quota_of(state, team, pool) -> Quota:
    t = state.teams.get(team)
    return t.quota(pool) if t is not None else Quota()


def ceiling_problems(state):
    out = []
    for (team, pool), n in held(state).items():
        q = quota_of(state, team, pool)
        if q.borrowing_limit is not None and n > q.nominal + q.borrowing_limit:
            out.append(f"team {team} holds {n} {pool} GPUs > nominal {q.nominal} + "
                       f"borrowing limit {q.borrowing_limit}")
    return out


def lending_problems(state):
    """All borrowing in a pool is covered by unowned capacity plus what
    lenders may lend of their idle nominal quota (min(idle, lending limit))."""
    h = held(state)
    out = []
    for pool in {n.pool for n in state.nodes.values()}:
        capacity = sum(1 for n in state.nodes.values() if n.pool == pool
                       for g in range(n.gpus) if usable(n, g))
        nominal = sum(t.quota(pool).nominal for t in state.teams.values())
        unowned = max(0, capacity - nominal)
        teams = set(state.teams) | {t for (t, p) in h if p == pool}
        borrowed = lent = 0
        for team in teams:
            q = quota_of(state, team, pool)
            used = h.get((team, pool), 0)
            borrowed += max(0, used - q.nominal)
            idle = max(0, q.nominal - used)
            lent += idle if q.lending_limit is None else min(idle, q.lending_limit)
        if borrowed > unowned + lent:
            out.append(f"pool {pool}: {borrowed} borrowed > {unowned} unowned + {lent} lendable")
    return out


def gpu_problems(state):
    """Each GPU has at most one holder, exists, and the free index agrees
    with what nobody holds or has set aside."""
    out = []
    owner = {}
    used, _aside_whole = shared_use(state)
    for (n, g), slots in used.items():
        units = state.nodes[n].share_units
        held_slots = sum(share_slots(state.nodes[n], r.workload.gpu_share)
                         for r in state.running.values() if r.workload.gpu_share
                         and r.placement == ((n, (g,)),))
        if held_slots > units:
            out.append(f"GPU {n}/{g}: shares hold {held_slots} of its {units} slots")
        if state.shared_slots().get((n, g)) != slots:
            out.append(f"GPU {n}/{g}: {slots} slots used, state says "
                       f"{state.shared_slots().get((n, g))}")
    if set(state.shared_slots()) != set(used):
        out.append(f"shared GPUs: state {sorted(state.shared_slots())}, recomputed {sorted(used)}")
    for wid, r in state.running.items():
        w = r.workload
        if w.gpu_share:
            ((n, (g,)),) = r.placement
            if state.nodes[n].pool != w.pool:
                out.append(f"share {wid} of pool {w.pool} runs on {n}")
            if not selectors_ok(state.nodes[n], state.teams.get(w.team), w):
                out.append(f"share {wid} runs on {n} whose labels do not match")
            continue
        nodes = [n for n, _ in r.placement]
        if w.gpus and (len(set(nodes)) != w.num_nodes
                       or any(len(set(gs)) != w.gpus_per_node for _, gs in r.placement)):
            out.append(f"partial gang {wid}: {w.num_nodes}x{w.gpus_per_node} holds {r.placement}")
        for n, gs in r.placement:
            node = state.nodes[n]
            if node.pool != w.pool:
                out.append(f"{wid} of pool {w.pool} runs on {n} of pool {node.pool}")
            if not selectors_ok(node, state.teams.get(w.team), w):
                out.append(f"{wid} runs on {n} whose labels {dict(node.labels)} do not match")
            for g in gs:
                if not 0 <= g < node.gpus:
                    out.append(f"{wid} holds GPU {n}/{g} that does not exist")
                if (n, g) in used and state.sharers.get((n, g)):
                    out.append(f"GPU {n}/{g} held whole by {wid} and shared")
                if (n, g) in owner:
                    out.append(f"GPU {n}/{g} held by {owner[(n, g)]} and {wid}")
                owner[(n, g)] = wid
    set_aside = {}
    for nom in state.nominations.values():
        if slots_aside(state, nom):
            continue  # slots of a shared GPU, not the GPU
        for n, gs in nom.placement:
            for g in gs:
                if (n, g) in set_aside:
                    out.append(f"GPU {n}/{g} set aside twice")
                set_aside[(n, g)] = nom.workload_id
                if (n, g) in owner and owner[(n, g)] not in nom.victims:
                    out.append(f"GPU {n}/{g} set aside for {nom.workload_id} but held by "
                               f"{owner[(n, g)]}, not one of its victims")
    for name, node in state.nodes.items():
        expect = sorted(g for g in range(node.gpus) if usable(node, g)
                        and (name, g) not in owner and (name, g) not in set_aside
                        and (name, g) not in used)
        if sorted(state.index.free.get(name, [])) != expect:
            out.append(f"free GPUs of {name}: index {sorted(state.index.free.get(name, []))}, "
                       f"recomputed {expect}")
    return out


def placement_problems(state, w: Workload, placement, what):
    """An admission or nomination lands whole, in its pool, on matching,
    healthy GPUs, inside one topology domain when required."""
    out = []
    team = state.teams.get(w.team)
    nodes = [n for n, _ in placement]
    if w.gpus and (len(set(nodes)) != w.num_nodes
                   or any(len(set(gs)) != w.gpus_per_node for _, gs in placement)):
        out.append(f"{what} {w.id} partially: {w.num_nodes}x{w.gpus_per_node} got {placement}")
    for n, gs in placement:
        node = state.nodes[n]
        if node.pool != w.pool:
            out.append(f"{what} {w.id} of pool {w.pool} on {n} of pool {node.pool}")
        if not selectors_ok(node, team, w):
            out.append(f"{what} {w.id} (team selector {dict(team.node_selector) if team else {}}, "
                       f"own {dict(w.node_selector)}) on {n} labelled {dict(node.labels)}")
        if any(not usable(node, g) for g in gs):
            out.append(f"{what} {w.id} on unusable GPUs {n}/{gs}")
    if w.topology == "required" and w.num_nodes > 1:
        domains = {state.nodes[n].topology.get(w.topology_key, "") for n in nodes}
        if len(domains) > 1:
            out.append(f"{what} {w.id} spans {w.topology_key}s {sorted(domains)}")
    return out


def preemption_problems(state_before, policy, result):
    """Only the two rules evict: reclaim of borrowed quota, or a higher
    priority of the same team evicting a lower, preemptible job."""
    out = []
    events = result.events
    if not policy.preemption:
        return [f"{e.workload_id} preempted under {policy.name}" for e in events
                if e.type == ev.PREEMPTED]
    for e in events:
        if e.type != ev.PREEMPTED:
            continue
        victim = state_before["running"][e.workload_id]
        preemptor = state_before["pending"][e.preemptor_id]
        if victim.team == preemptor.team:
            pv, pp = (policy.priority_classes[victim.priority], policy.priority_classes[preemptor.priority])
            if not (pv.value < pp.value and pv.preemptible and victim.kind == JOB):
                out.append(f"{e.preemptor_id} ({preemptor.priority}) preempted {e.workload_id} "
                           f"({victim.kind}, {victim.priority}) of its own team")
        else:
            q = quota_of(state_before["state"], victim.team, victim.pool)
            if state_before["held"].get((victim.team, victim.pool), 0) <= q.nominal:
                out.append(f"{e.preemptor_id} reclaimed {e.workload_id} of team {victim.team}, "
                           f"which was not borrowing")
    return out


def loop_problems(history):
    seen = set()
    out = []
    for e in history:
        if e.type == ev.PREEMPTED:
            if (e.workload_id, e.preemptor_id) in seen:
                out.append(f"{e.preemptor_id} preempted {e.workload_id}, which had preempted it")
            seen.add((e.preemptor_id, e.workload_id))
    return out


def held_by_quota_hold(state, result, w, now):
    """Backfill inside a team's quota (cycle.QuotaHold): the team's first
    quota-blocked workload keeps the quota it will get when the team's running
    work ends; later work of the team waits unless it ends by then or fits
    the hold's spare GPUs."""
    end = now + w.time_limit if w.time_limit is not None else float("inf")
    for hold in getattr(result, "quota_holds", ()):
        holder = state.pending.get(hold.workload_id)
        if holder is not None and holder.id != w.id and (holder.team, holder.pool) == (w.team, w.pool):
            if not hold.allows(w.gpu_share or w.gpus, end):
                return True
    return False


def quota_allows(state, charged, w):
    """Would the team stay within nominal + borrowing limit, and would all
    borrowing in the pool stay covered by unowned capacity plus what lenders
    lend, with ``w`` admitted? (No change when the pool is already short:
    work that does not make it worse is allowed.)"""
    q = quota_of(state, w.team, w.pool)
    units = w.gpu_share or w.gpus
    after = charged.get((w.team, w.pool), 0) + units
    if q.borrowing_limit is not None and after > q.nominal + q.borrowing_limit:
        return False

    def deficit(extra):
        capacity = sum(len(n.usable_gpus()) for n in state.nodes.values() if n.pool == w.pool)
        unowned = max(0, capacity - sum(t.quota(w.pool).nominal for t in state.teams.values()))
        borrowed = lent = 0
        teams = set(state.teams) | {t for (t, p) in charged if p == w.pool}
        for team in teams:
            tq = quota_of(state, team, w.pool)
            used = charged.get((team, w.pool), 0) + (extra if team == w.team else 0)
            borrowed += max(0, used - tq.nominal)
            idle = max(0, tq.nominal - used)
            lent += idle if tq.lending_limit is None else min(idle, tq.lending_limit)
        return borrowed - unowned - lent

    after_deficit = deficit(units)
    return after_deficit <= 0 or after_deficit <= deficit(0)


def own_idle_but_waiting(state, policy, result, now):
    """Work conservation, recomputed from the nodes, the running placements
    and the nominations: a pending workload whose quota allows it and whose
    gang fits the free GPUs (keeping every other workload's reservation, as
    ``invariants.idle_but_waiting`` does) should not be waiting."""
    if policy.strict_fifo:
        return []
    owned = {(n, g) for r in state.running.values() for n, gs in r.placement for g in gs}
    aside = {(n, g) for nom in state.nominations.values() for n, gs in nom.placement for g in gs}
    free = {name: sum(1 for g in node.usable_gpus() if (name, g) not in owned | aside)
            for name, node in state.nodes.items()}
    charged = dict(held(state))
    for nom in state.nominations.values():
        w = state.pending[nom.workload_id]
        charged[(w.team, w.pool)] = charged.get((w.team, w.pool), 0) + (w.gpu_share or w.gpus)
    used, aside_whole = shared_use(state)
    out = []
    for wid, w in state.pending.items():
        if wid in state.nominations or w.gpus == 0:
            continue
        if policy.quotas and (not quota_allows(state, charged, w)
                              or held_by_quota_hold(state, result, w, now)):
            continue
        limits = {}
        # Shared GPUs another reservation counts on getting back, with no
        # spare GPU on their node: a share that might stay past its start
        # must not join them.
        counted_on = set()
        for r in result.reservations:
            if r.workload_id != wid:
                for node, spare in r.spare.items():
                    limits[node] = min(spare, limits.get(node, spare))
                counted_on |= {key for key in r.returning if r.spare[key[0]] < 1}
        fits = [n for n, node in state.nodes.items()
                if node.pool == w.pool and selectors_ok(node, state.teams.get(w.team), w)
                and min(free[n], limits.get(n, free[n])) >= w.gpus_per_node]
        if w.gpu_share:
            # Room on a shared GPU (not one set aside whole), or a whole GPU to open.
            fits = [n for n in fits if share_slots(state.nodes[n], w.gpu_share)]
            fits += [f"{n}/{g}" for (n, g), slots in used.items()
                     if (n, g) not in aside_whole | counted_on and state.nodes[n].pool == w.pool
                     and usable(state.nodes[n], g) and not state.nodes[n].drained
                     and selectors_ok(state.nodes[n], state.teams.get(w.team), w)
                     and share_slots(state.nodes[n], w.gpu_share) is not None
                     and state.nodes[n].share_units - slots >= share_slots(state.nodes[n],
                                                                           w.gpu_share)]
            if fits:
                out.append(f"share {wid} ({w.gpu_share:g} of a {w.pool} GPU) fits {sorted(fits)} "
                           f"but waits")
            continue
        if w.topology == "required" and w.num_nodes > 1:
            domains = {}
            for n in fits:
                d = state.nodes[n].topology.get(w.topology_key, "")
                domains[d] = domains.get(d, 0) + 1
            ok = any(c >= w.num_nodes for c in domains.values())
        else:
            ok = len(fits) >= w.num_nodes
        if ok:
            out.append(f"{wid} ({w.num_nodes}x{w.gpus_per_node} {w.pool}) fits free GPUs "
                       f"on {sorted(fits)} but waits")
    return out


# ---- the driver ------------------------------------------------------------

def run_actions(policy_name, cluster, acts, policy=None, on_cycle=None):
    """Drive one random sequence. ``policy`` overrides ``POLICIES[policy_name]``;
    ``on_cycle(state_before, result, now)`` adds checks after every cycle."""
    policy = policy or POLICIES[policy_name]
    nodes, teams = cluster
    s = Scheduler(nodes, teams, policy)
    pools = sorted(teams[0].quotas)  # may include a pool without nodes: rejected at submit
    node_names = [n.name for n in nodes]
    now = 0.0
    history = []
    counter = 0
    # Set when capacity shrinks (a node or GPU goes unhealthy): borrowing that
    # was covered by the old capacity may no longer be, and the scheduler
    # only takes borrowed GPUs back when a lender asks for them (reclaim), so
    # the lending rule is skipped until it holds again. The team ceilings
    # (nominal + borrowing limit) do not depend on capacity and are always checked.
    shrunk = False

    for act in list(acts) + [("cycle",)]:
        kind = act[0]
        if kind == "submit":
            _, ti, pi, gpn, nn, wkind, prio, tl, topo, sel, share = act
            if share:
                gpn, nn, topo = 1, 1, "none"
            counter += 1
            w = Workload(f"w{counter}", teams[ti % len(teams)].name, pools[pi % len(pools)], gpn,
                         now, kind=wkind, num_nodes=nn, priority=prio if wkind == JOB else "",
                         time_limit=tl, topology=topo, node_selector=sel, gpu_share=share)
            e = s.submit(w, now)
            assert e.type in (ev.QUEUED, ev.REJECTED)
            if e.type == ev.REJECTED:
                assert e.message
            history.append(e)
        elif kind == "finish":
            ids = sorted(w for w, r in s.state.running.items() if r.state is RunState.RUNNING)
            if ids:
                history.append(s.finished(ids[act[1] % len(ids)], now))
        elif kind == "exit-preempted":
            ids = sorted(w for w, r in s.state.running.items() if r.state is RunState.TERMINATING)
            if ids:
                wid = ids[act[1] % len(ids)]
                r = s.state.running[wid]
                e = s.finished(wid, now)
                assert (e.type, e.attempt) == (ev.REQUEUED, r.workload.attempt + 1)
                assert s.state.pending[wid].preempted_by >= {r.preempted_for}
                history.append(e)
        elif kind == "cancel":
            ids = sorted(s.state.pending)
            if ids:
                history.append(s.cancel(ids[act[1] % len(ids)], now))
        elif kind == "advance":
            now += act[1]
        elif kind == "health":
            name = node_names[act[1] % len(node_names)]
            old = s.state.nodes[name]
            if old.healthy and not act[2]:
                shrunk = True
            s.set_node(replace(old, healthy=act[2]))
        elif kind == "cycle":
            before = {
                "state": s.state,
                "running": {wid: r.workload for wid, r in s.state.running.items()},
                "pending": dict(s.state.pending),
                "held": held(s.state),
                "started": {wid: r.start_time for wid, r in s.state.running.items()},
            }
            snapshot = (sorted(s.state.pending), sorted((w, r.placement, r.state) for w, r in
                                                        s.state.running.items()),
                        sorted(s.state.nominations), dict(s.state.ledger.used))
            result = s.cycle(now)
            # Without explanations the cycle skips work only the reasons need;
            # it must decide exactly the same.
            fast = s.cycle(now, explain=False)
            assert fast.events == result.events, "explain=False decides differently"
            assert fast.reservations == result.reservations, "explain=False reserves differently"
            # Reservation searches kept from earlier cycles (Scheduler.searches)
            # find what searching afresh finds.
            fresh = plan_cycle(s.state, policy, now, explain=False)
            assert (fresh.events, fresh.reservations) == (fast.events, fast.reservations), \
                "the searches kept from earlier cycles decide differently"
            assert snapshot == (sorted(s.state.pending), sorted((w, r.placement, r.state) for w, r in
                                                                s.state.running.items()),
                                sorted(s.state.nominations), dict(s.state.ledger.used)), \
                "cycle() changed the state"
            problems = []
            for e in result.events:
                if e.type in (ev.ADMITTED, ev.NOMINATED):
                    w = s.state.pending[e.workload_id]
                    problems += placement_problems(s.state, w, e.placement or (), e.type)
            problems += preemption_problems(before, policy, result)
            if on_cycle is not None:
                problems += on_cycle(before, result, now)
            evicted = bool(result.of_type(ev.EVICTED))
            follow = s.apply_result(result, now)  # apply(), keeping the reservations
            history.extend(result.events)
            history.extend(follow)

            problems += invariants.gpu_conflicts(s.state) + invariants.partial_gangs(s.state)
            problems += invariants.share_problems(s.state)
            problems += gpu_problems(s.state)
            problems += invariants.preemption_loops(history) + loop_problems(history)
            if policy.quotas:
                problems += ceiling_problems(s.state)
                lending = lending_problems(s.state)
                if not lending:
                    shrunk = False
                if not shrunk:
                    problems += lending + invariants.quota_violations(s.state)
            # Work conservation. Work evicted from broken hardware is requeued
            # by apply(), after the cycle decided, so it (and any healthy GPUs
            # it gave back) is first seen by the next cycle.
            if not evicted:
                problems += invariants.idle_but_waiting(s.state, policy, result.reservations,
                                                        result.quota_holds)
                problems += own_idle_but_waiting(s.state, policy, result, now)
            for wid, why in result.waiting.items():
                assert why, f"{wid} waits without a reason"
            assert not problems, f"t={now} {policy_name}: " + "; ".join(problems)
        else:  # pragma: no cover
            raise AssertionError(act)


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(max_examples=300, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), acts=st.lists(actions(), min_size=20, max_size=60))
def test_invariants_hold_after_every_cycle(policy_name, cluster, acts):
    run_actions(policy_name, cluster, acts)


# ---- the rules that bound waits and churn (issue 19) ----------------------

PROTECTED = POLICIES["gpuhub"].with_(min_runtime=600.0, max_preemptions=1, preemption_delay=0.0,
                                     age_protection=3 * 3600.0)


@settings(max_examples=200, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), acts=st.lists(actions(), min_size=20, max_size=60))
def test_protected_workload_is_never_preempted_before_its_minimum_run_time(cluster, acts):
    """With ``min_runtime``, ``age_protection`` and ``max_preemptions``: no
    preemption, by either rule, hits work that started (or restarted) less
    than ``min_runtime`` ago, or less than its age at that start (up to
    ``age_protection``), or that was preempted ``max_preemptions`` times;
    every other invariant still holds.
    Random sequences advance time by 1 s to 1 h, so protection both holds
    and expires."""
    def protected_preempted(before, result, now):
        out = []
        for e in result.of_type(ev.PREEMPTED):
            started = before["started"][e.workload_id]
            ran = now - started
            victim = before["running"][e.workload_id]
            age = min(PROTECTED.age_protection, started - victim.submit_time)
            if ran < max(PROTECTED.min_runtime, age):
                out.append(f"{e.workload_id} preempted after {ran:.0f} s of run time "
                           f"(aged {started - victim.submit_time:.0f} s at its start)")
            if victim.attempt >= PROTECTED.max_preemptions:
                out.append(f"{e.workload_id} preempted again at attempt {victim.attempt}")
        return out

    run_actions("gpuhub", cluster, acts, policy=PROTECTED, on_cycle=protected_preempted)


@settings(max_examples=200, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), acts=st.lists(actions(), min_size=20, max_size=60))
def test_only_a_wait_on_the_teams_ceiling_holds_quota(cluster, acts):
    """A quota hold is made only for a workload its team's ceiling (nominal
    + borrowing limit) refuses; one refused only because the pool is full
    waits for capacity (its reservation) and holds nothing. Checked against
    the most the team can hold during the cycle: what it held before plus
    everything the cycle admitted or nominated for it."""
    def hold_below_ceiling(before, result, now):
        state = before["state"]
        out = []
        for hold in result.quota_holds:
            w = before["pending"][hold.workload_id]
            most = state.ledger.used.get((w.team, w.pool), 0) + sum(
                before["pending"][e.workload_id].gpu_units for e in result.events
                if e.type in (ev.ADMITTED, ev.NOMINATED) and e.workload_id in before["pending"]
                and (before["pending"][e.workload_id].team, before["pending"][e.workload_id].pool)
                == (w.team, w.pool))
            if most + w.gpu_units <= state.ledger.quota(w.team, w.pool).ceiling:
                out.append(f"{w.id} holds team {w.team}'s quota, which its ceiling allows")
        return out

    run_actions("gpuhub", cluster, acts, on_cycle=hold_below_ceiling)


@st.composite
def timed_jobs(draw):
    """Jobs of one team-free pool: (submit offset, GPUs per node, nodes, time
    limit, run time as a share of the limit)."""
    return draw(st.lists(st.tuples(
        st.sampled_from([0.0, 0.0, 10.0, 60.0, 600.0]),
        st.integers(1, 4), st.sampled_from([1, 1, 1, 2, 3]),
        st.sampled_from([60.0, 600.0, 3600.0, 7200.0]),
        st.sampled_from([1.0, 1.0, 0.5, 0.1])), min_size=5, max_size=40))


@pytest.mark.parametrize("policy_name", ["backfill", "gpuhub"])
@settings(max_examples=150, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(4, 8), min_size=2, max_size=5), jobs=timed_jobs(),
       teams=st.integers(1, 3))
def test_a_gang_holding_the_first_reservation_starts_by_its_reserved_time(
        policy_name, sizes, jobs, teams):
    """No starvation: once a workload holds its pool's first reservation, with
    start S, it is admitted at S at the latest. Running work ends by its time
    limit (the simulator kills it there); the teams own no quota and may
    borrow without limit, so only capacity stands between it and its start."""
    nodes = [Node(f"n{i}", "a100", g, topology={"rack": f"r{i % 2}"}) for i, g in enumerate(sizes)]
    team_list = [Team(f"t{j}", {"a100": Quota(0)}) for j in range(teams)]
    s = Scheduler(nodes, team_list, POLICIES[policy_name])
    events = []  # (time, kind, id): submissions and exits
    runs = {}
    now = 0.0
    for i, (offset, gpn, nn, limit, share) in enumerate(jobs):
        now += offset
        events.append((now, 0, f"j{i}"))
        runs[f"j{i}"] = (Workload(f"j{i}", f"t{i % teams}", "a100", gpn, now, num_nodes=nn,
                                  time_limit=limit, topology="preferred" if nn > 1 else "none"),
                         limit * share)
    promised: dict[str, float] = {}
    while events:
        events.sort()
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, wid = events.pop(0)
            if kind == 0:
                s.submit(runs[wid][0], now)
            else:
                s.finished(wid, now)
        result = s.step(now, explain=False)
        for e in result.of_type(ev.ADMITTED):
            start = promised.pop(e.workload_id, None)
            assert start is None or now <= start + 1e-6, \
                f"{e.workload_id} reserved to start at {start} started at {now}"
            events.append((now + runs[e.workload_id][1], 1, e.workload_id))
        if result.reservations:
            first = result.reservations[0]
            promised.setdefault(first.workload_id, first.start)
        for wid, start in promised.items():
            assert now <= start + 1e-6, f"{wid} reserved to start at {start}, waits at {now}"
    assert not s.state.pending or all(w.gpus > sum(sizes) for w in s.state.pending.values())


# ---- fractional GPUs under preemption (issue 22) ----------------------------

@st.composite
def shared_clusters(draw):
    """Small pools whose GPUs are all shareable, teams with small nominal
    quotas: shares borrow, get reclaimed and preempted."""
    pools = POOLS[:draw(st.integers(1, 2))]
    units = {pool: draw(st.sampled_from([2, 4, 4])) for pool in pools}
    nodes = [Node(f"n{i}", pools[i % len(pools)], draw(st.integers(1, 4)),
                  topology={"rack": draw(st.sampled_from(RACKS))},
                  labels={"region": draw(st.sampled_from(REGIONS))},
                  share_units=units[pools[i % len(pools)]])
             for i in range(draw(st.integers(len(pools), 4)))]
    teams = [Team(f"t{j}", {pool: Quota(draw(st.integers(0, 2)),
                                        draw(st.one_of(st.none(), st.integers(0, 3))))
                            for pool in pools})
             for j in range(draw(st.integers(2, 3)))]
    return nodes, teams


@st.composite
def share_actions(draw):
    """``actions`` with most submissions shares, mostly preemptible jobs."""
    act = draw(actions())
    if act[0] != "submit" or draw(st.integers(0, 9)) >= 7:
        return act
    kind = draw(st.sampled_from([JOB, JOB, JOB, NOTEBOOK]))
    priority = draw(st.sampled_from(["best-effort", "batch", "batch", "production"]))
    return act[:5] + (kind, priority) + act[7:-1] + (draw(st.sampled_from([0.25, 0.5, 0.75])),)


SHARE_PREEMPTION = POLICIES["gpuhub"].with_(preemption_delay=0.0)


def _share_job(team, share, priority="best-effort", gpus_per_node=1, nodes=1):
    return ("submit", team, 0, gpus_per_node, nodes, JOB, priority, None, "none", {}, share)


# Issue 32, as Hypothesis found it: at the last cycle t1's batch share w18 is
# admitted first, so t1's batch job w19 lacks a quarter of quota although a
# GPU of n2 is free. It evicted the 0.75 share w16 alone on another GPU of n2
# (freeing a GPU it did not take) instead of the most evictable 0.25 share.
ISSUE_32 = dict(
    cluster=([Node("n0", "p0", 1, share_units=4), Node("n1", "p1", 1, share_units=4),
              Node("n2", "p0", 4, share_units=4), Node("n3", "p1", 1, share_units=4)],
             [Team("t0", {"p0": Quota(0, 2), "p1": Quota(0, 2)}),
              Team("t1", {"p0": Quota(2, 2), "p1": Quota(0)})]),
    acts=[("submit", 0, 1, 1, 1, JOB, "best-effort", None, "none", {}, 0.25),
          _share_job(0, 0.25), _share_job(1, 0.5), _share_job(0, 0.0), ("cycle",), ("finish", 1),
          _share_job(0, 0.0, nodes=2), _share_job(1, 0.25), ("finish", 2), ("advance", 1.0),
          _share_job(0, 0.0, nodes=2), _share_job(0, 0.0, gpus_per_node=4), _share_job(0, 0.25),
          _share_job(0, 0.25), ("submit", 0, 1, 1, 1, JOB, "best-effort", None, "none", {}, 0.25),
          _share_job(1, 0.25), _share_job(1, 0.5), ("cancel", 0), ("cycle",), _share_job(0, 0.25),
          _share_job(1, 0.75), _share_job(1, 0.75), ("cycle",), _share_job(0, 0.25),
          _share_job(1, 0.25, "batch"), ("finish", 0), _share_job(1, 0.0, "batch")])


@settings(max_examples=300, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(cluster=shared_clusters(), acts=st.lists(share_actions(), min_size=20, max_size=60))
@example(**ISSUE_32)
def test_invariants_hold_when_shares_are_preempted_and_reclaimed(cluster, acts):
    """Mostly shares on a few shareable GPUs, batch jobs preempting at once:
    every invariant holds after every cycle, and a share is evicted only on
    the GPU its preemptor gets, unless the preemptor's quota needed it.
    The quota is the team's when the preemptor's turn came: what ran before
    the cycle plus what the cycle admitted or nominated before it, less the
    victims on its own GPUs (they give their quota back too)."""
    def useful_victims(before, result, now):
        out = []
        state = before["state"]
        victims = {}
        for p in result.of_type(ev.PREEMPTED):
            victims.setdefault(p.preemptor_id, []).append(state.running[p.workload_id].workload)
        ledger = state.ledger.copy()  # replayed decision by decision, as the cycle charges it
        for e in result.events:
            if e.type == ev.EVICTED:
                ledger.charge_workload(before["running"][e.workload_id], -1)
            elif e.type == ev.NOMINATION_DROPPED:
                ledger.charge_workload(before["pending"][e.workload_id], -1)
            elif e.type == ev.ADMITTED and e.workload_id not in state.nominations:
                ledger.charge_workload(before["pending"][e.workload_id])
            elif e.type == ev.NOMINATED:
                w = before["pending"][e.workload_id]
                gpus = {(n, g) for n, gs in e.placement for g in gs}
                mine = [v for v in victims.get(w.id, ())
                        if {(n, g) for n, gs in state.running[v.id].placement for g in gs} & gpus]
                away = [v for v in victims.get(w.id, ()) if v.gpu_share and v not in mine]
                trial = ledger.copy()
                for v in mine:
                    trial.charge_workload(v, -1)
                quota_short = trial.check(w.team, w.pool, w.gpu_units) is not None or \
                    trial.breaks_lending(w.team, w.pool, w.gpu_units)
                if away and not quota_short:
                    out += [f"{w.id} evicted share {v.id} on {state.running[v.id].placement}, "
                            f"away from its GPUs {sorted(gpus)}" for v in away]
                ledger.charge_workload(w)
        return out

    run_actions("gpuhub", cluster, acts, policy=SHARE_PREEMPTION, on_cycle=useful_victims)
