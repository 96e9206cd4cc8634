"""Fractional GPUs in the scheduler core (issue 22): where shares go, how
they count against quota, and how they are preempted. Table-driven; each
case builds a small cluster, runs cycles and asserts what a user would see
(where their notebook landed, why it waits, who was preempted)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpuspawner.scheduler import JOB, NOTEBOOK, POLICIES, Node, Quota, Scheduler, Team, Workload
from gpuspawner.scheduler import events as ev
from gpuspawner.scheduler.forecast import forecast
from gpuspawner.scheduler.invariants import check_all

POLICY = POLICIES["gpuhub"].with_(preemption_delay=0.0)


def share(wid, s=0.25, team="t", t=0.0, **kw):
    kw.setdefault("kind", NOTEBOOK)
    return Workload(wid, team, "a100", 1, t, gpu_share=s, **kw)


def whole(wid, gpus=1, team="t", t=0.0, **kw):
    return Workload(wid, team, "a100", gpus, t, **kw)


def sched(nodes, teams=None, policy=POLICY):
    return Scheduler(nodes, teams or [Team("t", {"a100": Quota(64)})], policy)


def run(s, workloads, now=0.0):
    """Submit ``workloads`` in order, one cycle after each; the admissions."""
    placed = {}
    for w in workloads:
        e = s.submit(w, now)
        assert e.type == ev.QUEUED, e.message
        result = s.step(now)
        for a in result.of_type(ev.ADMITTED):
            placed[a.workload_id] = a.placement
        assert not check_all(s.state, s.policy, result.reservations), \
            check_all(s.state, s.policy, result.reservations)
    return placed


# ---- placement and consolidation -------------------------------------------

@pytest.mark.parametrize("nodes, before, new, expect", [
    pytest.param([Node("n0", "a100", 4, share_units=4)],
                 [share("a", 0.5), whole("j", 1), share("b", 0.75)],
                 share("x", 0.25), ("n0", 2),
                 id="fullest-shared-gpu-first"),
    pytest.param([Node("n0", "a100", 4, share_units=4)],
                 [share("a", 0.5), whole("j", 1), share("b", 0.75)],
                 share("x", 0.5), ("n0", 0),
                 id="the-shared-gpu-with-room"),
    pytest.param([Node("n0", "a100", 8, share_units=4), Node("n1", "a100", 8, share_units=4)],
                 [share("a", 0.75), whole("j", 6, node_selector={"zone": "b"})],
                 share("x", 0.5), ("n0", 1),
                 id="opens-on-the-node-that-has-shared-gpus"),
    pytest.param([Node("n0", "a100", 8, share_units=4), Node("n1", "a100", 8, share_units=4)],
                 [whole("j0", 6)],
                 share("x", 0.25), ("n0", 6),
                 id="opens-on-the-fullest-node"),
    pytest.param([Node("n0", "a100", 2, share_units=4), Node("n1", "a100", 2, share_units=4)],
                 [share("a", 0.5, node_selector={"zone": "b"})],
                 share("x", 0.25, node_selector={"zone": "b"}), ("n1", 0),
                 id="selector-respected"),
])
def test_a_share_goes_to_the_fullest_place_that_has_room(nodes, before, new, expect):
    nodes = [replace(n, labels={"zone": "b" if n.name == "n1" else "a"}) for n in nodes]
    s = sched(nodes)
    placed = run(s, before + [new])
    (node, (gpu,)), = placed[new.id]
    assert (node, gpu) == expect


def test_shares_consolidate_and_leave_whole_gpus_for_a_gang():
    """Eight quarter shares on a 2-node × 4-GPU pool take two GPUs of one
    node; a 4-GPU job still finds a whole node."""
    s = sched([Node("n0", "a100", 4, share_units=4), Node("n1", "a100", 4, share_units=4)])
    placed = run(s, [share(f"s{i}") for i in range(8)] + [whole("gang", 4)])
    assert {p[0][0] for w, p in placed.items() if w != "gang"} == {"n0"}
    assert {p[0][1][0] for w, p in placed.items() if w != "gang"} == {0, 1}
    assert placed["gang"] == (("n1", (0, 1, 2, 3)),)


@pytest.mark.parametrize("node, holder, new, why", [
    pytest.param(Node("n0", "a100", 1, share_units=4), share("a", 0.25), whole("j"),
                 "waiting for 1 × a100 GPUs", id="whole-never-on-a-shared-gpu"),
    pytest.param(Node("n0", "a100", 1, share_units=4), whole("j", priority="production"),
                 share("a", 0.25),
                 "waiting for a 0.25 share of one a100 GPU", id="share-never-on-a-whole-held-gpu"),
    pytest.param(Node("n0", "a100", 1, share_units=4), share("a", 0.75), share("b", 0.5),
                 "no shared GPU has room", id="no-gpu-over-its-slots"),
])
def test_whole_and_shared_never_mix_on_one_gpu(node, holder, new, why):
    s = sched([node])
    run(s, [holder])
    s.submit(new, 1.0)
    result = s.step(1.0)
    assert not result.of_type(ev.ADMITTED)
    assert why in result.waiting[new.id]


@pytest.mark.parametrize("change, a_runs_on", [
    pytest.param({"drained": True}, ("n0", 1), id="drained-node-its-share-runs-on"),
    pytest.param({"unhealthy_gpus": frozenset({1})}, ("n1", 0), id="gpu-unhealthy-share-evicted"),
])
def test_a_shared_gpu_that_takes_no_new_work_gets_no_new_share(change, a_runs_on):
    s = sched([Node("n0", "a100", 2, share_units=4), Node("n1", "a100", 2, share_units=4)])
    placed = run(s, [whole("j", 1), share("a")])
    assert placed["a"] == (("n0", (1,)),)  # n0 is the fuller node
    s.set_node(replace(s.state.nodes["n0"], **change))
    s.step(1.0)  # work on the unhealthy GPU is evicted and requeued, and placed again
    placed = run(s, [share("b")], now=2.0)
    assert placed["b"] == (("n1", (0,)),)
    assert s.state.running["a"].placement == ((a_runs_on[0], (a_runs_on[1],)),)


def test_the_last_share_leaving_gives_the_whole_gpu_back():
    s = sched([Node("n0", "a100", 1, share_units=4)])
    run(s, [share("a"), share("b", 0.5)])
    assert s.state.shared_slots() == {("n0", 0): 3}
    s.finished("a", 1.0)
    assert s.state.shared_slots() == {("n0", 0): 2}
    s.finished("b", 2.0)
    assert s.state.shared_slots() == {} and s.state.index.free["n0"] == [0]
    assert run(s, [whole("j")], now=3.0) == {"j": (("n0", (0,)),)}


@pytest.mark.parametrize("order", [("a", "b", "c"), ("c", "a", "b"), ("b", "c", "a")])
def test_restart_rebuild_starts_shares_in_any_order(order):
    s = sched([Node("n0", "a100", 2, share_units=4)])
    ws = {"a": share("a"), "b": share("b", 0.5), "c": share("c")}
    for wid in order:
        s.submit(ws[wid], 0.0)
        s.state.start(wid, (("n0", (1,)),), 0.0)
    assert s.state.shared_slots() == {("n0", 1): 4}
    assert s.state.ledger.used[("t", "a100")] == 1.0
    s.submit(share("d"), 0.0)
    with pytest.raises(ValueError, match="no room"):
        s.state.start("d", (("n0", (1,)),), 0.0)
    s.submit(whole("j"), 0.0)
    with pytest.raises(ValueError, match="not free"):
        s.state.start("j", (("n0", (1,)),), 0.0)


@pytest.mark.parametrize("units, gpu_share, reason", [
    pytest.param(0, 0.25, "pool a100 does not share GPUs", id="pool-not-shared"),
    pytest.param(2, 0.25, "not a whole number of a100's GPU slots (1/2 of a GPU)",
                 id="share-smaller-than-a-slot"),
    pytest.param(4, 0.3, "not a whole number", id="share-between-slots"),
])
def test_a_share_the_pool_cannot_split_is_rejected_with_the_reason(units, gpu_share, reason):
    s = sched([Node("n0", "a100", 2, share_units=units)])
    e = s.submit(share("a", gpu_share), 0.0)
    assert e.type == ev.REJECTED and reason in e.message


@pytest.mark.parametrize("kw", [
    pytest.param({"gpus_per_node": 2}, id="two-gpus"),
    pytest.param({"num_nodes": 2}, id="two-nodes"),
    pytest.param({"gpu_share": 1.0}, id="share-of-one"),
    pytest.param({"gpu_share": -0.5}, id="negative"),
])
def test_a_share_is_a_share_of_one_gpu(kw):
    args = {"gpus_per_node": 1, "num_nodes": 1, "gpu_share": 0.5, **kw}
    with pytest.raises(ValueError, match="gpu_share|share of one GPU"):
        Workload("a", "t", "a100", args.pop("gpus_per_node"), 0.0, **args)


# ---- quota and usage ---------------------------------------------------------

@pytest.mark.parametrize("shares, admitted, why", [
    pytest.param([0.25] * 5, 4, "team t holds 1 a100 GPUs and may hold at most 1",
                 id="fifth-waits"),
    pytest.param([0.5, 0.25, 0.5], 2, "this workload needs 0.5", id="half-after-three-quarters"),
    pytest.param([0.5, 0.5], 2, None, id="two-halves-fit"),
])
def test_shares_count_their_fraction_against_quota(shares, admitted, why):
    s = sched([Node("n0", "a100", 4, share_units=4)], [Team("t", {"a100": Quota(1, 0)})])
    for i, x in enumerate(shares):
        s.submit(share(f"s{i}", x, t=float(i)), 0.0)
    result = s.step(0.0)
    assert len(result.of_type(ev.ADMITTED)) == admitted
    assert s.state.ledger.used[("t", "a100")] == sum(shares[:admitted])
    if why:
        assert why in result.waiting[f"s{admitted}"]


def test_fair_share_usage_counts_gpu_units():
    s = sched([Node("n0", "a100", 4, share_units=4)])
    run(s, [share(f"s{i}") for i in range(4)])
    assert s.state.team_usage(0.0)["t"]["a100"] == pytest.approx(0.5)  # (1.0 now + 0 avg) / 2
    assert s.state.held_gpus()[("t", "a100")] == 1.0


# ---- preemption and reclaim -------------------------------------------------

def low(wid, s=0.25, **kw):
    return share(wid, s, kind=JOB, priority="best-effort", **kw)


@pytest.mark.parametrize("running, preemptor, victims", [
    pytest.param([low("a", 0.5), low("b", 0.5)], whole("p", priority="batch"), {"a", "b"},
                 id="whole-needs-every-share-of-its-gpu"),
    pytest.param([low("a", 0.5), share("b", 0.5, kind=JOB, priority="production")],
                 whole("p", priority="batch"), set(),
                 id="no-eviction-that-frees-nothing"),
    pytest.param([low("a", 0.5, t=0.0), low("b", 0.25, t=1.0), low("c", 0.25, t=2.0)],
                 share("p", 0.25, kind=JOB, priority="batch"),
                 {"c"}, id="share-evicts-the-newest-smallest-share"),
    pytest.param([whole("a", priority="best-effort")], share("p", 0.5, kind=JOB, priority="batch"),
                 {"a"}, id="share-evicts-a-whole-gpu-job"),
])
def test_priority_preemption_with_shares(running, preemptor, victims):
    s = sched([Node("n0", "a100", 1, share_units=4)])
    run(s, running)
    s.submit(preemptor, 10.0)
    result = s.step(10.0)
    assert {e.workload_id for e in result.of_type(ev.PREEMPTED)} == victims
    assert bool(result.of_type(ev.NOMINATED)) == bool(victims)
    if victims:
        for wid in sorted(victims):
            s.finished(wid, 20.0)  # exits in its grace period: requeued
        result = s.step(20.0)
        assert [e.workload_id for e in result.of_type(ev.ADMITTED)][:1] == ["p"]
        assert not check_all(s.state, s.policy, result.reservations)


def test_a_shared_gpu_takes_new_shares_again_when_its_preemptor_is_cancelled():
    """A whole-GPU job preempts the share on the only GPU, then is cancelled
    while that share still exits: the GPU is not kept closed for nobody."""
    s = sched([Node("n0", "a100", 1, share_units=4)])
    run(s, [low("a", 0.5)])
    s.submit(whole("p", priority="batch"), 10.0)
    assert s.step(10.0).of_type(ev.NOMINATED)
    s.cancel("p", 11.0)
    s.submit(share("x", 0.25, t=12.0), 12.0)
    result = s.step(12.0)
    assert [e.workload_id for e in result.of_type(ev.ADMITTED)] == ["x"]
    assert s.state.running["a"].state.value == "terminating"
    assert not check_all(s.state, s.policy, result.reservations)


def test_reclaim_evicts_every_borrowed_share_of_a_gpu_for_a_whole_gpu():
    """Team b borrows team a's GPU with four quarter jobs; a's notebook takes
    its nominal GPU back: all four go (three would free nothing)."""
    s = sched([Node("n0", "a100", 1, share_units=4)],
              [Team("a", {"a100": Quota(1)}), Team("b", {"a100": Quota(0)})])
    run(s, [share(f"b{i}", team="b", kind=JOB) for i in range(4)])
    s.submit(whole("nb", team="a", kind=NOTEBOOK), 10.0)
    result = s.step(10.0)
    assert {e.workload_id for e in result.of_type(ev.PREEMPTED)} == {"b0", "b1", "b2", "b3"}
    assert all("reclaims" in e.message for e in result.of_type(ev.PREEMPTED))


def test_reclaim_for_a_share_evicts_only_what_it_needs():
    s = sched([Node("n0", "a100", 1, share_units=4)],
              [Team("a", {"a100": Quota(1)}), Team("b", {"a100": Quota(0)})])
    run(s, [share(f"b{i}", team="b", kind=JOB, t=float(i)) for i in range(4)])
    s.submit(share("nb", 0.5, team="a"), 10.0)
    result = s.step(10.0)
    assert len(result.of_type(ev.PREEMPTED)) == 2
    assert s.state.shared_slots() == {("n0", 0): 6}  # four held, two set aside until they exit
    for e in result.of_type(ev.PREEMPTED):
        s.finished(e.workload_id, 20.0)
    result = s.step(20.0)
    assert result.of_type(ev.ADMITTED)[0].workload_id == "nb"
    assert s.state.shared_slots() == {("n0", 0): 4}
    assert s.state.ledger.used == {("a", "a100"): 0.5, ("b", "a100"): 0.5}


QUARTER_SHORT = [low("a", 0.75, t=0.0), low("b", 0.75, t=1.0), low("d", 0.5, t=2.0),
                 low("c", 0.25, t=3.0)]


@pytest.mark.parametrize("running, ceiling, victims", [
    pytest.param(QUARTER_SHORT, 3, {"c"}, id="the-newest-quarter-not-a-share-alone-on-a-gpu"),
    pytest.param(QUARTER_SHORT, 4, set(), id="quota-enough-evicts-nothing"),
    pytest.param([low("s", 0.25, t=0.0), whole("B", 2, kind=JOB, priority="best-effort", t=1.0)],
                 3, {"s"}, id="the-quarter-not-the-newer-2-gpu-job"),
])
def test_a_job_that_fits_a_free_gpu_evicts_only_what_its_quota_lacks(running, ceiling, victims):
    """Team t's best-effort work holds 2.25 GPUs of one 4-GPU node, GPU 3
    free: a (0.75) and the newest c (0.25) share GPU 0, b (0.75) and d (0.5)
    have GPUs 1 and 2 each to themselves; or a 0.25 share on GPU 0 and a
    2-GPU job on GPUs 1 and 2. Its batch job asks for one GPU. Where the team
    may hold 3 it lacks a quarter of quota: it takes the free GPU and evicts
    the smallest work that covers the quarter, most evictable first; not a
    share whose GPU it would not take, nor more than it lacks (issue 32)."""
    s = sched([Node("n0", "a100", 4, share_units=4)],
              [Team("t", {"a100": Quota(2, ceiling - 2)})])
    run(s, running)
    assert s.state.index.free == {"n0": [3]}
    s.submit(whole("p", kind=JOB, priority="batch", t=10.0), 10.0)
    result = s.step(10.0)
    assert {e.workload_id for e in result.of_type(ev.PREEMPTED)} == victims
    started = result.of_type(ev.NOMINATED if victims else ev.ADMITTED)
    assert [(e.workload_id, e.placement) for e in started] == [("p", (("n0", (3,)),))]
    for wid in victims:
        s.finished(wid, 20.0)
    result = s.step(20.0)
    assert s.state.running["p"].placement == (("n0", (3,)),)
    assert {w.id for w in running} - victims <= set(s.state.running)
    assert not check_all(s.state, s.policy, result.reservations)


@pytest.mark.parametrize("ceiling, victims", [
    pytest.param(3, {"s1"}, id="the-quarter-not-the-share-on-a-full-gpu"),
    pytest.param(4, set(), id="quota-enough-evicts-nothing"),
])
def test_a_share_that_fits_evicts_only_what_its_quota_lacks(ceiling, victims):
    """Team t holds 3 GPUs: best-effort job W on n0/0; best-effort share s2
    (0.75) beside a notebook (0.25) on n0/1; best-effort s1 (0.25) beside a
    notebook (0.25) on n0/2; a notebook (0.5) on n1. Its batch quarter share
    has room on n0/2 and n1. Where the team may hold 3 it lacks a quarter of
    quota: it evicts s1, not s2 (freeing slots on a full GPU it does not
    need) nor W (issue 32)."""
    a, b = {"node_selector": {"zone": "a"}}, {"node_selector": {"zone": "b"}}
    s = sched([Node("n0", "a100", 3, labels={"zone": "a"}, share_units=4),
               Node("n1", "a100", 1, labels={"zone": "b"}, share_units=4)],
              [Team("t", {"a100": Quota(3, ceiling - 3)})])
    run(s, [whole("W", kind=JOB, priority="best-effort", **a), low("s2", 0.75, t=1.0, **a),
            share("nb1", 0.25, t=2.0, **a), share("nb2", 0.25, t=3.0, **a),
            low("s1", 0.25, t=4.0, **a), share("nb3", 0.5, t=5.0, **b)])
    assert s.state.shared_slots() == {("n0", 1): 4, ("n0", 2): 2, ("n1", 0): 2}
    s.submit(share("p", 0.25, kind=JOB, priority="batch", t=10.0), 10.0)
    result = s.step(10.0)
    assert {e.workload_id for e in result.of_type(ev.PREEMPTED)} == victims
    started = result.of_type(ev.NOMINATED if victims else ev.ADMITTED)
    assert [e.workload_id for e in started] == ["p"]
    for wid in victims:
        s.finished(wid, 20.0)
    result = s.step(20.0)
    assert "p" in s.state.running
    assert {"W", "s2", "s1"} - victims <= set(s.state.running)
    assert not check_all(s.state, s.policy, result.reservations)


# ---- backfill and start estimates ------------------------------------------

@pytest.mark.parametrize("limits, start_within", [
    pytest.param((600.0, 1200.0), "20 min", id="the-last-share-to-end"),
    pytest.param((1800.0, 600.0), "30 min", id="in-any-order"),
])
def test_a_whole_gpu_reservation_waits_for_the_last_share_of_the_gpu(limits, start_within):
    s = sched([Node("n0", "a100", 1, share_units=4)])
    run(s, [share(f"s{i}", 0.5, time_limit=limit) for i, limit in enumerate(limits)])
    s.submit(whole("j", time_limit=600.0), 0.0)
    result = s.step(0.0)
    assert f"reserved to start within {start_within}" in result.waiting["j"]


@pytest.mark.parametrize("policy", ["backfill", "gpuhub"])
@pytest.mark.parametrize("joiner, joins", [
    pytest.param({}, False, id="no-time-limit-waits"),
    pytest.param({"time_limit": 3600.0}, False, id="ending-after-the-start-waits"),
    pytest.param({"time_limit": 300.0}, True, id="ending-before-the-start-joins"),
])
def test_a_share_does_not_join_a_shared_gpu_a_reservation_counts_on(policy, joiner, joins):
    """One GPU, shared by a 10-minute share; a whole-GPU job reserved it for
    when that share ends. A share that would stay past then must not join
    it (the job would wait behind it); one that ends before may."""
    s = sched([Node("n0", "a100", 1, share_units=4)],
              policy=POLICIES[policy].with_(preemption_delay=0.0))
    run(s, [share("s0", 0.25, kind=JOB, time_limit=600.0)])
    s.submit(whole("j", time_limit=600.0, t=1.0), 0.0)
    assert "reserved to start within 10 min" in s.step(0.0).waiting["j"]
    s.submit(share("late", 0.25, kind=JOB, t=2.0, **joiner), 0.0)
    result = s.step(0.0)
    assert ("late" in s.state.running) is joins
    if not joins:
        assert "kept for the reserved start of j" in result.waiting["late"]
    assert "reserved to start within 10 min" in result.waiting["j"]
    assert not check_all(s.state, s.policy, result.reservations)


def test_forecast_books_a_share_on_a_shared_gpu_or_the_next_free_gpu():
    s = sched([Node("n0", "a100", 1, share_units=4)])
    run(s, [share("a", 0.5, kind=JOB, time_limit=600.0)])
    s.submit(share("b", 0.5, kind=JOB, time_limit=600.0), 0.0)
    s.submit(share("c", 0.5, kind=JOB, time_limit=600.0, t=1.0), 0.0)
    s.submit(whole("j", time_limit=600.0, t=2.0), 0.0)
    est = forecast(s.state, s.policy, 0.0)
    assert est["b"].start == 0.0
    assert est["c"].start == 600.0  # when a leaves
    assert est["j"].start == 1200.0  # when b and c have left


@pytest.mark.parametrize("shares_on_n1, victims", [
    pytest.param([0.5, 0.5], {"w", "s0", "s1"}, id="gang-evicts-all-shares-of-a-gpu"),
    pytest.param([0.25], {"w", "s0"}, id="gang-evicts-the-only-share"),
])
def test_a_gang_preempts_every_share_of_the_gpu_it_needs_and_no_other(shares_on_n1, victims):
    """A 2 × 2 gang: n0 holds a whole-GPU best-effort job, n1 one shared GPU
    of best-effort shares; the newest share, on n2 (one GPU, too small for
    the gang), is the most evictable but would free nothing and stays."""
    s = sched([Node("n0", "a100", 2, labels={"zone": "a"}, share_units=4),
               Node("n1", "a100", 2, labels={"zone": "b"}, share_units=4),
               Node("n2", "a100", 1, labels={"zone": "c"}, share_units=4)])
    run(s, [whole("w", 2, kind=JOB, priority="best-effort", node_selector={"zone": "a"})]
        + [low(f"s{i}", x, t=float(i), node_selector={"zone": "b"})
           for i, x in enumerate(shares_on_n1)]
        + [low("far", 0.25, t=9.0, node_selector={"zone": "c"})])
    s.submit(whole("gang", 2, num_nodes=2, kind=JOB, priority="batch", t=10.0), 10.0)
    result = s.step(10.0)
    assert {e.workload_id for e in result.of_type(ev.PREEMPTED)} == victims
    for wid in victims:
        s.finished(wid, 20.0)
    result = s.step(20.0)
    assert [e.workload_id for e in result.of_type(ev.ADMITTED)][:1] == ["gang"]
    assert "far" in s.state.running
    assert not check_all(s.state, s.policy, result.reservations)
