"""Every workload asks for CPUs and memory beside its GPUs (issue 29): the
request as submitted (400 naming the field when it is wrong), the kind's
default when left out, kept in the workload's spec and shown; the service
admits CPU-only work only where a node has room, and the rest wait saying
which node lacks what. A real database and engine; a backend that runs
nothing (the cgroups are tests/test_gpu_enforcement.py's)."""
from __future__ import annotations

import sys

import pytest

from gpuspawner.backends.base import Backend
from gpuspawner.isolation.gpu_rules import Limits as Resources
from gpuspawner.scheduler.model import Node
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.vocab.specs import Limits, SpecError, parse_job, parse_server
from gpuspawner.service.workloads.views import workload as workload_view
from gpuspawner.store import Store, WorkloadRow

G = 1 << 30
ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
DEFAULTS = Limits(default_pool="default", requests={"job": Resources(8 * G, 1.0),
                                                    "notebook": Resources(4 * G, 1.0)})


class Started(Backend):
    """Starts nothing; remembers what it was asked to start."""

    def __init__(self):
        self.specs = []

    def start(self, spec):
        self.specs.append(spec)

    def stop(self, wid, attempt, grace):
        pass

    def kill(self, wid, attempt):
        pass

    def poll(self):
        return []

    def recover(self, specs):
        return []


@pytest.mark.parametrize("body, cpus, memory", [
    ({}, 1.0, 8 * G),                                   # the job kind's default
    ({"cpus": 0.5}, 0.5, 8 * G),
    ({"cpus": "2", "memory": "512M"}, 2.0, 512 << 20),
    ({"memory": "1.5GiB"}, 1.0, 3 * G // 2),
    ({"memory": 1 * G}, 1.0, 1 * G),                    # bytes
])
def test_a_job_asks_for_cpus_and_memory(body, cpus, memory):
    spec = parse_job({"command": ["true"], **body}, DEFAULTS)
    assert spec.stored()["resources"] == {"cpus": cpus, "memory": memory}


def test_a_notebook_server_gets_the_notebook_default():
    spec = parse_server({"kind": "notebook", "user": "u", "team": "a", "gpus": 1}, DEFAULTS)
    assert spec.stored()["resources"] == {"cpus": 1.0, "memory": 4 * G}


@pytest.mark.parametrize("body, field, words", [
    ({"cpus": 0}, "cpus", "0 is not a positive number of CPUs"),
    ({"cpus": -1}, "cpus", "is not a positive number"),
    ({"cpus": "lots"}, "cpus", "'lots' is not a positive number of CPUs"),
    ({"cpus": True}, "cpus", "True is not a positive number"),
    ({"cpus": 5000}, "cpus", "above the maximum of 1024"),
    ({"memory": "8"}, "memory", "'8' is 8 bytes, below the minimum of 16M (give a unit"),
    ({"memory": "16Q"}, "memory", "'16Q' is not a memory size like 512M or 16G"),
    ({"memory": [1]}, "memory", "is not a memory size"),
    ({"memory": "100T"}, "memory", "above the maximum of 64T"),
])
def test_a_wrong_request_is_refused_naming_the_field(body, field, words):
    with pytest.raises(SpecError) as e:
        parse_job({"command": ["true"], **body}, DEFAULTS)
    assert e.value.field == field and words in e.value.message, e.value.message
    assert e.value.status == 400


def make_engine(url, tmp_path, nodes):
    backend = Started()
    engine = Engine(Store(url), backend, nodes, get_policy("gpuhub"),
                    EngineConfig(data_dir=str(tmp_path)))
    engine.start()
    return engine, backend


def rows(engine):
    with engine.store.session() as s:
        return {r.id: r for r in s.query(WorkloadRow).all()}


def test_a_cpu_only_flood_on_a_two_core_node_runs_only_what_fits(db_url, tmp_path):
    # The node declares 2 CPUs and 64 GiB: 30 one-CPU jobs, two run.
    node = LocalNode(Node("host", "default", 4, cpus=2, memory=64 * G), [0, 1, 2, 3])
    engine, backend = make_engine(db_url, tmp_path, [node])
    ids = [engine.submit(ALICE, parse_job({"command": [sys.executable, "-c", "pass"],
                                           "gpus": 0}, DEFAULTS)).id for _ in range(30)]
    engine.tick()
    engine.tick()
    by_id = rows(engine)
    running = [w for w in ids if by_id[w].state == "running"]
    waiting = [by_id[w].reason for w in ids if by_id[w].state == "queued"]
    assert len(running) == 2 and len(backend.specs) == 2
    # The oldest waiting job holds the backfill reservation (CPU-only work is
    # not starved by smaller work either); the rest say why the node is full.
    asked = "waiting for 1 CPU and 8GiB memory on a node of pool default"
    assert waiting[0] == f"{asked}; reserved to start within 24.0 h (backfill keeps that start)"
    assert set(waiting[1:]) == {f"{asked}: node host has 0 of 2 CPUs free"}
    assert len(waiting) == 28
    # What the backend starts carries the request (the cgroup holds it to it),
    # and what a user sees shows it.
    assert {(s.kind, s.cpus, s.memory) for s in backend.specs} == {("job", 1.0, 8 * G)}
    view = workload_view(by_id[running[0]])
    assert (view["cpus"], view["memory"]) == (1.0, 8 * G)


def test_a_restarted_service_counts_what_runs(db_url, tmp_path):
    node = LocalNode(Node("host", "default", 0, cpus=2, memory=64 * G))
    engine, _ = make_engine(db_url, tmp_path, [node])
    for _ in range(3):
        engine.submit(ALICE, parse_job({"command": ["true"], "gpus": 0, "cpus": 1}, DEFAULTS))
    engine.tick()
    again, _ = make_engine(db_url, tmp_path, [node])
    again.tick()
    assert sorted(r.state for r in rows(again).values()) == ["queued", "running", "running"]
