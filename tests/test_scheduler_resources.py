"""CPUs and memory in the scheduler core: every workload asks for them
beside its GPUs, and a node whose capacity is declared admits only what
fits (node_load.py). Nodes and workloads without them schedule as before.
Driven through the public ``Scheduler``, as tests/test_scheduler_rules.py."""
from __future__ import annotations

import pytest

from gpuspawner.scheduler import POLICIES, Node, Scheduler, Team, Workload
from gpuspawner.scheduler import events as ev

G = 1 << 30


def sched(*nodes):
    return Scheduler(nodes, [Team("a"), Team("b")], POLICIES["gpuhub"])


def flood(s, n, gpus=0, cpus=1.0, memory=1 * G, pool="p", t=0.0):
    for i in range(n):
        e = s.submit(Workload(f"j{i:02d}", "ab"[i % 2], pool, gpus, t + i, cpus=cpus,
                              memory=memory), t + i)
        assert e.type == ev.QUEUED, e.message


def admitted(result):
    return {e.workload_id: e.placement for e in result.events if e.type == ev.ADMITTED}


@pytest.mark.parametrize("node, cpus, memory, runs, reason", [
    # a 2-core node: two 1-CPU jobs, the rest wait naming the CPUs
    (Node("host", "p", 0, cpus=2, memory=16 * G), 1.0, 1 * G, 2,
     "waiting for 1 CPU and 1GiB memory on a node of pool p: node host has 0 of 2 CPUs free"),
    # half a core each: four
    (Node("host", "p", 0, cpus=2, memory=16 * G), 0.5, 1 * G, 4,
     "node host has 0 of 2 CPUs free"),
    # memory binds first
    (Node("host", "p", 0, cpus=16, memory=16 * G), 1.0, 6 * G, 2,
     "node host has 4GiB of 16GiB memory free"),
    # a node that declares nothing counts nothing (traces without requests)
    (Node("host", "p", 0), 1.0, 8 * G, 30, None),
])
def test_a_cpu_only_flood_runs_only_what_fits(node, cpus, memory, runs, reason):
    s = sched(node)
    flood(s, 30, cpus=cpus, memory=memory)
    result = s.step(100.0)
    assert len(admitted(result)) == runs
    assert len(s.state.running) == runs
    if reason:
        assert len(result.waiting) == 30 - runs
        assert all(reason in why for why in result.waiting.values()), result.waiting
    # Each ran on the node (its CPUs are held there), and a second cycle admits nothing more.
    assert all(p == (("host", ()),) for p in admitted(result).values()) or reason is None
    assert not admitted(s.step(101.0))


def test_a_finished_job_gives_its_cpus_to_the_next():
    s = sched(Node("host", "p", 0, cpus=2, memory=16 * G))
    flood(s, 5)
    first = admitted(s.step(10.0))
    assert sorted(first) == ["j00", "j01"]
    s.finished("j00", 20.0)
    assert sorted(admitted(s.step(21.0))) == ["j02"]
    s.cancel("j04", 22.0)
    s.finished("j01", 23.0)
    s.finished("j02", 23.0)
    assert sorted(admitted(s.step(24.0))) == ["j03"]


def test_cpu_only_work_goes_to_the_fullest_node_that_has_room():
    s = sched(Node("n1", "p", 0, cpus=4, memory=64 * G), Node("n2", "p", 0, cpus=2, memory=64 * G),
              Node("n3", "p", 0, cpus=8, memory=64 * G, drained=True))
    flood(s, 7)
    placed = admitted(s.step(10.0))
    on = [p[0][0] for _, p in sorted(placed.items())]
    assert on == ["n2", "n2", "n1", "n1", "n1", "n1"]  # best fit; never the drained n3
    assert len(s.state.running) == 6


def test_a_gpu_job_goes_where_its_cpus_fit_too():
    # n1 has free GPUs but its CPUs are taken by CPU-only work; n2 has both.
    s = sched(Node("n1", "p", 4, cpus=2, memory=64 * G), Node("n2", "p", 4, cpus=8, memory=64 * G))
    s.submit(Workload("cpu", "a", "p", 0, 0.0, cpus=2, memory=G), 0.0)
    assert admitted(s.step(1.0)) == {"cpu": (("n1", ()),)}
    s.submit(Workload("gpu", "a", "p", 1, 2.0, cpus=4, memory=G), 2.0)
    assert [n for n, _ in admitted(s.step(3.0))["gpu"]] == ["n2"]


def test_a_gpu_job_whose_cpus_do_not_fit_waits_naming_them():
    s = sched(Node("n1", "p", 4, cpus=2, memory=64 * G))
    s.submit(Workload("big", "a", "p", 1, 0.0, cpus=2, memory=G), 0.0)
    s.submit(Workload("next", "a", "p", 1, 1.0, cpus=1, memory=G), 1.0)
    result = s.step(2.0)
    assert list(admitted(result)) == ["big"]
    why = result.waiting["next"]
    assert "3 free in the pool" in why and "node n1 has 0 of 2 CPUs free" in why, why


@pytest.mark.parametrize("cpus, memory, message", [
    (4, G, "asks for 4 CPUs on one node but every p node has at most 2"),
    (1, 100 * G, "asks for 100GiB memory on one node but every p node has at most 16GiB"),
])
def test_a_request_no_node_can_hold_is_rejected_at_submit(cpus, memory, message):
    s = sched(Node("host", "p", 0, cpus=2, memory=16 * G))
    e = s.submit(Workload("w", "a", "p", 0, 0.0, cpus=cpus, memory=memory), 0.0)
    assert (e.type, e.message) == (ev.REJECTED, message)


def test_a_gang_asks_on_each_node():
    s = sched(*(Node(f"n{i}", "p", 2, cpus=4, memory=64 * G) for i in range(3)))
    s.submit(Workload("cpu", "a", "p", 0, 0.0, cpus=3, memory=G), 0.0)
    s.step(1.0)
    s.submit(Workload("gang", "a", "p", 1, 2.0, num_nodes=2, cpus=2, memory=G), 2.0)
    placed = admitted(s.step(3.0))["gang"]
    busy = s.state.running["cpu"].placement[0][0]
    assert busy not in [n for n, _ in placed] and len(placed) == 2
    assert s.state.node_load.used[placed[0][0]] == (2.0, G)


# ---- team quotas for CPUs and memory (quota.py) -------------------------------------------
def ledger_holding(quota, held=()):
    from gpuspawner.scheduler.model import Quota
    from gpuspawner.scheduler.quota import QuotaLedger
    ledger = QuotaLedger({"p": 8}, {"a": Team("a", {"p": Quota(**quota)})})
    for cpus, memory, nodes in held:
        ledger.charge_workload(Workload(f"h{cpus}{memory}", "a", "p", 0, 0, cpus=cpus,
                                        memory=memory, num_nodes=nodes))
    return ledger


@pytest.mark.parametrize("quota, held, cpus, memory, nodes, reason", [
    ({"nominal": 4}, [(64.0, 512 * G, 1)], 64.0, 512 * G, 1, None),        # none set: no limit
    ({"cpus": 2}, [(1.0, G, 1)], 1.0, G, 1, None),                          # fits exactly
    ({"cpus": 2}, [(1.0, G, 1), (1.0, G, 1)], 1.0, G, 1,
     "team a holds 2 of its 2 p CPUs (quota); this workload asks for 1 CPU"),
    ({"cpus": 2}, [], 1.5, G, 2,                                             # a gang: per node
     "team a holds 0 of its 2 p CPUs (quota); this workload asks for 3 CPUs"),
    ({"cpus": 2.5}, [(2.0, G, 1)], 0.5, G, 1, None),                        # fractions add up
    ({"memory": 16 * G}, [(1.0, 8 * G, 1)], 1.0, 8 * G, 1, None),
    ({"memory": 16 * G}, [(1.0, 12 * G, 1)], 1.0, 8 * G, 1,
     "team a holds 12GiB of its 16GiB p memory (quota); this workload asks for 8GiB"),
    ({"cpus": 8, "memory": 16 * G}, [(1.0, 8 * G, 1)], 0.0, 0, 1, None),    # asks nothing
])
def test_a_teams_cpu_and_memory_quota_is_a_ceiling_on_what_its_work_asks_for(
        quota, held, cpus, memory, nodes, reason):
    ledger = ledger_holding(quota, held)
    w = Workload("new", "a", "p", 0, 0, cpus=cpus, memory=memory, num_nodes=nodes)
    assert ledger.check_resources(w) == reason


def test_what_a_finished_workload_held_goes_back_to_its_teams_quota():
    ledger = ledger_holding({"cpus": 2}, [(2.0, G, 1)])
    w = Workload("new", "a", "p", 0, 0, cpus=1.0, memory=G)
    assert ledger.check_resources(w) is not None
    ledger.charge_workload(Workload("h2.01073741824", "a", "p", 0, 0, cpus=2.0, memory=G), -1)
    assert ledger.check_resources(w) is None and ledger.resources == {}


def test_a_teams_third_one_cpu_job_waits_for_its_cpu_quota_and_names_it():
    """Team a may ask for 2 CPUs in pool p (Kueue's cpu nominalQuota): its
    first two 1-CPU jobs run, the third waits saying CPUs, team b's job runs
    beside them, and the third starts when one of the first ends."""
    from gpuspawner.scheduler.model import Quota
    s = Scheduler([Node("host", "p", 4, cpus=64, memory=512 * G)],
                  [Team("a", {"p": Quota(nominal=4, cpus=2)}), Team("b", {"p": Quota(nominal=0)})],
                  POLICIES["gpuhub"])
    for i, (team, gpus) in enumerate([("a", 0), ("a", 1), ("a", 0), ("b", 0)]):
        s.submit(Workload(f"j{i}", team, "p", gpus, float(i), cpus=1.0, memory=G), float(i))
    result = s.step(10.0)
    assert set(admitted(result)) == {"j0", "j1", "j3"}
    assert result.waiting["j2"] == ("waiting for its team's quota: team a holds 2 of its 2 p CPUs "
                                    "(quota); this workload asks for 1 CPU")
    s.finished("j0", 20.0)
    assert set(admitted(s.step(20.0))) == {"j2"}


def test_a_teams_memory_quota_holds_a_gpu_job_back_and_a_smaller_one_passes_it():
    from gpuspawner.scheduler.model import Quota
    s = Scheduler([Node("host", "p", 8)], [Team("a", {"p": Quota(nominal=8, memory=16 * G)})],
                  POLICIES["gpuhub"])
    s.submit(Workload("big", "a", "p", 1, 0.0, cpus=1.0, memory=12 * G), 0.0)
    s.submit(Workload("next", "a", "p", 1, 1.0, cpus=1.0, memory=8 * G), 1.0)
    s.submit(Workload("small", "a", "p", 1, 2.0, cpus=1.0, memory=4 * G), 2.0)
    result = s.step(5.0)
    assert set(admitted(result)) == {"big", "small"}
    assert "12GiB of its 16GiB p memory" in result.waiting["next"]


@pytest.mark.parametrize("node_cpus, first", [
    (8, "b-gpu"),   # the node counts CPUs: team a's 6 of 8 CPUs make it the dominant user
    (0, "a-gpu"),   # it does not: neither holds a GPU, the older submission goes first
])
def test_fair_share_counts_a_teams_cpus_where_the_nodes_count_them(node_cpus, first):
    s = Scheduler([Node("host", "p", 1, cpus=node_cpus)], [Team("a"), Team("b")],
                  POLICIES["gpuhub"])
    for i in range(6):
        s.submit(Workload(f"a-cpu{i}", "a", "p", 0, 0.0, cpus=1.0), 0.0)
    s.step(1.0)
    s.submit(Workload("a-gpu", "a", "p", 1, 100.0, cpus=0.5), 100.0)
    s.submit(Workload("b-gpu", "b", "p", 1, 200.0, cpus=0.5), 200.0)
    assert set(admitted(s.step(3600.0))) == {first}


def test_a_preemptors_cpus_are_booked_while_its_victims_leave():
    """Team a reclaims its GPU from team b's borrower; while the victim is in
    its grace period, b's CPU-only job may not take the CPUs a's job needs,
    so the node is never promised more CPUs than it has."""
    from gpuspawner.scheduler.model import Quota
    policy = POLICIES["gpuhub"].with_(preemption_delay=0.0, default_grace_period=30.0)
    s = Scheduler([Node("host", "p", 2, cpus=2, memory=64 * G)],
                  [Team("a", {"p": Quota(nominal=2)}), Team("b", {"p": Quota(nominal=0)})], policy)
    for i in range(2):
        s.submit(Workload(f"b{i}", "b", "p", 1, float(i), cpus=0.5, memory=G), float(i))
    assert set(admitted(s.step(10.0))) == {"b0", "b1"}
    s.submit(Workload("a-gpu", "a", "p", 1, 20.0, cpus=1.0, memory=G), 20.0)
    result = s.step(20.0)
    assert [e.workload_id for e in result.events if e.type == ev.NOMINATED] == ["a-gpu"]
    s.submit(Workload("b-cpu", "b", "p", 0, 21.0, cpus=1.0, memory=G), 21.0)
    result = s.step(21.0)
    assert "b-cpu" not in admitted(result)
    assert result.waiting["b-cpu"].endswith("node host has 0 of 2 CPUs free")
    [victim] = [wid for wid, r in s.state.running.items() if r.state.value == "terminating"]
    s.finished(victim, 50.0)
    assert set(admitted(s.step(50.0))) == {"a-gpu"}
    cpus = sum(r.workload.cpus for r in s.state.running.values())
    assert cpus <= 2, cpus


# ---- backfill reservations hold CPUs and memory (backfill.py, node_load.RoomClock) ----------

def reserved_cluster(blocked):
    """n1: 8 GPUs, 16 CPUs, 64GiB. ``r`` runs until t=1000; ``h`` waits for it
    with a reservation at t=1000: for GPUs (``blocked="gpus"``: r holds 6 of
    them; h needs 4 GPUs, 12 CPUs and 40GiB, leaving 4 CPUs and 24GiB of room
    at its start), or for CPUs alone (``"cpus"``: r is CPU-only with 12 CPUs;
    h needs 2 GPUs and 14 CPUs, so 2 CPUs are left at its start)."""
    from gpuspawner.scheduler.model import Quota
    s = Scheduler([Node("n1", "p", 8, cpus=16, memory=64 * G)],
                  [Team("a", {"p": Quota(nominal=8)}), Team("b", {"p": Quota(nominal=8)})],
                  POLICIES["gpuhub"])
    r, h = {"gpus": ((6, 2, 8 * G), (4, 12, 40 * G)),
            "cpus": ((0, 12, 8 * G), (2, 14, 8 * G))}[blocked]
    s.submit(Workload("r", "b", "p", r[0], 0.0, cpus=r[1], memory=r[2], time_limit=1000.0), 0.0)
    assert set(admitted(s.step(0.0))) == {"r"}
    s.submit(Workload("h", "a", "p", h[0], 10.0, cpus=h[1], memory=h[2], time_limit=1000.0), 10.0)
    result = s.step(10.0)
    assert [(x.workload_id, x.start) for x in result.reservations] == [("h", 1000.0)]
    return s


@pytest.mark.parametrize("blocked, gpus, cpus, memory, time_limit, runs", [
    pytest.param("gpus", 1, 2, G, 5000.0, True, id="long-job-fits-the-cpu-room"),
    pytest.param("gpus", 1, 6, G, 5000.0, False, id="long-job-would-take-reserved-cpus"),
    pytest.param("gpus", 1, 6, G, None, False, id="unbounded-would-take-reserved-cpus"),
    pytest.param("gpus", 1, 6, G, 500.0, True, id="short-job-ends-before-the-start"),
    pytest.param("gpus", 1, 1, 30 * G, 5000.0, False, id="long-job-would-take-reserved-memory"),
    pytest.param("gpus", 1, 1, 20 * G, 5000.0, True, id="long-job-fits-the-memory-room"),
    pytest.param("gpus", 0, 6, G, 5000.0, False, id="cpu-only-long-job-would-take-them"),
    pytest.param("gpus", 0, 4, G, 5000.0, True, id="cpu-only-long-job-fits-the-room"),
    pytest.param("cpus", 1, 4, G, 5000.0, False, id="cpu-blocked-head-keeps-its-cpus"),
    pytest.param("cpus", 1, 2, G, 5000.0, True, id="cpu-blocked-head-room-taken-exactly"),
    pytest.param("cpus", 1, 4, G, 960.0, True, id="cpu-blocked-short-job-backfills"),
    pytest.param("cpus", 0, 4, G, None, False, id="cpu-blocked-cpu-only-unbounded-waits"),
])
def test_a_reservation_holds_the_cpus_and_memory_of_its_start(blocked, gpus, cpus, memory,
                                                               time_limit, runs):
    s = reserved_cluster(blocked)
    s.submit(Workload("s", "b", "p", gpus, 20.0, cpus=cpus, memory=memory,
                      time_limit=time_limit), 20.0)
    result = s.step(30.0)
    assert [(x.workload_id, x.start) for x in result.reservations] == [("h", 1000.0)]
    assert ("s" in admitted(result)) == runs, result.waiting.get("s")
    if not runs and gpus == 0:
        assert "held for a reserved start" in result.waiting["s"], result.waiting["s"]
    # Whatever was backfilled, h starts at its reserved time.
    s.finished("r", 1000.0)
    if runs and time_limit is not None and time_limit < 1000.0:
        s.finished("s", 20.0 + time_limit)
    assert "h" in admitted(s.step(1000.0)), s.step(1000.0).waiting


# ---- preemption for CPUs and memory (preemption/resources.py) -------------------------------

DELAY = POLICIES["gpuhub"].preemption_delay
CAP = POLICIES["gpuhub"].max_preemptions


def victim(wid, gpus, cpus, memory, t, **kw):
    return Workload(wid, "vision", "p", gpus, t, cpus=cpus, memory=memory,
                    priority=kw.pop("priority", "batch"), **kw)


@pytest.mark.parametrize("running, ask, kind, waited, victims", [
    # n1: 4 GPUs, 8 CPUs, 64GiB. Running work is listed oldest first (evicted newest first).
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {})], (1, 4, G), "job", DELAY,
                 ["v-cpu"], id="cpu-only-victim-frees-the-cores"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {})], (1, 4, G), "job", 0.0,
                 [], id="a-fresh-job-waits-the-preemption-delay"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {})], (1, 4, G), "notebook", 0.0,
                 ["v-cpu"], id="a-notebook-preempts-at-once"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {"attempt": CAP})], (1, 4, G),
                 "job", DELAY, [], id="max-preemptions-keeps-the-victim"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {"priority": "interactive"})],
                 (1, 4, G), "job", DELAY, [], id="a-non-preemptible-class-stays"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {"kind": "deployment"})],
                 (1, 4, G), "job", DELAY, [], id="the-kinds-table-keeps-a-deployment"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-a", 0, 3, G, {}), ("v-b", 0, 3, G, {})],
                 (1, 5, G), "job", DELAY, ["v-a", "v-b"], id="two-victims-for-the-cores"),
    pytest.param([("v-gpu", 1, 1, 8 * G, {}), ("v-mem", 0, 1, 40 * G, {})], (1, 1, 30 * G),
                 "job", DELAY, ["v-mem"], id="memory-short"),
    pytest.param([("v-gpu", 1, 2, G, {}), ("v-cpu", 0, 6, G, {})], (0, 4, G), "job", DELAY,
                 ["v-cpu"], id="a-cpu-only-preemptor"),
    pytest.param([("v-gpu", 4, 2, G, {}), ("v-cpu", 0, 6, G, {})], (2, 4, G), "job", DELAY,
                 ["v-cpu", "v-gpu"], id="short-of-gpus-and-cores"),
])
def test_a_higher_priority_workload_preempts_for_cpus_and_memory(running, ask, kind, waited,
                                                                 victims):
    s = Scheduler([Node("n1", "p", 4, cpus=8, memory=64 * G)], [Team("vision")],
                  POLICIES["gpuhub"])
    for i, (wid, gpus, cpus, memory, kw) in enumerate(running):
        s.submit(victim(wid, gpus, cpus, memory, float(i), **kw), float(i))
    assert set(admitted(s.step(10.0))) == {r[0] for r in running}
    gpus, cpus, memory = ask
    s.submit(Workload("x", "vision", "p", gpus, 100.0, cpus=cpus, memory=memory,
                      priority="production", kind=kind), 100.0)
    result = s.step(100.0 + waited)
    got = sorted(e.workload_id for e in result.events if e.type == ev.PREEMPTED)
    assert got == victims, result.waiting.get("x")
    if not victims:
        assert "x" in result.waiting and "x" not in admitted(result)
        return
    assert all("preempted by higher-priority production workload x" in e.message
               for e in result.events if e.type == ev.PREEMPTED)
    for wid in victims:
        s.finished(wid, 130.0)
    assert "x" in admitted(s.step(130.0))
    used = s.state.node_load.used["n1"]
    assert used[0] <= 8 and used[1] <= 64 * G, used


# ---- whole cores where Slurm allocates them (Node.whole_cpus, node_load.counted_request) -----

@pytest.mark.parametrize("whole_cpus, asked, counted, runs", [
    # a 2-core node; four replicas asking half a core each
    pytest.param(False, 0.5, 0.5, 4, id="local-or-kubernetes-counts-half-cores"),
    pytest.param(True, 0.5, 1.0, 2, id="slurm-counts-the-whole-core-it-allocates"),
    pytest.param(True, 1.0, 1.0, 2, id="slurm-whole-core-unchanged"),
    pytest.param(True, 0.0, 0.0, 4, id="slurm-nothing-asked-nothing-counted"),
    pytest.param(True, 1.2, 2.0, 1, id="slurm-rounds-up-as-cpus-per-task"),
])
def test_a_slurm_pool_counts_cpus_as_slurm_allocates_them(whole_cpus, asked, counted, runs):
    s = sched(Node("host", "p", 4, cpus=2, memory=64 * G, whole_cpus=whole_cpus))
    for i in range(4):
        e = s.submit(Workload(f"r{i}", "a", "p", 1, float(i), cpus=asked, memory=G,
                              kind="deployment"), float(i))
        assert e.type == ev.QUEUED, e.message
    assert s.state.pending["r0"].cpus == counted
    assert len(admitted(s.step(10.0))) == runs
    assert s.state.node_load.used["host"][0] == counted * runs


@pytest.mark.parametrize("time_limit, runs", [
    pytest.param(5000.0, False, id="a-long-small-job-would-delay-the-big-one"),
    pytest.param(None, False, id="an-unbounded-small-job-would-delay-it"),
    pytest.param(900.0, True, id="a-small-job-ending-before-its-start-backfills"),
])
def test_a_big_cpu_only_job_is_not_starved_by_small_ones(time_limit, runs):
    """A 4-core host, two 2-CPU jobs running until t=1000 and t=2000: the
    4-CPU job waiting behind them gets a reservation at t=2000, and when
    the first ends a small job may take the 2 free cores only if it ends
    by then."""
    s = sched(Node("host", "p", 0, cpus=4, memory=64 * G))
    for wid, limit in (("r1", 1000.0), ("r2", 2000.0)):
        s.submit(Workload(wid, "a", "p", 0, 0.0, cpus=2, memory=G, time_limit=limit), 0.0)
    assert set(admitted(s.step(0.0))) == {"r1", "r2"}
    s.submit(Workload("big", "a", "p", 0, 10.0, cpus=4, memory=G, time_limit=3600.0), 10.0)
    result = s.step(10.0)
    assert [(x.workload_id, x.start) for x in result.reservations] == [("big", 2000.0)]
    assert result.waiting["big"].startswith(
        "waiting for 4 CPUs and 1GiB memory on a node of pool p; reserved to start within"), \
        result.waiting["big"]
    s.finished("r1", 1000.0)
    s.submit(Workload("small", "b", "p", 0, 1000.0, cpus=1, memory=G, time_limit=time_limit),
             1000.0)
    result = s.step(1000.0)
    assert ("small" in admitted(result)) == runs, result.waiting.get("small")
    if not runs:
        assert "held for a reserved start" in result.waiting["small"]
    else:
        s.finished("small", 1900.0)
    s.finished("r2", 2000.0)
    assert "big" in admitted(s.step(2000.0))


@pytest.mark.parametrize("server_pool", ["default", ""])
def test_a_job_over_its_teams_quota_preempts_its_teams_best_effort_job_when_cpus_fit(server_pool):
    """The node has room for the batch job's GPUs, CPUs and memory; its team's
    quota is what it lacks. Preempting the team's best-effort job gives the
    quota back, whether or not the team's CPU-only server counts on the node
    (once, with nothing lacking on the node, no victim was chosen at all)."""
    from gpuspawner.scheduler import NOTEBOOK, POLICIES, Node, Quota, Scheduler, Team, Workload
    from gpuspawner.scheduler import events as ev
    gib = 1 << 30
    s = Scheduler([Node("host", "default", 4, cpus=2, memory=24 * gib)],
                  [Team("a", {"default": Quota(2, 0, None)})],
                  POLICIES["gpuhub"].with_(preemption_delay=0.5))
    for w in (Workload("server", "a", server_pool, 0, 0.0, kind=NOTEBOOK,
                       priority="interactive", cpus=0.5, memory=2 * gib),
              Workload("sweep", "a", "default", 2, 1.0, priority="best-effort", cpus=1,
                       memory=8 * gib)):
        s.submit(w, w.submit_time)
    s.step(2.0)
    s.submit(Workload("batch", "a", "default", 2, 100.0, priority="batch", cpus=1,
                      memory=8 * gib), 100.0)
    result = s.step(101.0)
    assert [(e.type, e.workload_id) for e in result.events] == [
        (ev.PREEMPTED, "sweep"), (ev.NOMINATED, "batch")]
