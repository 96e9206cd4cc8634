"""Data residency by node labels through the engine, without the hub: a
real database (SQLite and PostgreSQL), real job processes, one pool of two
one-GPU nodes, one labelled region=eu and one region=us. Jobs that read an
EU-only dataset run on the EU node alone: while it is busy they wait with
a reason naming the dataset and its rule, though the US node has a GPU
free, which a job without the dataset takes; a rule no node meets is
refused at submit, naming the dataset."""
from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from sqlalchemy import select

from gpuspawner.backends.local import LocalBackend
from gpuspawner.scheduler.model import Node
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.datasets.registry import Datasets
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.store import Attempt, Store
from gpuspawner.vocab.specs import SpecError, parse_job
from test_engine_restart import run_until, state

ALICE = Identity("alice", teams=frozenset({"a"}), leads=frozenset({"a"}), can_submit=True)
ADMIN = Identity("root", admin=True)


@pytest.fixture
def hub(db_url, tmp_path):
    """An engine on the two labelled nodes, its datasets wired as the service wires them."""
    nodes = [LocalNode(Node("eu-host", "gpu", 1, labels={"region": "eu"}), [0]),
             LocalNode(Node("us-host", "gpu", 1, labels={"region": "us"}), [1])]
    engine = Engine(Store(db_url), LocalBackend(), nodes,
                    replace(get_policy("gpuhub"), preemption_delay=0),
                    EngineConfig(data_dir=str(tmp_path / "data"), default_grace_period=1))
    engine.start()
    (tmp_path / "srv" / "census").mkdir(parents=True)
    datasets = Datasets(engine.records, engine.cluster, lambda: ["a"],
                        engine.launcher.workspace_path, roots=[str(tmp_path / "srv")])
    engine.submitting.dataset_check = datasets.check
    engine.submitting.dataset_nodes = datasets.node_rules
    engine.launcher.dataset_mounts = datasets.mounts
    datasets.create(ADMIN, {"name": "census", "team": "a", "path": str(tmp_path / "srv" / "census"),
                            "node_labels": {"region": "eu"}})
    yield engine


def job(seconds: float, *datasets: str):
    return parse_job({"command": [sys.executable, "-c", f"import time; time.sleep({seconds})"],
                      "gpus": 1, "pool": "gpu", **({"datasets": list(datasets)} if datasets else {})})


def node_of(engine: Engine, wid: str) -> str:
    with engine.store.session() as s:
        row = state(engine, wid)
        [(node, _gpus)] = s.get(Attempt, (wid, row.attempt)).placement
        return node


def test_an_eu_only_datasets_jobs_run_on_the_eu_node_and_wait_for_it_saying_why(hub):
    first = hub.submit(ALICE, job(60, "census")).id
    run_until(hub, lambda: state(hub, first).state == "running")
    assert node_of(hub, first) == "eu-host"
    second = hub.submit(ALICE, job(60, "census")).id
    for _ in range(5):  # the US node's GPU is free all along: never used for it
        hub.tick()
        assert state(hub, second).state == "queued"
    assert state(hub, second).reason.startswith(
        "dataset census may only be read on nodes labelled region=eu; no such node has 1 GPU "
        "free (1 gpu GPU(s) free in the pool); waiting for 1 gpu GPUs; reserved to start")
    plain = hub.submit(ALICE, job(60)).id  # a job without the dataset takes the US GPU
    run_until(hub, lambda: state(hub, plain).state == "running")
    assert node_of(hub, plain) == "us-host"
    hub.cancel(ALICE, first)
    run_until(hub, lambda: state(hub, second).state == "running", timeout=30)
    assert node_of(hub, second) == "eu-host"
    for wid in (second, plain):
        hub.cancel(ALICE, wid)
    run_until(hub, lambda: all(state(hub, w).state == "cancelled" for w in (second, plain)),
              timeout=30)


def test_a_datasets_rule_no_node_meets_is_refused_at_submit_naming_it(hub, tmp_path):
    (tmp_path / "srv" / "mars").mkdir()
    registry = hub.submitting.dataset_nodes.__self__  # the fixture's registry
    registry.create(ADMIN, {"name": "mars", "team": "a", "path": str(tmp_path / "srv" / "mars"),
                            "node_labels": {"region": "mars"}})
    with pytest.raises(SpecError) as e:
        hub.submit(ALICE, job(1, "mars"))
    assert e.value.field == "datasets" and e.value.status == 400
    assert e.value.message == ("dataset mars may only be read on nodes labelled region=mars: no "
                               "gpu node labelled region=mars exists")
    with pytest.raises(SpecError) as e:  # two datasets no one node may read together
        hub.submit(ALICE, job(1, "census", "mars"))
    assert "dataset census may only be read on nodes labelled region=eu but dataset mars" \
        in e.value.message
