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
