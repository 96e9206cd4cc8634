"""The scheduler's rules, one test per rule, as tables.

Every test drives the public ``Scheduler`` (submit / finished / set_node /
set_team / cycle / step) and asserts what a user would notice: who runs, on
which GPUs, who is preempted, and what the waiting or rejection message says.
The last two tests are tables for ``QuotaLedger`` and ``find_placement``.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpuspawner.scheduler import (DEPLOYMENT, JOB, NOTEBOOK, POLICIES, Node, Quota, Scheduler,
                                  Team, Workload)
from gpuspawner.scheduler import events as ev
from gpuspawner.scheduler.placement import FreeIndex, find_placement
from gpuspawner.scheduler.quota import QuotaLedger

GPUHUB = POLICIES["gpuhub"]


# ---- helpers ---------------------------------------------------------------

def node(name, gpus=8, pool="a100", rack="", **kw):
    """A node labelled ``host=<name>`` so a test can pin work to it."""
    labels = {"host": name, **kw.pop("labels", {})}
    topology = {"rack": rack} if rack else {}
    return Node(name, pool, gpus, topology=topology, labels=labels, **kw)


def team(name, nominal=0, borrowing=None, lending=None, pool="a100", **kw):
    return Team(name, {pool: Quota(nominal, borrowing, lending)}, **kw)


def wl(wid, team_name, gpus=1, t=0.0, pool="a100", on=None, **kw):
    """A workload; ``on`` pins it to one node through its host label."""
    if on is not None:
        kw["node_selector"] = {**kw.get("node_selector", {}), "host": on}
    return Workload(wid, team_name, pool, gpus, t, **kw)


def sched(nodes, teams, policy=GPUHUB):
    if isinstance(policy, str):
        policy = POLICIES[policy]
    return Scheduler(nodes, teams, policy)


def submit(s, *workloads, now=None):
    for w in workloads:
        e = s.submit(w, w.submit_time if now is None else now)
        assert e.type == ev.QUEUED, e.message


def admitted(result):
    """workload id -> placement, for the ADMITTED events of a cycle."""
    return {e.workload_id: e.placement for e in result.events if e.type == ev.ADMITTED}


def preempted(result):
    return {e.workload_id: e for e in result.events if e.type == ev.PREEMPTED}


def nodes_of(placement):
    return [n for n, _ in placement]


def start(s, *workloads, now=0.0):
    """Submit and run these workloads (all must be admitted at once)."""
    submit(s, *workloads, now=now)
    result = s.step(now)
    got = admitted(result)
    missing = [w.id for w in workloads if w.id not in got]
    assert not missing, (missing, result.waiting)
    return result


def settle(s, now, exit_victims=True, max_cycles=50):
    """Step until nothing happens, letting preempted victims exit at once.
    Returns every event seen."""
    seen = []
    for i in range(max_cycles):
        result = s.step(now + i)
        seen.extend(result.events)
        if exit_victims:
            for e in result.events:
                if e.type == ev.PREEMPTED:
                    seen.append(s.finished(e.workload_id, now + i))
        if not result.events:
            return seen
    raise AssertionError("scheduler never settles")


def one_at_a_time(s, ids, now=10.0):
    """On a one-GPU cluster, admit, finish and repeat: the admission order."""
    order = []
    for i in range(len(ids)):
        result = s.step(now + i)
        got = list(admitted(result))
        assert len(got) == 1, (got, result.waiting)
        order.append(got[0])
        s.finished(got[0], now + i + 0.5)
    return order


# ---- quota -----------------------------------------------------------------

@pytest.mark.parametrize(
    "vision_running, nlp_running, ask, admit, words",
    [
        pytest.param([], [], 4, True, "", id="whole-nominal-at-once"),
        pytest.param([2], [], 2, True, "", id="rest-of-nominal"),
        pytest.param([1, 1, 1], [4], 1, True, "", id="last-gpu-while-other-team-full"),
        pytest.param([], [4], 4, True, "", id="other-team-at-its-nominal"),
        pytest.param([4], [], 1, False, "team vision holds 4 a100 GPUs and may hold at most 4",
                     id="nominal-used-up-no-borrowing"),
        pytest.param([3], [], 2, False, "this workload needs 2", id="one-over-nominal"),
    ],
)
def test_fits_within_unused_nominal_quota(vision_running, nlp_running, ask, admit, words):
    s = sched([node("n1", 8)], [team("vision", 4, borrowing=0), team("nlp", 4, borrowing=0)])
    runs = [wl(f"v{i}", "vision", g) for i, g in enumerate(vision_running)]
    runs += [wl(f"n{i}", "nlp", g) for i, g in enumerate(nlp_running)]
    if runs:
        start(s, *runs)
    submit(s, wl("new", "vision", ask, t=5.0))
    result = s.step(10.0)
    if admit:
        [e] = result.of_type(ev.ADMITTED)
        assert e.workload_id == "new" and e.borrowed == 0 and e.message == "admitted"
        assert len(e.placement[0][1]) == ask
    else:
        assert "new" not in admitted(result)
        assert words in result.waiting["new"]


@pytest.mark.parametrize(
    "borrowing_limit, runs, reason",
    [
        pytest.param(0, 4, "may hold at most 4 (nominal 4 + borrowing limit 0)", id="no-borrowing"),
        pytest.param(2, 6, "may hold at most 6 (nominal 4 + borrowing limit 2)", id="limit-2"),
        pytest.param(3, 7, "may hold at most 7 (nominal 4 + borrowing limit 3)", id="limit-3"),
        pytest.param(8, 10, "nothing can be borrowed", id="limit-above-what-is-idle"),
        pytest.param(None, 10, "nothing can be borrowed", id="no-limit-takes-all-idle"),
    ],
)
def test_borrows_idle_quota_of_other_teams_up_to_borrowing_limit(borrowing_limit, runs, reason):
    s = sched([node("n1", 8), node("n2", 2)],
              [team("vision", 4, borrowing_limit), team("nlp", 6)])
    submit(s, *[wl(f"v{i}", "vision", 1, t=float(i)) for i in range(12)])
    result = s.step(20.0)
    got = admitted(result)
    assert len(got) == runs
    # the first four are inside the nominal quota, the rest are marked borrowed
    borrowed = {e.workload_id: e.borrowed for e in result.of_type(ev.ADMITTED)}
    assert sum(borrowed.values()) == runs - 4
    assert all(borrowed[f"v{i}"] == 0 for i in range(4))
    assert all("borrowed, preemptible by reclaim" in e.message
               for e in result.of_type(ev.ADMITTED) if e.borrowed)
    assert reason in result.waiting[f"v{runs}"]
    assert all(f"v{i}" in result.waiting for i in range(runs, 12))


@pytest.mark.parametrize(
    "node_sizes, lending_limit, vision_runs",
    [
        pytest.param([8], 0, 4, id="lends-nothing"),
        pytest.param([8], 2, 6, id="lends-two"),
        pytest.param([8], 4, 8, id="lends-all-it-has"),
        pytest.param([8], None, 8, id="no-lending-limit"),
        pytest.param([8, 2], 1, 7, id="unowned-capacity-plus-one-lent"),
        pytest.param([8, 2], 0, 6, id="unowned-capacity-only"),
    ],
)
def test_lending_never_exceeds_lending_limit(node_sizes, lending_limit, vision_runs):
    nodes = [node(f"n{i}", g) for i, g in enumerate(node_sizes)]
    s = sched(nodes, [team("vision", 4), team("nlp", 4, lending=lending_limit)])
    submit(s, *[wl(f"v{i}", "vision", 1, t=float(i)) for i in range(12)])
    result = s.step(20.0)
    assert len(admitted(result)) == vision_runs
    assert (f"team vision is at {vision_runs}/4 a100 GPUs and nothing can be borrowed"
            in result.waiting[f"v{vision_runs}"])
    # what nlp did not lend is still there for it, without preempting anybody
    keep = 4 - (lending_limit if lending_limit is not None else 4)
    if keep:
        submit(s, *[wl(f"n{i}", "nlp", 1, t=30.0) for i in range(keep)])
        result = s.step(30.0)
        assert sorted(admitted(result)) == [f"n{i}" for i in range(keep)]
        assert not result.of_type(ev.PREEMPTED)


@pytest.mark.parametrize("policy", ["gpuhub", "quota-fifo"])
def test_lending_limit_holds_when_lender_takes_back_its_nominal(policy):
    """a lends at most 2 of its 4, c lends nothing, b borrows a's 2. When a
    then uses its whole nominal quota from GPUs that happen to be free (c's
    idle, unlendable quota), b's 2 borrowed GPUs are no longer covered by
    anything lent: b must give them back (reclaim), or a must wait for them."""
    s = sched([node("n1", 12)], [team("a", 4, lending=2), team("b", 4), team("c", 4, lending=0)],
              policy)
    start(s, *[wl(f"b{i}", "b", 1, t=float(i)) for i in range(6)])
    submit(s, wl("a0", "a", 4, t=10.0, kind=NOTEBOOK))
    seen = settle(s, 10.0)
    held = {t: sum(r.workload.gpus for r in s.state.running.values() if r.workload.team == t)
            for t in "abc"}
    a_lends = min(max(0, 4 - held["a"]), 2)
    b_borrows = max(0, held["b"] - 4)
    assert b_borrows <= a_lends, (f"b borrows {b_borrows} GPUs but a lends at most {a_lends} "
                                  f"(events: {[(e.type, e.workload_id) for e in seen]})")


# ---- order -----------------------------------------------------------------

@pytest.mark.parametrize("policy", ["gpuhub", "backfill", "quota-fifo", "fifo"])
@pytest.mark.parametrize(
    "jobs, by_priority",
    [
        pytest.param([("be", "vision", "best-effort"), ("b", "vision", "batch"),
                      ("i", "vision", "interactive"), ("p", "vision", "production")],
                     ["p", "i", "b", "be"], id="one-team-all-classes"),
        pytest.param([("v-be", "vision", "best-effort"), ("n-b", "nlp", "batch"),
                      ("v-p", "vision", "production"), ("n-i", "nlp", "interactive")],
                     ["v-p", "n-i", "n-b", "v-be"], id="two-teams-interleaved"),
    ],
)
def test_priority_classes_order_the_queue(policy, jobs, by_priority):
    # Nobody has quota: everything borrows the one unowned GPU, so only the
    # order decides (no reclaim, no priority preemption of running work).
    s = sched([node("n1", 1)], [team("vision"), team("nlp")], policy)
    submit(s, *[wl(wid, tm, 1, t=float(i), priority=p) for i, (wid, tm, p) in enumerate(jobs)])
    order = one_at_a_time(s, [j[0] for j in jobs])
    if POLICIES[policy].order_by_priority:
        assert order == by_priority
    else:  # FIFO: submit time only
        assert order == [j[0] for j in jobs]


@pytest.mark.parametrize(
    "holdings, weights, first, policy",
    [
        pytest.param({"a": {"a100": 3}, "b": {"a100": 1}}, {}, "b", "gpuhub",
                     id="smaller-share-first"),
        pytest.param({"a": {"a100": 3}, "b": {"a100": 1}}, {"a": 4.0}, "a", "gpuhub",
                     id="weight-divides-share"),
        pytest.param({"a": {"a100": 1, "h100": 1}, "b": {"a100": 3}}, {}, "b", "gpuhub",
                     id="dominant-resource-across-pools"),
        pytest.param({"a": {"a100": 2}, "b": {"a100": 2}}, {}, "a", "gpuhub",
                     id="equal-share-then-age"),
        pytest.param({"a": {"a100": 3}, "b": {"a100": 1}}, {}, "a", "quota-fifo",
                     id="no-fair-share-then-age"),
    ],
)
def test_lowest_weighted_dominant_share_goes_first_when_borrowing(holdings, weights, first, policy):
    nodes = [node("n1", 8), node("h1", 2, pool="h100")]
    teams = [Team(name, {}, weight=weights.get(name, 1.0)) for name in ("a", "b")]
    s = sched(nodes, teams, policy)
    runs = [wl(f"{tm}-{pool}-{i}", tm, 1, pool=pool)
            for tm, pools in holdings.items() for pool, n in pools.items() for i in range(n)]
    start(s, *runs)
    free = 8 - sum(p.get("a100", 0) for p in holdings.values())
    # "a" asks first; both need to borrow the same last free GPUs
    submit(s, wl("a-big", "a", free, t=100.0), wl("b-big", "b", free, t=101.0))
    result = s.step(102.0)
    assert list(admitted(result)) == [f"{first}-big"]
    loser = "b-big" if first == "a" else "a-big"
    assert "nothing can be borrowed" in result.waiting[loser]


HOUR = 3600.0


@pytest.mark.parametrize(
    "half_life, run, gap, first",
    [
        # a's decayed use right after a 10 h run of 8 GPUs is about 8 GPUs;
        # b holds 1 GPU the whole time (share about 2: held + decayed).
        pytest.param(HOUR, 10 * HOUR, 0.0, "b", id="just-finished"),
        pytest.param(HOUR, 10 * HOUR, HOUR, "b", id="one-half-life-later"),
        pytest.param(HOUR, 10 * HOUR, 3 * HOUR, "a", id="three-half-lives-later"),
        pytest.param(HOUR, 10 * HOUR, 10 * HOUR, "a", id="long-forgotten"),
        # 10 h of 8 GPUs with a 10 h half-life: about 4 GPUs, 3.2 three hours later
        pytest.param(10 * HOUR, 10 * HOUR, 3 * HOUR, "b", id="long-half-life-remembers"),
        # the default week: a week of 8 GPUs weighs about 4 GPUs
        pytest.param(GPUHUB.usage_half_life, 7 * 24 * HOUR, 0.0, "b", id="default-week"),
        pytest.param(GPUHUB.usage_half_life, 10 * HOUR, 0.0, "a", id="default-week-short-run"),
    ],
)
def test_decayed_usage_lowers_priority_of_recent_heavy_user(half_life, run, gap, first):
    policy = GPUHUB.with_(usage_half_life=half_life)
    s = sched([node("n1", 8), node("n2", 1)], [team("a"), team("b")], policy)
    start(s, wl("a-heavy", "a", 8, on="n1"), wl("b-small", "b", 1, on="n2"))
    end = run
    s.finished("a-heavy", end)
    t = end + gap
    submit(s, wl("a-next", "a", 8, t=t), wl("b-next", "b", 8, t=t + 1))
    result = s.step(t + 2)
    assert list(admitted(result)) == [f"{first}-next"]


@pytest.mark.parametrize(
    "jobs, order",
    [
        pytest.param([("a", "batch", 5.0), ("b", "batch", 1.0), ("c", "batch", 3.0)],
                     ["b", "c", "a"], id="age-by-submit-time-not-arrival"),
        pytest.param([("a", "batch", 0.0), ("b", "best-effort", 1.0), ("c", "batch", 2.0),
                      ("d", "production", 3.0)],
                     ["d", "a", "c", "b"], id="priority-then-age"),
        pytest.param([("old", "best-effort", 0.0), ("new", "interactive", 9.0)],
                     ["new", "old"], id="priority-beats-age"),
    ],
)
def test_within_team_priority_then_age(jobs, order):
    s = sched([node("n1", 1)], [team("vision", 1)])
    for wid, prio, t in jobs:
        submit(s, wl(wid, "vision", 1, t=t, priority=prio), now=9.0)
    assert one_at_a_time(s, [j[0] for j in jobs]) == order


# ---- preemption ------------------------------------------------------------

# A batch job first waits ``preemption_delay`` for GPUs to free up by
# themselves before it may preempt (notebooks and deployments preempt at once):
# job preemptors below are submitted at t and scheduled at t + DELAY.
DELAY = GPUHUB.preemption_delay


@pytest.mark.parametrize(
    "kind, waited, preempts",
    [
        pytest.param(JOB, 0.0, False, id="fresh-job-waits"),
        pytest.param(JOB, DELAY - 1, False, id="job-just-before-delay"),
        pytest.param(JOB, DELAY, True, id="job-after-delay"),
        pytest.param(NOTEBOOK, 0.0, True, id="notebook-at-once"),
        pytest.param(DEPLOYMENT, 0.0, True, id="deployment-at-once"),
    ],
)
def test_batch_job_waits_preemption_delay_before_preempting(kind, waited, preempts):
    s = sched([node("n1", 4)], [team("owner", 4), team("b")])
    start(s, wl("y", "b", 4))
    submit(s, wl("x", "owner", 4, t=100.0, kind=kind))
    result = s.step(100.0 + waited)
    assert ("y" in preempted(result)) == preempts
    if not preempts:
        assert "x" in result.waiting


@pytest.mark.parametrize(
    "nominal, weights, ask, victims",
    [
        # b1 holds 5 GPUs, b2 holds 3, all borrowed
        pytest.param(0, {}, 1, ["b1-4"], id="highest-share-newest-first"),
        pytest.param(0, {"b1": 4.0}, 1, ["b2-7"], id="weight-lowers-share"),
        pytest.param(0, {}, 3, ["b1-2", "b1-3", "b1-4"], id="several-from-highest-share"),
        # nominal 2 each: b1 borrows 3, b2 borrows 1; reclaim stops at nominal
        pytest.param(2, {}, 3, ["b1-2", "b1-3", "b1-4"], id="only-what-b1-borrowed"),
        pytest.param(2, {}, 4, ["b1-2", "b1-3", "b1-4", "b2-7"], id="then-next-borrower"),
    ],
)
def test_reclaim_preempts_borrowers_highest_share_first(nominal, weights, ask, victims):
    teams = [team("owner", 4), team("b1", nominal, weight=weights.get("b1", 1.0)),
             team("b2", nominal)]
    s = sched([node("n1", 8)], teams)
    runs = [wl(f"b1-{i}", "b1", 1, t=float(i)) for i in range(5)]
    runs += [wl(f"b2-{i}", "b2", 1, t=float(i)) for i in range(5, 8)]
    start(s, *runs, now=8.0)
    submit(s, wl("x", "owner", ask, t=100.0))
    result = s.step(100.0 + DELAY)
    got = preempted(result)
    assert sorted(got) == victims, result.waiting.get("x")
    for e in got.values():
        assert e.preemptor_id == "x"
        assert "team owner reclaims its nominal a100 quota for workload x" in e.message
        assert "was borrowing" in e.message
    [nom] = result.of_type(ev.NOMINATED)
    assert nom.workload_id == "x"
    # the preemptor gets exactly the victims' GPUs
    victim_gpus = {(n, g) for v in victims for n, gs in s.state.running[v].placement for g in gs}
    assert {(n, g) for n, gs in nom.placement for g in gs} == victim_gpus


CAP = GPUHUB.max_preemptions


@pytest.mark.parametrize("rule, attempt, preempt", [
    pytest.param("reclaim", 0, True, id="reclaim-fresh-borrower"),
    pytest.param("reclaim", CAP - 1, True, id="reclaim-below-the-cap"),
    pytest.param("reclaim", CAP, False, id="reclaim-respects-the-cap"),
    pytest.param("priority", 0, True, id="priority-fresh-victim"),
    pytest.param("priority", CAP, False, id="priority-respects-the-cap"),
])
def test_preemption_cap_holds_for_both_rules(rule, attempt, preempt):
    """A workload preempted ``max_preemptions`` times is not preempted again,
    by reclaim either: the lender gets its quota back when the borrower ends
    (by its time limit), holding the reservation for it meanwhile; inside a
    team the higher priority starts when the capped job ends."""
    if rule == "reclaim":
        s = sched([node("n1", 2)], [team("owner", 2), team("b", 0)])
        start(s, wl("v", "b", 2, t=0.0, attempt=attempt, time_limit=3600.0))
        submit(s, wl("x", "owner", 2, t=10.0))
    else:
        s = sched([node("n1", 2)], [team("vision", 2)])
        start(s, wl("v", "vision", 2, t=0.0, priority="batch", attempt=attempt,
                    time_limit=3600.0))
        submit(s, wl("x", "vision", 2, t=10.0, priority="production"))
    result = s.step(10.0 + DELAY)
    assert ("v" in preempted(result)) == preempt, result.waiting.get("x")
    if not preempt:
        if rule == "reclaim":
            assert [(r.workload_id, r.start) for r in result.reservations] == [("x", 3600.0)]
        s.finished("v", 3600.0)
        assert "x" in admitted(s.step(3600.0))


HOUR = 3600.0


@pytest.mark.parametrize("waited, ran, preempt", [
    pytest.param(0.0, DELAY, True, id="started-at-once-reclaimed-at-once"),
    pytest.param(2 * HOUR, 1 * HOUR, False, id="waited-2h-ran-1h"),
    pytest.param(2 * HOUR, 2 * HOUR, True, id="waited-2h-ran-2h"),
    pytest.param(72 * HOUR, 7 * HOUR, False, id="waited-3-days-ran-7h"),
    pytest.param(72 * HOUR, GPUHUB.age_protection, True, id="protection-is-bounded"),
])
def test_age_protection_keeps_long_waited_work_running_for_as_long(waited, ran, preempt):
    """A workload that waited for its GPUs is not reclaimed before it has run
    as long as it waited, up to ``age_protection`` (gpuhub: 8 h); one that
    started at once is reclaimed as soon as the lender asks."""
    s = sched([node("n1", 4)], [team("owner", 4), team("b", 0)])
    submit(s, wl("v", "b", 4, t=0.0))
    assert "v" in admitted(s.step(waited))
    submit(s, wl("x", "owner", 4, t=waited + ran - DELAY))
    got = preempted(s.step(waited + ran))
    assert ("v" in got) == preempt


@pytest.mark.parametrize("victims_running, victim", [
    pytest.param(["gang", "single"], "single", id="single-job-newer"),
    pytest.param(["single", "gang"], "single", id="gang-newer"),
    pytest.param(["gang"], "gang", id="only-the-gang-makes-room"),
])
def test_reclaim_counts_every_gpu_a_gang_victim_holds(victims_running, victim):
    """A one-node preemptor evicts a 4-GPU job rather than a 2 × 4-GPU gang
    that frees as much on one node: the gang stops on both of its nodes."""
    nodes = [node("n1", 4), node("n2", 4)] + ([node("n3", 4)] if "single" in victims_running
                                              else [])
    s = sched(nodes, [team("owner", 4), team("b", 0)])
    shapes = {"gang": wl("gang", "b", 4, num_nodes=2), "single": wl("single", "b", 4)}
    for i, name in enumerate(victims_running):
        start(s, replace(shapes[name], submit_time=float(i)), now=float(i))
    submit(s, wl("x", "owner", 4, t=100.0))
    assert list(preempted(s.step(100.0 + DELAY))) == [victim]


@pytest.mark.parametrize(
    "setup, victim, preemptor_priority, preempt",
    [
        pytest.param("fragmented", dict(priority="batch"), "production", True, id="batch-by-production"),
        pytest.param("fragmented", dict(priority="best-effort"), "batch", True, id="best-effort-by-batch"),
        pytest.param("fragmented", dict(priority="batch"), "batch", False, id="equal-priority"),
        pytest.param("fragmented", dict(priority="batch"), "best-effort", False, id="lower-priority"),
        pytest.param("fragmented", dict(priority="interactive"), "production", False,
                     id="non-preemptible-class"),
        pytest.param("fragmented", dict(kind=NOTEBOOK, priority="batch"), "production", False,
                     id="notebook-is-not-a-job"),
        pytest.param("at-nominal", dict(priority="batch"), "production", True,
                     id="team-using-all-its-quota"),
        pytest.param("at-nominal", dict(priority="best-effort"), "interactive", True,
                     id="team-using-all-its-quota-best-effort"),
    ],
)
def test_higher_priority_preempts_lower_within_team(setup, victim, preemptor_priority, preempt):
    if setup == "fragmented":
        # 4 GPUs of quota, 2 in use, but no node has 2 free
        s = sched([node("n1", 2), node("n2", 2)], [team("vision", 4)])
        start(s, wl("old", "vision", 1, t=0.0, on="n1", **victim),
              wl("new", "vision", 1, t=1.0, on="n2", **victim))
        ask = 2
    else:
        # the team owns the whole node and fills it with its own low-priority work
        s = sched([node("n1", 2)], [team("vision", 2)])
        start(s, wl("old", "vision", 1, t=0.0, **victim), wl("new", "vision", 1, t=1.0, **victim))
        ask = 1
    submit(s, wl("urgent", "vision", ask, t=10.0, priority=preemptor_priority))
    result = s.step(10.0 + DELAY)
    got = preempted(result)
    if preempt:
        assert list(got) == ["new"], result.waiting.get("urgent")  # newest first
        assert got["new"].message == (f"preempted by higher-priority {preemptor_priority} "
                                      f"workload urgent of team vision")
        assert [e.workload_id for e in result.of_type(ev.NOMINATED)] == ["urgent"]
    else:
        assert not got
        assert "urgent" in result.waiting


@pytest.mark.parametrize("quota", [Quota(0, 3), Quota(3, 0)],
                         ids=["borrowing-limit", "nominal-no-borrowing"])
@pytest.mark.parametrize("waiting_too", [False, True], ids=["alone", "team-work-waiting-too"])
def test_team_never_above_its_quota_while_victims_shut_down(quota, waiting_too):
    """A notebook that makes quota room by preempting its team's best-effort
    job starts once the job has exited, not on other free GPUs during the
    job's grace period (the team would hold both); and the quota the job
    gives back is not handed to other waiting work of the team meanwhile."""
    teams = [Team("t1", {"a100": quota}), team("other")]
    s = sched([node("n1", 6)], teams)
    start(s, wl("j", "t1", 3, priority="best-effort"))  # the team at its quota
    if waiting_too:  # blocked by the team's quota
        submit(s, wl("small", "t1", 1, t=0.5, priority="best-effort"))
    submit(s, wl("nb", "t1", 1, t=1.0, kind=NOTEBOOK))
    ceiling = 3
    for t in (1.0, 2.0, 3.0):
        s.step(t)
        held = {wid: r.state.value for wid, r in s.state.running.items() if r.workload.team == "t1"}
        gpus = sum(s.state.running[wid].workload.gpus for wid in held)
        assert gpus <= ceiling, f"t={t}: t1 holds {gpus} GPUs ({held}), may hold {ceiling}"
    s.finished("j", 4.0)
    assert "nb" in admitted(s.step(5.0)) or "nb" in s.state.running


@pytest.mark.parametrize(
    "grace_period, policy_grace, kill_after",
    [
        pytest.param(None, None, 30.0, id="default-grace"),
        pytest.param(120.0, None, 120.0, id="workload-grace"),
        pytest.param(None, 5.0, 5.0, id="policy-grace"),
    ],
)
def test_preempted_workload_requeued_with_attempt_plus_one(grace_period, policy_grace, kill_after):
    policy = GPUHUB if policy_grace is None else GPUHUB.with_(default_grace_period=policy_grace)
    s = sched([node("n1", 4)], [team("owner", 4), team("b")], policy)
    start(s, wl("y", "b", 4, grace_period=grace_period))
    y_gpus = s.state.running["y"].placement
    submit(s, wl("x", "owner", 4, t=100.0))
    t = 100.0 + DELAY

    result = s.step(t)
    [p] = result.of_type(ev.PREEMPTED)
    assert (p.workload_id, p.preemptor_id, p.kill_at, p.attempt) == ("y", "x", t + kill_after, 1)
    assert [e.workload_id for e in result.of_type(ev.NOMINATED)] == ["x"]

    # during the grace period the preemptor waits and says for whom
    result = s.step(t + 1)
    assert not admitted(result)
    assert "waiting for preempted workload(s) y to exit" in result.waiting["x"]

    done = s.finished("y", t + 2)
    assert (done.type, done.attempt, done.message) == (ev.REQUEUED, 1, "requeued as attempt 1")
    assert s.state.pending["y"].attempt == 1
    assert s.state.pending["y"].preempted_by == {"x"}

    result = s.step(t + 3)
    assert admitted(result) == {"x": y_gpus}
    # y is back in the queue, waiting for capacity it may borrow
    assert "team b is at 0/0 a100 GPUs and nothing can be borrowed" in result.waiting["y"]


@pytest.mark.parametrize(
    "kind, sizes, ask, victims",
    [
        pytest.param(NOTEBOOK, [1] * 8, [1] * 4, ["b4", "b5", "b6", "b7"], id="notebooks"),
        pytest.param(DEPLOYMENT, [1] * 8, [1] * 4, ["b4", "b5", "b6", "b7"], id="deployments"),
        pytest.param(NOTEBOOK, [2] * 4, [2, 2], ["b2", "b3"], id="two-gpu-notebooks"),
        pytest.param(DEPLOYMENT, [2] * 4, [4], ["b2", "b3"], id="deployments-for-one-gang"),
    ],
)
def test_notebooks_and_deployments_within_nominal_never_preempted(kind, sizes, ask, victims):
    s = sched([node("n1", 8)], [team("a", 4), team("b", 4)])
    start(s, *[wl(f"b{i}", "b", g, t=float(i), kind=kind) for i, g in enumerate(sizes)], now=10.0)
    submit(s, *[wl(f"a{i}", "a", g, t=100.0 + i) for i, g in enumerate(ask)])
    seen = settle(s, 100.0 + DELAY)
    assert sorted(e.workload_id for e in seen if e.type == ev.PREEMPTED) == victims
    assert all(f"a{i}" in s.state.running for i in range(len(ask)))
    # b is back at its nominal 4: those may not be taken any more, whatever
    # else happens: more of a's work (it would borrow), a's notebooks (they
    # preempt at once, but only a's own jobs), a production job of b
    within = {wid for wid, r in s.state.running.items() if r.workload.team == "b"}
    assert sum(s.state.running[wid].workload.gpus for wid in within) == 4
    t = 1000.0
    submit(s, wl("a-more", "a", 1, t=t), wl("b-urgent", "b", 1, t=t, priority="production"),
           wl("a-notebook", "a", 1, t=t, kind=NOTEBOOK))
    seen = settle(s, t + DELAY)
    assert not [e.workload_id for e in seen if e.type == ev.PREEMPTED and e.workload_id in within]
    assert within <= set(s.state.running)


@pytest.mark.parametrize("again", ["requeued-victim", "fresh-workload", "victim-evicted-in-grace"])
def test_no_preemption_loop(again):
    # Without age protection: x, which waited a while, would be protected.
    s = sched([node("n1", 4)], [team("a", 2), team("b", 0)],
              GPUHUB.with_(age_protection=None))
    # z and y borrow a's idle quota and the unowned GPUs
    start(s, wl("z", "b", 2, t=0.0), wl("y", "b", 2, t=1.0))
    assert s.state.running["y"].placement == (("n1", (2, 3)),)
    submit(s, wl("x", "a", 2, t=10.0))
    t = 10.0 + DELAY
    result = s.step(t)
    assert preempted(result)["y"].preemptor_id == "x"
    if again == "victim-evicted-in-grace":
        # y's GPU breaks while it shuts down: y is evicted rather than exiting
        # and x, its nomination on GPU 3 dropped, reclaims z's GPUs at once
        s.set_node(replace(s.state.nodes["n1"], unhealthy_gpus=frozenset({3})))
        assert list(preempted(s.step(t + 1))) == ["z"]
        s.finished("z", t + 1)
        s.set_node(replace(s.state.nodes["n1"], unhealthy_gpus=frozenset()))
    else:
        s.finished("y", t + 1)
    for i in range(2, 6):  # x gets its GPUs (again, if it was moved off the broken one)
        s.step(t + i)
    assert "x" in s.state.running and "y" in s.state.pending
    # quotas swap: now x's team borrows and y's team is within its nominal
    s.set_team(team("a", 0))
    s.set_team(team("b", 4))
    if again == "fresh-workload":
        s.cancel("y", t + 10)
        submit(s, wl("w", "b", 2, t=0.0))
    result = s.step(t + 10)
    if again == "fresh-workload":
        assert preempted(result)["x"].preemptor_id == "w"
    else:
        # y could reclaim from x by quota, but x preempted y: no loop
        assert "x" not in preempted(result), "y preempts x, which had preempted y"
        assert "y" in result.waiting


@pytest.mark.parametrize("borrowing_limit, s_limit, s_runs", [
    pytest.param(2, 20000.0, False, id="ceiling-hold-keeps-long-work-back"),
    pytest.param(2, 500.0, True, id="ceiling-hold-lets-short-work-pass"),
    pytest.param(None, 20000.0, True, id="pool-full-wait-holds-no-quota"),
])
def test_quota_hold_only_for_a_wait_on_the_teams_ceiling(borrowing_limit, s_limit, s_runs):
    """x (4 GPUs) is refused: by its team's ceiling (nominal 4 + borrowing
    limit 2, holding 5), it holds the team's quota from t=1000 (r1 ends) and
    s, which would run past that, waits behind it; only because the pool is
    full (no borrowing limit), x waits for GPUs (with a reservation after
    ``reserve_for_borrowers_after``) and holds no quota: s starts."""
    s = sched([node("n1", 4), node("n2", 4)],
              [team("t", 4, borrowing_limit), team("o", 4)])
    start(s, wl("r1", "t", 3, time_limit=1000.0), wl("r2", "t", 2, time_limit=10000.0),
          wl("o1", "o", 2, time_limit=20000.0))
    submit(s, wl("x", "t", 4, t=10.0), wl("s", "t", 1, t=11.0, time_limit=s_limit))
    result = s.step(11.0)
    assert ("s" in admitted(result)) == s_runs, result.waiting.get("s")
    if not s_runs:
        assert result.waiting["s"] == ("waiting behind x of team t, which needs the team's "
                                       "a100 quota first")
    assert [h.workload_id for h in result.quota_holds] == (["x"] if borrowing_limit else [])


# ---- backfill --------------------------------------------------------------

def backfill_cluster(policy, arrival):
    """n1, n2 with 4 GPUs; r holds 2 GPUs of n1 until t=1000; the gang h
    (2 nodes x 3 GPUs) waits for it with a reservation at t=1000. With
    ``arrival="head-had-a-cycle"`` h has been through one cycle alone before
    the later work arrives; with "same-cycle" they are first seen together."""
    s = sched([node("n1", 4), node("n2", 4)], [team("a", 8, borrowing=0), team("b")], policy)
    start(s, wl("r", "a", 2, time_limit=1000.0))
    assert s.state.running["r"].placement[0][0] == "n1"
    submit(s, wl("h", "a", 3, t=10.0, num_nodes=2, time_limit=1000.0))
    if arrival == "head-had-a-cycle":
        result = s.step(10.0)
        assert [(r.workload_id, r.start) for r in result.reservations] == [("h", 1000.0)]
    return s


ARRIVALS = pytest.mark.parametrize("arrival", ["head-had-a-cycle", "same-cycle"])


@ARRIVALS
@pytest.mark.parametrize("policy", ["gpuhub", "backfill"])
@pytest.mark.parametrize(
    "gpus, time_limit, runs, where",
    [
        pytest.param(2, 500.0, True, "n1", id="short-fills-the-gap"),
        pytest.param(4, 900.0, True, "n2", id="short-takes-a-reserved-node"),
        pytest.param(1, 5000.0, True, "n1", id="long-but-fits-the-spare-gpu"),
        pytest.param(2, 5000.0, False, None, id="long-would-take-reserved-gpus"),
        pytest.param(2, None, False, None, id="unbounded-would-take-reserved-gpus"),
        pytest.param(1, 1000.0 - 30.0, True, "n1", id="ends-exactly-at-reservation"),
    ],
)
def test_easy_backfill_short_job_runs_before_reservation(arrival, policy, gpus, time_limit, runs,
                                                        where):
    s = backfill_cluster(policy, arrival)
    submit(s, wl("s", "a", gpus, t=20.0, time_limit=time_limit))
    result = s.step(30.0)
    assert "h" not in admitted(result)
    assert [(r.workload_id, r.start) for r in result.reservations] == [("h", 1000.0)]
    assert result.waiting["h"] == ("waiting for 6 a100 GPUs; reserved to start within 16 min "
                                   "(backfill keeps that start)")
    if runs:
        assert nodes_of(admitted(result)["s"]) == [where]
    else:
        assert "s" not in admitted(result) and "s" in result.waiting


@ARRIVALS
@pytest.mark.parametrize("policy", ["gpuhub", "backfill"])
@pytest.mark.parametrize(
    "later",
    [
        # (team, GPUs, time limit, submitted at); team b has no quota and borrows
        pytest.param([("a", 2, 5000.0, 20)], id="one-long-job"),
        pytest.param([("a", 1, 5000.0, 20)] * 3, id="long-jobs-one-gpu-each"),
        pytest.param([("a", 2, 400.0, 20), ("a", 2, 5000.0, 21), ("a", 1, None, 22)],
                     id="short-then-long"),
        pytest.param([("a", 3, 500.0, 20), ("a", 1, 2000.0, 21), ("a", 4, 900.0, 22)], id="mixed"),
        pytest.param([("b", 2, 5000.0, 20)], id="other-team-long-job"),
        pytest.param([("a", 1, 5000.0, 20), ("a", 1, 5000.0, 21), ("b", 2, None, 100)],
                     id="other-team-arrives-after-backfill"),
    ],
)
def test_backfill_never_delays_reservation(arrival, policy, later):
    s = backfill_cluster(policy, arrival)
    todo = [wl(f"s{i}", tm, g, t=float(at), time_limit=tl) for i, (tm, g, tl, at) in enumerate(later)]
    ends = {}
    lost = {}  # cycle time -> why h waits, where h had no reservation
    for t in range(30, 1000, 97):  # cycles before the reservation, with backfilled work ending
        for w in [w for w in todo if w.submit_time <= t]:
            submit(s, w)
            todo.remove(w)
        for wid, end in list(ends.items()):
            if end <= t:
                s.finished(wid, end)
                del ends[wid]
        result = s.step(float(t))
        assert "h" not in admitted(result)
        if [r.start for r in result.reservations if r.workload_id == "h"] != [1000.0]:
            lost[t] = result.waiting["h"]
        for wid in admitted(result):
            tl = s.state.running[wid].workload.time_limit
            ends[wid] = t + tl if tl is not None else float("inf")
    for wid, end in ends.items():
        if end <= 1000.0:
            s.finished(wid, end)
    s.finished("r", 1000.0)
    result = s.step(1000.0)
    if policy == "gpuhub" and later[-1][0] == "b" and later[-1][2] is None:
        # Team b borrowed idle GPUs with unbounded work while h was held back by
        # its own team's quota (no node reservation then): h reclaims them at
        # its start and runs once they have left, one grace period later.
        victims = preempted(result)
        assert victims and all(s.state.running[v].workload.team == "b" for v in victims)
        for v in victims:
            s.finished(v, 1030.0)
        result = s.step(1030.0)
        lost = {}
    assert "h" in admitted(result), (
        f"h delayed past its reserved start: {result.waiting.get('h')}; backfilled: "
        f"{sorted(ends)}; preempted now: {sorted(preempted(result))}; h had no node "
        f"reservation at {lost}")
    assert sorted(nodes_of(admitted(result)["h"])) == ["n1", "n2"]


@pytest.mark.parametrize("policy", ["gpuhub", "backfill"])
def test_a_borrowers_reservation_survives_the_pool_filling_up(policy):
    """The case hypothesis found (issue 19): teams without quota borrow
    everything. g (2 nodes x 4 GPUs) gets its reservation for r's end while
    the pool still has room for it; short work backfilled around it then fills
    the pool, so g's quota check says the pool is full. g keeps its
    reservation all the same: a job whose time limit reaches past g's start is
    not admitted on the GPUs drained for g, and g starts when it was told."""
    s = sched([node("n0", 6), node("n1", 4)], [team("t0"), team("t1")], policy)
    start(s, wl("r", "t1", 2, t=60.0, time_limit=7200.0, on="n1"), now=60.0)
    submit(s, wl("g", "t0", 4, t=60.0, num_nodes=2, time_limit=3600.0))
    assert [(x.workload_id, x.start) for x in s.step(60.0).reservations] == [("g", 7260.0)]
    start(s, wl("short", "t1", 3, t=120.0, time_limit=600.0), now=120.0)  # ends by 720
    submit(s, wl("long", "t1", 3, t=130.0, time_limit=7200.0))  # would end at 7330
    result = s.step(130.0)
    assert [(x.workload_id, x.start) for x in result.reservations] == [("g", 7260.0)]
    assert "long" not in admitted(result) and "long" in result.waiting
    s.finished("short", 720.0)
    s.finished("r", 7260.0)
    assert "g" in admitted(s.step(7260.0))


@pytest.mark.parametrize("passes", [False, True], ids=["shipped", "promised-passes-borrowers"])
def test_promised_work_passes_a_borrowers_reservation_only_where_the_policy_says(passes):
    """g (big: no quota, 2 nodes x 4) holds the pool's reservation for
    f1's end at t=10,000. small's 4-GPU job, which its nominal quota holds
    with all of small's queue, would keep n2 until t=24,001. With
    ``promised_passes_borrowers`` it starts there and g's start moves; as
    shipped it waits for g like everyone else. fill's borrowing job waits
    either way."""
    s = sched([node("n1", 4), node("n2", 4)], [team("big"), team("small", 4), team("fill", 4)],
              GPUHUB.with_(promised_passes_borrowers=passes))
    start(s, wl("f1", "fill", 4, time_limit=10000.0, on="n1"))
    submit(s, wl("g", "big", 4, t=0.0, num_nodes=2, time_limit=3600.0))
    result = s.step(4000.0)  # past reserve_for_borrowers_after
    assert [(r.workload_id, r.start, r.borrowing) for r in result.reservations] == \
        [("g", 10000.0, passes)]  # marked a borrower's only where it matters
    submit(s, wl("s", "small", 4, t=4001.0, time_limit=20000.0), wl("f2", "fill", 1, t=4001.0))
    result = s.step(4001.0)
    assert sorted(admitted(result)) == (["s"] if passes else [])
    assert "f2" in result.waiting and "g" in result.waiting
    if passes:  # g now starts when s ends
        later = s.step(4002.0).reservations
        assert [(r.workload_id, r.start) for r in later] == [("g", 24001.0)]


def test_backfill_never_delays_reservation_through_preemption():
    """A workload behind h in the order may not take h's reserved GPUs by
    preempting someone either. h (a's gang, one rack) waits for r's GPUs on
    n1 at t=1000 with n2 reserved; w (d's job, within d's nominal, newer than
    h) finds no room outside the reservation and c (no quota) borrows a GPU
    of n2."""
    nodes = [node("n1", 4, rack="r1"), node("n2", 4, rack="r1"), node("n3", 4, rack="r2")]
    s = sched(nodes, [team("a", 6), team("d", 4), team("c")])
    start(s, wl("r", "d", 2, kind=NOTEBOOK, time_limit=1000.0, on="n1"), wl("c2", "c", 4, on="n3"))
    submit(s, wl("h", "a", 3, t=10.0, num_nodes=2, topology="required", time_limit=1000.0))
    assert [(x.workload_id, x.start) for x in s.step(10.0).reservations] == [("h", 1000.0)]
    start(s, wl("c1", "c", 1, t=15.0, on="n2"), now=15.0)
    submit(s, wl("w", "d", 2, t=20.0))
    needless = []
    for t in (20.0, 20.0 + DELAY, 21.0 + DELAY, 500.0):
        result = s.step(t)
        for e in result.of_type(ev.PREEMPTED):
            victim_gpus = set(s.state.running[e.workload_id].placement)
            nominated = {nom.workload_id: nom.placement for nom in result.of_type(ev.NOMINATED)}
            used = {(n, g) for n, gs in nominated.get(e.preemptor_id, ()) for g in gs}
            if not {(n, g) for n, gs in victim_gpus for g in gs} & used:
                needless.append(f"{e.workload_id} preempted for {e.preemptor_id}, which takes "
                                f"other GPUs {sorted(used)}")
            s.finished(e.workload_id, t)
    s.finished("r", 1000.0)
    result = s.step(1000.0)
    w_on = s.state.running["w"].placement if "w" in s.state.running else None
    assert "h" in admitted(result), (f"h delayed past its reserved start: "
                                     f"{result.waiting.get('h')}; w runs on {w_on}")
    assert not needless


# ---- placement -------------------------------------------------------------

@pytest.mark.parametrize("policy", ["gpuhub", "backfill"])
@pytest.mark.parametrize(
    "busy, num_nodes, per_node, placed_on",
    [
        pytest.param({}, 3, 4, ["n1", "n2", "n3"], id="whole-cluster"),
        pytest.param({"n2": 1}, 3, 4, None, id="one-gpu-short-waits-whole"),
        pytest.param({"n2": 1}, 2, 4, ["n1", "n3"], id="skips-the-busy-node"),
        pytest.param({"n1": 2, "n2": 2}, 2, 2, ["n1", "n2"], id="fills-the-busy-nodes"),
        pytest.param({"n1": 3, "n2": 3, "n3": 2}, 2, 2, None, id="enough-gpus-too-few-nodes"),
    ],
)
def test_gang_placed_whole_or_not_at_all(policy, busy, num_nodes, per_node, placed_on):
    # a generous nominal quota: only placement decides here
    s = sched([node(f"n{i}", 4) for i in (1, 2, 3)], [team("a", 16)], policy)
    if busy:
        start(s, *[wl(f"busy-{n}", "a", g, on=n) for n, g in busy.items()])
    submit(s, wl("gang", "a", per_node, t=10.0, num_nodes=num_nodes))
    result = s.step(10.0)
    if placed_on is None:
        assert "gang" not in admitted(result)
        assert "gang" not in s.state.running
        assert f"waiting for {num_nodes} nodes × {per_node} a100 GPUs" in result.waiting["gang"]
        # nothing of the gang holds a GPU while it waits
        held = {(n, g) for r in s.state.running.values() for n, gs in r.placement for g in gs}
        assert len(held) == sum(busy.values())
    else:
        placement = admitted(result)["gang"]
        assert sorted(nodes_of(placement)) == placed_on
        assert all(len(gs) == per_node for _, gs in placement)


def topology_cluster(policy="gpuhub"):
    nodes = [node("n1", 4, rack="r1"), node("n2", 4, rack="r1"),
             node("n3", 4, rack="r2"), node("n4", 4, rack="r2"), node("n5", 4, rack="r2")]
    return sched(nodes, [team("a", 20)], policy)


TOPOLOGY_CASES = [
    # busy nodes, gang nodes, placement when required, placement when preferred
    pytest.param([], 2, ["n1", "n2"], ["n1", "n2"], id="smallest-rack-that-fits"),
    pytest.param(["n1"], 2, ["n3", "n4"], ["n3", "n4"], id="other-rack"),
    pytest.param(["n1", "n3", "n4"], 2, None, ["n2", "n5"], id="one-free-node-per-rack"),
    pytest.param([], 3, ["n3", "n4", "n5"], ["n3", "n4", "n5"], id="only-big-rack"),
    pytest.param(["n5"], 3, None, ["n1", "n2", "n3"], id="no-rack-has-three-free"),
]


def place_gang(busy, num_nodes, topology):
    """A 4-GPU-per-node gang on the topology cluster with ``busy`` nodes taken."""
    s = topology_cluster()
    if busy:
        start(s, *[wl(f"busy-{n}", "a", 1, on=n) for n in busy])
    submit(s, wl("gang", "a", 4, t=10.0, num_nodes=num_nodes, topology=topology))
    return s, s.step(10.0)


@pytest.mark.parametrize("busy, num_nodes, required, preferred", TOPOLOGY_CASES)
def test_topology_required_keeps_gang_in_one_domain(busy, num_nodes, required, preferred):
    s, result = place_gang(busy, num_nodes, "required")
    if required is None:
        assert "gang" not in admitted(result)
        assert "gang" in result.waiting
    else:
        assert sorted(nodes_of(admitted(result)["gang"])) == required
        racks = {s.state.nodes[n].topology["rack"] for n in required}
        assert len(racks) == 1


def test_topology_required_gang_larger_than_any_domain_is_rejected():
    s = topology_cluster()
    e = s.submit(wl("gang", "a", 4, num_nodes=4, topology="required"), 0.0)
    assert e.type == ev.REJECTED
    assert e.message == "asks for 4 nodes in one rack but no rack of a100 has more than 3"


@pytest.mark.parametrize("busy, num_nodes, required, preferred", TOPOLOGY_CASES + [
    pytest.param([], 4, None, ["n1", "n3", "n4", "n5"], id="spans-racks-largest-first"),
])
def test_topology_preferred_falls_back_across_domains(busy, num_nodes, required, preferred):
    _, result = place_gang(busy, num_nodes, "preferred")
    assert sorted(nodes_of(admitted(result)["gang"])) == preferred


@pytest.mark.parametrize("policy", ["gpuhub", "backfill", "fifo"])
@pytest.mark.parametrize(
    "sizes, nodes",
    [
        pytest.param([1, 1, 1], ["n1", "n1", "n1"], id="ones-on-one-node"),
        pytest.param([4, 2, 2], ["n1", "n1", "n1"], id="fill-first-node"),
        pytest.param([6, 3, 2], ["n1", "n2", "n1"], id="best-fit"),
        pytest.param([5, 2, 3], ["n1", "n1", "n2"], id="fullest-that-fits"),
    ],
)
def test_small_jobs_packed_to_keep_whole_nodes_free(policy, sizes, nodes):
    s = sched([node("n1", 8), node("n2", 8), node("n3", 8)], [team("a", 24)], policy)
    got = []
    for i, g in enumerate(sizes):  # one at a time, so the order is the submit order
        submit(s, wl(f"s{i}", "a", g, t=float(i)))
        got += nodes_of(admitted(s.step(float(i)))[f"s{i}"])
    assert got == nodes
    # a whole-node job still fits
    submit(s, wl("whole", "a", 8, t=10.0))
    assert nodes_of(admitted(s.step(10.0))["whole"]) == (["n3"] if "n2" in nodes else ["n2"])


def labelled_cluster():
    nodes = [node("eu1", 4, labels={"region": "eu", "disk": "nvme"}),
             node("eu2", 4, labels={"region": "eu", "disk": "hdd"}),
             node("us1", 8, labels={"region": "us", "disk": "nvme"})]
    teams = [team("vision", 16, node_selector={"region": "eu"}), team("nlp", 16)]
    return sched(nodes, teams)


@pytest.mark.parametrize(
    "team_name, selector, gpus, allowed",
    [
        pytest.param("vision", {}, 4, {"eu1", "eu2"}, id="team-selector"),
        pytest.param("vision", {"disk": "nvme"}, 2, {"eu1"}, id="team-and-workload-selector"),
        pytest.param("nlp", {}, 8, {"us1"}, id="no-selector"),
        pytest.param("nlp", {"region": "eu"}, 4, {"eu1", "eu2"}, id="workload-selector"),
        pytest.param("vision", {"region": "us"}, 1, set(), id="workload-cannot-override-team"),
    ],
)
def test_placement_constraints_node_labels(team_name, selector, gpus, allowed):
    s = labelled_cluster()
    e = s.submit(wl("w", team_name, gpus, node_selector=selector), 0.0)
    result = s.step(1.0)
    placed = set(nodes_of(admitted(result).get("w", ())))
    if allowed:
        assert e.type == ev.QUEUED and placed and placed <= allowed
    else:  # a team's data-residency selector is a restriction, not a default
        assert not placed & {"us1"}, f"vision's work placed on {placed} despite region=eu"
        assert e.type == ev.REJECTED and "team vision is restricted to region=eu" in e.message


def test_placement_constraints_waiting_reason_names_labels():
    s = labelled_cluster()
    start(s, wl("fill1", "vision", 4, on="eu1"), wl("fill2", "vision", 4, on="eu2"))
    submit(s, wl("w", "vision", 2, t=5.0))
    result = s.step(5.0)
    assert "w" not in admitted(result)
    assert result.waiting["w"] == ("waiting for 2 × a100 GPUs (8 free in the pool, none placeable "
                                   "on nodes labelled region=eu)")


@pytest.mark.parametrize(
    "broken, evicted, kept",
    [
        pytest.param(dict(healthy=False), ["j", "k"], [], id="node-down"),
        pytest.param(dict(unhealthy_gpus=frozenset({0})), ["j"], ["k"], id="one-gpu-down"),
    ],
)
def test_unhealthy_node_takes_no_work_and_running_work_is_requeued(broken, evicted, kept):
    s = sched([node("n1", 4), node("n2", 4)], [team("a", 8)])
    start(s, wl("j", "a", 2, on="n1"), wl("k", "a", 2, on="n1"))
    assert s.state.running["j"].placement == (("n1", (0, 1)),)
    s.set_node(replace(s.state.nodes["n1"], **broken))
    result = s.step(10.0)
    assert sorted(e.workload_id for e in result.of_type(ev.EVICTED)) == evicted
    assert all(e.message == "its node or GPU became unhealthy; requeued"
               for e in result.of_type(ev.EVICTED))
    requeued = {e.workload_id: e.attempt for e in result.of_type(ev.REQUEUED)}
    assert requeued == {wid: 1 for wid in evicted}
    assert all(wid in s.state.running for wid in kept)
    # fresh work and the requeued work avoid the broken hardware
    submit(s, *[wl(f"f{i}", "a", 1, t=20.0) for i in range(4)])
    for t in (20.0, 21.0, 22.0):
        for placement in admitted(s.step(t)).values():
            for n, gs in placement:
                assert set(gs) <= set(s.state.nodes[n].usable_gpus()), (n, gs)
    # repaired: it takes work again
    s.set_node(replace(s.state.nodes["n1"], healthy=True, unhealthy_gpus=frozenset()))
    submit(s, wl("after", "a", 1, t=30.0, on="n1"))
    result = s.step(30.0)
    assert any("n1" in nodes_of(p) for p in admitted(result).values())


def test_unhealthy_node_under_a_nomination_is_not_used():
    # x reclaims a GPU of n2; n2 breaks during the grace period
    s = sched([node("n1", 4), node("n2", 4)], [team("o", 4), team("b", 4)])
    start(s, *[wl(f"b{i}", "b", 1, t=float(i)) for i in range(8)], now=8.0)
    submit(s, wl("x", "o", 1, t=100.0))
    result = s.step(100.0 + DELAY)
    [p] = result.of_type(ev.PREEMPTED)
    [nom] = result.of_type(ev.NOMINATED)
    broken = nom.placement[0][0]
    s.set_node(replace(s.state.nodes[broken], healthy=False))
    for t in (101.0 + DELAY, 102.0 + DELAY, 103.0 + DELAY, 104.0 + DELAY):
        result = s.step(t)
        for wid, placement in admitted(result).items():
            assert broken not in nodes_of(placement), f"{wid} admitted on unhealthy {broken}"


@pytest.mark.parametrize("finish_first", [False, True], ids=["running", "finished"])
def test_drained_node_takes_no_new_work_and_running_work_runs_on(finish_first):
    s = sched([node("n1", 4), node("n2", 4)], [team("a", 8)])
    start(s, wl("j", "a", 2, on="n1"))
    s.set_node(replace(s.state.nodes["n1"], drained=True))
    if finish_first:
        s.finished("j", 5.0)
    submit(s, *[wl(f"f{i}", "a", 2, t=10.0) for i in range(3)])
    result = s.step(10.0)
    assert not result.of_type(ev.EVICTED) and not result.of_type(ev.PREEMPTED)
    assert ("j" in s.state.running) is not finish_first
    placed = admitted(result)
    assert sorted(placed) == ["f0", "f1"]
    assert all(nodes_of(p) == ["n2"] for p in placed.values())
    assert "f2" in result.waiting
    # undrained: the waiting work goes there
    s.set_node(replace(s.state.nodes["n1"], drained=False))
    assert nodes_of(admitted(s.step(11.0))["f2"]) == ["n1"]


def test_work_on_a_drained_node_is_not_preempted_for_nothing():
    # b borrows all of n1 (drained) and n2; o reclaims: only victims on n2
    # free GPUs o may use.
    s = sched([node("n1", 2), node("n2", 2)], [team("o", 2), team("b", 2)])
    start(s, *[wl(f"b{i}", "b", 1, t=float(i)) for i in range(4)], now=4.0)
    on_n1 = {wid for wid, r in s.state.running.items() if nodes_of(r.placement) == ["n1"]}
    s.set_node(replace(s.state.nodes["n1"], drained=True))
    submit(s, wl("x", "o", 2, t=100.0))
    victims = set()
    for e in settle(s, 100.0 + DELAY):
        if e.type == ev.PREEMPTED:
            victims.add(e.workload_id)
    assert victims and not victims & on_n1
    assert nodes_of(s.state.running["x"].placement) == ["n2"]


# ---- messages --------------------------------------------------------------

@pytest.mark.parametrize(
    "workload, words",
    [
        pytest.param(wl("w", "vision", 1, pool="h100"),
                     ["unknown pool 'h100'", "known pools: a100, t4"], id="unknown-pool"),
        pytest.param(wl("w", "vision", 16),
                     ["asks for 16 GPUs on one node", "every a100 node", "has at most 8"],
                     id="too-many-gpus-per-node"),
        pytest.param(wl("w", "vision", 4, num_nodes=3),
                     ["asks for 3 nodes with 4 GPUs each but only 2"], id="too-many-nodes"),
        pytest.param(wl("w", "vision", 8, num_nodes=2),
                     ["needs 16 a100 GPUs but team vision may hold at most 10",
                      "nominal 8 + borrowing limit 2"], id="above-nominal-plus-borrowing"),
        pytest.param(wl("w", "vision", 1, priority="urgent"),
                     ["unknown priority class 'urgent'", "best-effort", "production"],
                     id="unknown-priority"),
        pytest.param(wl("w", "vision", 1, pool="t4"),
                     ["team vision may not use pool t4", "allowed: a100"], id="pool-not-allowed"),
        pytest.param(wl("w", "vision", 1, node_selector={"region": "us"}),
                     ["no a100 node labelled region=us exists"], id="no-node-matches-labels"),
        pytest.param(wl("w", "eu-team", 1, node_selector={"region": "us"}),
                     ["asks for nodes labelled region=us", "team eu-team is restricted to region=eu"],
                     id="workload-labels-contradict-team"),
        pytest.param(wl("w", "eu-team", 1, node_selector={"disk": "ssd"}),
                     ["no a100 node labelled disk=ssd,region=eu exists"],
                     id="no-node-matches-team-and-workload-labels"),
    ],
)
def test_rejected_with_readable_reason(workload, words):
    nodes = [node("n1", 8, labels={"region": "eu"}), node("n2", 8), node("t1", 2, pool="t4")]
    teams = [Team("vision", {"a100": Quota(8, 2)}, allowed_pools=frozenset({"a100"})),
             Team("eu-team", {"a100": Quota(8)}, node_selector={"region": "eu"})]
    s = sched(nodes, teams)
    e = s.submit(workload, 0.0)
    assert e.type == ev.REJECTED
    for w in words:
        assert w in e.message
    assert "w" not in s.state.pending


@pytest.mark.parametrize(
    "vision, nlp_holds, ask, reason",
    [
        pytest.param(Quota(8), 8, 1, "team vision is at 8/8 a100 GPUs and nothing can be borrowed",
                     id="nothing-to-borrow"),
        pytest.param(Quota(8), 6, 4, "team vision is at 8/8 a100 GPUs and only 2 can be borrowed; "
                     "this workload needs 4 more", id="some-to-borrow"),
        pytest.param(Quota(8, 0), 0, 1, "team vision holds 8 a100 GPUs and may hold at most 8 "
                     "(nominal 8 + borrowing limit 0); this workload needs 1", id="at-ceiling"),
    ],
)
def test_waiting_reason_names_team_and_quota(vision, nlp_holds, ask, reason):
    s = sched([node("n1", 8), node("n2", 8)],
              [Team("vision", {"a100": vision}), team("nlp", 8)])
    runs = [wl(f"v{i}", "vision", 1) for i in range(8)]
    runs += [wl(f"n{i}", "nlp", 1) for i in range(nlp_holds)]
    start(s, *runs)
    submit(s, wl("w", "vision", ask, t=5.0))
    result = s.step(5.0)
    assert result.waiting["w"] == reason


def test_waiting_reason_names_capacity_without_quotas():
    s = sched([node("n1", 4), node("n2", 4)], [team("vision")], "backfill")
    start(s, wl("a", "vision", 3, on="n1"), wl("b", "vision", 3, on="n2"))
    submit(s, wl("w", "vision", 2, t=5.0))
    assert s.step(5.0).waiting["w"] == "waiting for 2 × a100 GPUs (2 free in the pool, none placeable)"


@pytest.mark.parametrize(
    "policy, small_runs",
    [
        pytest.param("fifo", False, id="fifo"),
        pytest.param("backfill", True, id="backfill"),
        pytest.param("quota-fifo", True, id="quota-fifo"),
        pytest.param("gpuhub", True, id="gpuhub"),
    ],
)
def test_fifo_policy_blocks_behind_head(policy, small_runs):
    s = sched([node("n1", 4)], [team("a"), team("b")], policy)
    start(s, wl("r", "a", 3))
    submit(s, wl("head", "a", 4, t=1.0), wl("small", "b", 1, t=2.0))
    result = s.step(5.0)
    assert "head" not in admitted(result)
    if small_runs:
        assert "small" in admitted(result)
    else:
        assert "small" not in admitted(result)
        assert result.waiting["small"] == "behind head (strict FIFO: nothing passes a blocked workload)"


@pytest.mark.parametrize("policy", ["backfill", "gpuhub"])
def test_cycle_without_explanations_decides_the_same(policy):
    """``cycle(explain=False)`` only leaves out the waiting reasons: same
    admissions, same reservations. Here h holds a reservation from the last
    cycle while its pool has fewer free GPUs than it needs."""
    s = sched([node("n0", 4)], [team("a", 8)], policy)
    start(s, wl("r", "a", 1, time_limit=100.0), wl("u", "a", 2))
    submit(s, wl("h", "a", 2, t=1.0))
    assert [r.workload_id for r in s.step(1.0).reservations] == ["h"]
    submit(s, wl("s", "a", 1, t=2.0))
    slow, fast = s.cycle(2.0), s.cycle(2.0, explain=False)
    assert [(r.workload_id, r.start) for r in slow.reservations] == [("h", 100.0)]
    assert "s" not in admitted(slow)  # it would take the GPU h waits for
    assert fast.events == slow.events, "explain=False admits work that delays h's reservation"
    assert fast.reservations == slow.reservations


@pytest.mark.parametrize(
    "before, after, admit, words",
    [
        pytest.param(Quota(2, 0), Quota(4, 0), True, "", id="nominal-raised"),
        pytest.param(Quota(2, 0), Quota(2, 1), True, "", id="borrowing-allowed"),
        pytest.param(Quota(4), Quota(2, 0), False, "may hold at most 2", id="nominal-lowered"),
    ],
)
def test_quota_changes_take_effect_next_cycle(before, after, admit, words):
    s = sched([node("n1", 4)], [Team("vision", {"a100": before})])
    start(s, wl("v0", "vision", 1), wl("v1", "vision", 1))
    submit(s, wl("w", "vision", 1, t=5.0))
    if before.nominal == 2:
        assert "may hold at most 2" in s.step(5.0).waiting["w"]
    s.set_team(Team("vision", {"a100": after}))
    first = s.cycle(6.0)
    assert s.cycle(6.0).events == first.events  # cycle() is pure
    result = s.step(6.0)
    if admit:
        assert "w" in admitted(result)
    else:
        assert "w" not in admitted(result) and words in result.waiting["w"]
        assert {"v0", "v1"} <= set(s.state.running)  # lowering a quota evicts nobody


def test_quota_changes_take_effect_next_cycle_lending_limit():
    s = sched([node("n1", 4)], [team("vision"), team("nlp", 4)])
    start(s, wl("v0", "vision", 1), wl("v1", "vision", 1))
    submit(s, wl("w", "vision", 1, t=5.0))
    s.set_team(team("nlp", 4, lending=2))
    result = s.step(6.0)
    assert result.waiting["w"] == "team vision is at 2/0 a100 GPUs and nothing can be borrowed"
    s.set_team(team("nlp", 4, lending=3))
    assert "w" in admitted(s.step(7.0))


@pytest.mark.parametrize("pool", ["", "a100", "cpu-only"])
@pytest.mark.parametrize("time_limit", [None, 60.0])
def test_zero_gpu_workload_runs_without_gpus(pool, time_limit):
    s = sched([node("n1", 1)], [team("a", 1)])
    e = s.submit(wl("cpu", "a", 0, pool=pool, kind=NOTEBOOK, time_limit=time_limit), 0.0)
    assert e.type == ev.QUEUED
    result = s.step(1.0)
    assert admitted(result) == {"cpu": ()}
    assert s.finished("cpu", 2.0).type == ev.FINISHED


# ---- units: QuotaLedger ----------------------------------------------------

A, B = "a", "b"


@pytest.mark.parametrize(
    "capacity, quotas, used, team_name, ask, reason, headroom",
    [
        pytest.param(8, {A: Quota(4), B: Quota(4)}, {}, A, 8, None, 8, id="all-idle"),
        pytest.param(8, {A: Quota(4), B: Quota(4, 2)}, {}, B, 7,
                     "team b holds 0 a100 GPUs and may hold at most 6", 6, id="borrowing-limit"),
        pytest.param(8, {A: Quota(4), B: Quota(4)}, {B: 4}, A, 5,
                     "team a is at 0/4 a100 GPUs and nothing can be borrowed", 4, id="other-at-nominal"),
        pytest.param(8, {A: Quota(4, None, 1), B: Quota(4)}, {}, B, 6,
                     "team b is at 0/4 a100 GPUs and only 1 can be borrowed; this workload needs 2 more",
                     5, id="lending-limit"),
        pytest.param(10, {A: Quota(4), B: Quota(4)}, {A: 4, B: 4}, A, 3,
                     "only 2 can be borrowed", 2, id="unowned-capacity"),
        pytest.param(8, {A: Quota(4, 2), B: Quota(4)}, {A: 6}, A, 1,
                     "team a holds 6 a100 GPUs and may hold at most 6 (nominal 4 + borrowing limit 2); "
                     "this workload needs 1", 0, id="at-ceiling"),
        pytest.param(8, {}, {"x": 3}, "x", 5, None, 5, id="team-without-quota-uses-unowned"),
        # nominal is a guarantee by quota; whether the GPUs are free is placement's business
        pytest.param(8, {A: Quota(6), B: Quota(6)}, {A: 6}, B, 3, None, 6, id="overcommitted-nominals"),
        pytest.param(8, {A: Quota(2), B: Quota(4, None, 0)}, {A: 2}, A, 3,
                     "team a is at 2/2 a100 GPUs and only 2 can be borrowed", 2,
                     id="lender-lends-nothing"),
    ],
)
def test_quota_ledger_check_and_headroom(capacity, quotas, used, team_name, ask, reason, headroom):
    teams = {name: Team(name, {"a100": q}) for name, q in quotas.items()}
    ledger = QuotaLedger({"a100": capacity}, teams, {(t, "a100"): g for t, g in used.items()})
    got = ledger.check(team_name, "a100", ask)
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got
    assert ledger.headroom(team_name, "a100") == headroom
    # headroom is the largest request check() lets through
    assert ledger.check(team_name, "a100", headroom) is None
    assert ledger.check(team_name, "a100", headroom + 1) is not None


# ---- units: find_placement -------------------------------------------------

def index_with(free, topology=None, labels=None):
    """A FreeIndex of 8-GPU nodes with ``free[name]`` GPUs free (the low ones used)."""
    nodes = [Node(name, "a100", 8, topology={"rack": (topology or {}).get(name, "")},
                  labels=(labels or {}).get(name, {})) for name in free]
    index = FreeIndex(nodes)
    for name, n in free.items():
        index.take(name, range(8 - n))
    return index


@pytest.mark.parametrize(
    "free, kwargs, expected",
    [
        pytest.param({"n1": 8, "n2": 3}, dict(gpus_per_node=2), (("n2", (5, 6)),), id="best-fit"),
        pytest.param({"n1": 8, "n2": 3}, dict(gpus_per_node=4), (("n1", (0, 1, 2, 3)),), id="big-to-empty"),
        pytest.param({"n1": 8, "n2": 3}, dict(gpus_per_node=9), None, id="larger-than-a-node"),
        pytest.param({"n1": 2, "n2": 2}, dict(gpus_per_node=3), None, id="fragmented"),
        pytest.param({"n1": 8, "n2": 3, "n3": 4}, dict(gpus_per_node=3, num_nodes=2),
                     (("n2", (5, 6, 7)), ("n3", (4, 5, 6))), id="gang-fullest-nodes"),
        pytest.param({"n1": 8, "n2": 3, "n3": 4}, dict(gpus_per_node=4, num_nodes=3), None,
                     id="gang-not-whole"),
        pytest.param({"n1": 8, "n2": 3}, dict(gpus_per_node=2, limits={"n2": 1}),
                     (("n1", (0, 1)),), id="reservation-limit"),
        pytest.param({"n1": 8, "n2": 3}, dict(gpus_per_node=2, selector={"region": "eu"}),
                     (("n1", (0, 1)),), id="selector"),
        pytest.param({"n1": 4, "n2": 4, "n3": 4}, dict(gpus_per_node=4, num_nodes=2, topology="required"),
                     (("n2", (4, 5, 6, 7)), ("n3", (4, 5, 6, 7))), id="required-one-rack"),
        pytest.param({"n1": 4, "n2": 4, "n3": 0}, dict(gpus_per_node=4, num_nodes=2, topology="required"),
                     None, id="required-no-rack-fits"),
        pytest.param({"n1": 4, "n2": 4, "n3": 0}, dict(gpus_per_node=4, num_nodes=2, topology="preferred"),
                     (("n1", (4, 5, 6, 7)), ("n2", (4, 5, 6, 7))), id="preferred-spans"),
    ],
)
def test_find_placement_table(free, kwargs, expected):
    index = index_with(free, topology={"n1": "r1", "n2": "r2", "n3": "r2"},
                       labels={"n1": {"region": "eu"}, "n2": {"region": "us"}, "n3": {}})
    assert find_placement(index, "a100", **kwargs) == expected


@pytest.mark.parametrize("share", [0.0, 0.75])
def test_a_dropped_nomination_gives_its_quota_back_in_the_same_cycle(share):
    """A preemptor's GPU goes unhealthy while its victim exits: its
    nomination is dropped, and the quota it held is usable at once by its
    team's next workload, not one cycle later (found by the share property
    test: shares waited 'nothing can be borrowed' beside free slots)."""
    nodes = [Node(f"n{i}", "p", 1, share_units=4) for i in range(3)]
    s = Scheduler(nodes, [Team("t", {"p": Quota(0, None, None)})],
                  POLICIES["gpuhub"].with_(preemption_delay=0.0))
    for name in "abc":
        s.submit(Workload(name, "t", "p", 1, 0.0, priority="best-effort"), 0.0)
    s.apply_result(s.cycle(0.0), 0.0)
    s.submit(Workload("preemptor", "t", "p", 1, 1.0, priority="batch", gpu_share=share), 1.0)
    s.apply_result(s.cycle(1.0), 1.0)
    [nom] = s.state.nominations.values()
    [victim] = nom.victims
    node = nom.placement[0][0]
    done = next(w for w in "abc" if w != victim)
    s.finished(done, 2.0, requeue=False)        # its GPU is free now
    s.set_node(replace(s.state.nodes[node], healthy=False))
    # "next" outranks the preemptor, which waits again once its nomination
    # is dropped (it would otherwise take the GPU itself, first in the order).
    s.submit(Workload("next", "t", "p", 1, 3.0, priority="production"), 3.0)
    result = s.cycle(3.0)
    assert ev.NOMINATION_DROPPED in [e.type for e in result.events]
    assert [e.workload_id for e in result.of_type(ev.ADMITTED)] == ["next"]


def test_a_dropped_nomination_gives_its_free_gpus_back_in_the_same_cycle():
    """A 2-GPU preemptor has n0/0 set aside (free) and waits for its victim
    on n0/1; n0/1 breaks, so its nomination is dropped: n0/0 is free for the
    next workload in that same cycle, not one cycle later (found by the
    property tests: work waited beside a free GPU)."""
    s = Scheduler([Node("n0", "p", 2)], [Team("t", {"p": Quota(8)})],
                  POLICIES["gpuhub"].with_(preemption_delay=0.0))
    for name in "ab":
        s.submit(Workload(name, "t", "p", 1, 0.0, priority="best-effort"), 0.0)
    s.apply_result(s.cycle(0.0), 0.0)
    s.finished("a", 1.0, requeue=False)
    s.submit(Workload("preemptor", "t", "p", 2, 2.0, priority="batch"), 2.0)
    s.apply_result(s.cycle(2.0), 2.0)
    [nom] = s.state.nominations.values()
    assert nom.victims == {"b"}
    held = dict(s.state.running["b"].placement)["n0"]
    s.set_node(replace(s.state.nodes["n0"], unhealthy_gpus=frozenset(held)))
    s.submit(Workload("next", "t", "p", 1, 3.0, priority="best-effort"), 3.0)
    result = s.cycle(3.0)
    assert ev.NOMINATION_DROPPED in [e.type for e in result.events]
    [admitted] = result.of_type(ev.ADMITTED)
    assert admitted.workload_id == "next" and set(dict(admitted.placement)["n0"]) != set(held)
    s.apply_result(result, 3.0)  # the drop is applied before "next" starts on its GPU


@pytest.mark.parametrize("lost", ["unhealthy", "drained"])
def test_a_workload_whose_nomination_is_dropped_starts_on_free_gpus_in_the_same_cycle(lost):
    """A notebook reclaims n1 from a borrower; while the borrower leaves,
    n1 breaks (or is drained) and n2's borrower ends. The notebook's
    nomination is dropped and it starts on n2 in that same cycle, not one
    cycle later (found by the property tests: it was skipped as still
    nominated, and waited beside 4 free GPUs with no reason given)."""
    s = sched([node("n1", 4), node("n2", 4)], [team("b"), team("o", 4)])
    start(s, wl("b1", "b", 4, on="n1"), wl("b2", "b", 4, on="n2"))
    submit(s, wl("nb", "o", 4, t=10.0, kind=NOTEBOOK))
    result = s.step(10.0)
    [nom] = result.of_type(ev.NOMINATED)
    assert nom.workload_id == "nb"
    taken = nodes_of(nom.placement)[0]
    other = "n2" if taken == "n1" else "n1"
    change = {"healthy": False} if lost == "unhealthy" else {"drained": True}
    s.set_node(replace(s.state.nodes[taken], **change))
    s.finished("b2" if other == "n2" else "b1", 20.0, requeue=False)
    result = s.step(20.0)
    assert [e.workload_id for e in result.of_type(ev.NOMINATION_DROPPED)] == ["nb"]
    assert nodes_of(admitted(result).get("nb", ())) == [other], result.waiting.get("nb")
    assert "nb" in s.state.running and not s.state.nominations


@pytest.mark.parametrize("past_block, reserved", [(True, {"one", "node"}), (False, {"one"})])
def test_aged_work_reserves_past_a_teammates_refusal_for_a_full_pool(past_block, reserved):
    """big (nominal 2) runs its 2 GPUs and other (nominal 6) the other 6: the
    pool is full. big's aged 1-GPU job is refused first ("nothing can be
    borrowed") and takes the reservation; big's aged whole-node job behind it
    is refused for the same full pool. With ``reserve_past_team_block`` it
    takes an aged reservation too; without, it is skipped for the cycle (so
    a big team's whole-node work reserved in 3-4% of its cycles, issue 19)."""
    policy = replace(GPUHUB, reserve_past_team_block=past_block)
    s = sched([node("n0", 4), node("n1", 4)], [team("big", 2), team("other", 6)], policy)
    h = 3600.0
    start(s, wl("b", "big", 2, time_limit=20 * h, on="n0"),
          wl("o1", "other", 2, time_limit=30 * h, on="n0"),
          wl("o2", "other", 4, time_limit=40 * h, on="n1"), now=0.0)
    submit(s, wl("one", "big", 1, t=100.0, time_limit=h), wl("node", "big", 4, t=200.0,
                                                             time_limit=h))
    result = s.step(13 * h)
    assert {r.workload_id for r in result.reservations} == reserved
    assert admitted(result) == {}
    if past_block:
        assert "reserved to start" in result.waiting["node"]
    else:
        assert "borrowed" in result.waiting["node"]


@pytest.mark.parametrize("cpus, memory", [(0.0, 0), (4.0, 8 << 30)])
def test_a_cycle_without_reasons_stops_looking_at_a_team_whose_queue_cannot_fit(cpus, memory):
    """Two nodes with 2 GPUs free each: 4 GPUs free in the pool, yet no
    4-GPU job fits on one node. The first of 200 such queued jobs fails to
    place; the rest of the team's queue has the same shape (CPUs and memory
    included), so a cycle that does not explain (the service's) passes over
    it unseen, with the same decisions (none) as one that explains each."""
    from gpuspawner.scheduler.cycle.admission import _Cycle
    s = sched([node("n1", gpus=8), node("n2", gpus=8)], [team("t", nominal=100)])
    submit(s, wl("h1", "t", gpus=6, on="n1", time_limit=3600),
           wl("h2", "t", gpus=6, on="n2", time_limit=3600))
    assert set(admitted(s.step(1.0))) == {"h1", "h2"}
    submit(s, *(wl(f"j{i}", "t", gpus=4, t=2.0 + i, time_limit=600, cpus=cpus, memory=memory)
                for i in range(200)))
    considered = {}
    for explain in (True, False):
        cycle = _Cycle(s.state, s.policy, 300.0, explain=explain)
        seen, consider = [], cycle.consider
        cycle.consider = lambda w, seen=seen, consider=consider: (seen.append(w.id), consider(w))
        result = cycle.run()
        assert not admitted(result)
        considered[explain] = len(seen)
    assert considered[True] == 200
    assert considered[False] <= 2, considered


# ---- data residency: a dataset's node labels ---------------------------------

def residency_cluster(team_rule=None):
    nodes = [node("eu1", 2, labels={"region": "eu", "zone": "a"}),
             node("eu2", 2, labels={"region": "eu", "zone": "b"}),
             node("us1", 4, labels={"region": "us", "zone": "a"})]
    return sched(nodes, [team("vision", 16, node_selector=team_rule or {})])


@pytest.mark.parametrize(
    "team_rule, own, datasets, allowed, rejected",
    [
        pytest.param(None, {}, {"imagenet": {"region": "eu"}}, {"eu1", "eu2"}, "",
                     id="dataset-rule"),
        pytest.param({"zone": "a"}, {}, {"imagenet": {"region": "eu"}}, {"eu1"}, "",
                     id="dataset-and-team-rule"),
        pytest.param(None, {"zone": "b"}, {"imagenet": {"region": "eu"}}, {"eu2"}, "",
                     id="dataset-and-own-selector"),
        pytest.param(None, {}, {"imagenet": {"region": "eu"}, "coco": {"zone": "b"}}, {"eu2"},
                     "", id="two-datasets"),
        pytest.param(None, {}, {"imagenet": {}}, {"eu1", "eu2", "us1"}, "", id="no-labels"),
        pytest.param({"region": "us"}, {}, {"imagenet": {"region": "eu"}}, set(),
                     "dataset imagenet may only be read on nodes labelled region=eu but team "
                     "vision is restricted to region=us", id="team-contradicts-dataset"),
        pytest.param(None, {"region": "us"}, {"imagenet": {"region": "eu"}}, set(),
                     "asks for nodes labelled region=us but dataset imagenet may only be read on "
                     "nodes labelled region=eu: no node can serve both", id="own-contradicts"),
        pytest.param(None, {}, {"coco": {"region": "us"}, "imagenet": {"region": "eu"}}, set(),
                     "dataset coco may only be read on nodes labelled region=us but dataset "
                     "imagenet may only be read on nodes labelled region=eu", id="datasets-contradict"),
        pytest.param(None, {}, {"imagenet": {"region": "mars"}}, set(),
                     "dataset imagenet may only be read on nodes labelled region=mars: no a100 "
                     "node labelled region=mars exists", id="no-such-node"),
        pytest.param(None, {}, {"imagenet": {"region": "eu"}}, set(),
                     "dataset imagenet may only be read on nodes labelled region=eu: asks for 3 "
                     "GPUs on one node but every a100 node labelled region=eu has at most 2",
                     id="too-big-for-the-allowed-nodes"),
    ],
)
def test_a_datasets_node_labels_restrict_placement_with_the_teams(team_rule, own, datasets,
                                                                   allowed, rejected):
    s = residency_cluster(team_rule)
    gpus = 3 if "at most 2" in rejected else 1
    e = s.submit(wl("w", "vision", gpus, node_selector=own, dataset_nodes=datasets), 0.0)
    placed = set(nodes_of(admitted(s.step(1.0)).get("w", ())))
    if rejected:
        assert e.type == ev.REJECTED and rejected in e.message and not placed
    else:
        assert e.type == ev.QUEUED and placed and placed <= allowed, (e.message, placed)


@pytest.mark.parametrize(
    "busy, ask, reason",
    [
        pytest.param(["eu1", "eu2"], dict(gpus=1),
                     "dataset imagenet may only be read on nodes labelled region=eu; no such "
                     "node has 1 GPU free (4 a100 GPU(s) free in the pool)", id="one-gpu"),
        pytest.param(["eu1"], dict(gpus=2, num_nodes=2),
                     "dataset imagenet may only be read on nodes labelled region=eu; fewer than "
                     "2 such nodes have 2 GPUs free (6 a100 GPU(s) free in the pool)", id="gang"),
        pytest.param(["eu1", "eu2", "us1"], dict(gpus=1),
                     "waiting for 1 × a100 GPUs (0 free in the pool, none placeable on nodes "
                     "labelled region=eu)", id="full-everywhere: not the dataset's doing"),
    ],
)
def test_a_workload_held_back_only_by_its_datasets_residency_says_so(busy, ask, reason):
    s = residency_cluster()
    start(s, *[wl(f"fill-{n}", "vision", s.state.nodes[n].gpus, on=n) for n in busy])
    gang = ask.get("num_nodes", 1)
    submit(s, Workload("w", "vision", "a100", ask["gpus"], 5.0, num_nodes=gang,
                       time_limit=None, dataset_nodes={"imagenet": {"region": "eu"}}))
    result = s.step(5.0)
    assert "w" not in admitted(result)
    assert result.waiting["w"] == reason
