"""A team's quota counts CPUs and memory beside GPUs (issue 29 item 3), as
Kueue's ClusterQueue counts cpu, memory and nvidia.com/gpu: an admin sets
ceilings through the API's body (``PUT /teams/NAME``), the team's work
beyond them waits saying so, what the team holds shows on the team, a
restart keeps counting it, and usage shows the CPU-hours and memory
GiB-hours with their cost. A real database and engine; a backend that runs
nothing."""
from __future__ import annotations

import sys

import pytest

from gpuspawner.scheduler.model import Node
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.api.cluster import parse_team
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.teams.accounting import ResourcePrices
from gpuspawner.service.teams.usage import usage_report
from gpuspawner.service.workloads import operations, queries
from gpuspawner.vocab.specs import SpecError, parse_job

from test_cpu_admission import DEFAULTS, G, make_engine, rows

ADMIN = Identity("root", admin=True, can_submit=True)
ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
CAROL = Identity("carol", teams=frozenset({"b"}), can_submit=True)


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def job(**body):
    return parse_job({"command": [sys.executable, "-c", "pass"], "gpus": 0, **body}, DEFAULTS)


def submit(engine, who, spec) -> str:
    """Submitted one second after the last: the queue's order is the submit order."""
    engine.clock.t += 1
    return engine.submit(who, spec).id


@pytest.fixture
def engine(db_url, tmp_path):
    # A big node: only the team's quota holds work back.
    node = LocalNode(Node("host", "default", 4, cpus=64, memory=512 * G), [0, 1, 2, 3])
    engine, _backend = make_engine(db_url, tmp_path, [node])
    engine.clock = Clock(1_767_225_600.0)
    yield engine
    engine.store.close()


def set_quota(engine, team, **quota):
    weight, quotas = parse_team({"quotas": {"default": {"nominal": 4, **quota}}})
    operations.set_team(engine.steering, ADMIN, team, weight, quotas)


def test_a_teams_third_one_cpu_job_waits_for_its_cpu_quota_and_says_so(engine):
    set_quota(engine, "a", cpus=2, memory="64G")
    ids = [submit(engine, ALICE, job(cpus=1, memory="4G")) for _ in range(3)]
    other = submit(engine, CAROL, job(cpus=1, memory="4G"))
    engine.tick()
    engine.tick()
    by_id = rows(engine)
    assert [by_id[w].state for w in ids] == ["running", "running", "queued"]
    assert by_id[ids[2]].reason == ("waiting for its team's quota: team a holds 2 of its 2 "
                                    "default CPUs (quota); this workload asks for 1 CPU")
    assert by_id[other].state == "running"  # team b has no CPU ceiling
    [team] = [t for t in queries.teams_view(engine.cluster, engine.store, ADMIN)
              if t["name"] == "a"]
    quota = team["quotas"]["default"]
    assert (quota["cpus"], quota["memory"], quota["used_cpus"], quota["used_memory"]) == \
        (2.0, 64 * G, 2.0, 8 * G)


def test_a_restarted_service_keeps_the_cpu_quota_and_what_holds_it(engine, db_url, tmp_path):
    set_quota(engine, "a", cpus=2)
    ids = [submit(engine, ALICE, job(cpus=1)) for _ in range(3)]
    engine.tick()
    node = LocalNode(Node("host", "default", 4, cpus=64, memory=512 * G), [0, 1, 2, 3])
    again, _ = make_engine(db_url, tmp_path, [node])
    again.tick()
    assert [rows(again)[w].state for w in ids] == ["running", "running", "queued"]
    assert "2 of its 2 default CPUs" in rows(again)[ids[2]].reason


def test_a_memory_quota_lets_smaller_work_pass(engine):
    set_quota(engine, "a", memory="16G")
    big = submit(engine, ALICE, job(memory="12G"))
    second = submit(engine, ALICE, job(memory="8G"))
    small = submit(engine, ALICE, job(memory="4G"))
    engine.tick()
    by_id = rows(engine)
    assert (by_id[big].state, by_id[second].state, by_id[small].state) == \
        ("running", "queued", "running")
    assert "12GiB of its 16GiB default memory" in by_id[second].reason


def test_usage_shows_the_cpu_hours_and_memory_of_a_teams_work_and_their_cost(engine):
    start = engine.clock.t
    engine.submit(ALICE, job(cpus=2, memory="4G"))
    engine.tick()
    engine.clock.t = start + 3600
    with engine.store.session() as s:
        report = usage_report(s, start, start + 3600, engine.clock(), "team", None,
                              resource_prices=ResourcePrices(0.05, 0.01))
    [row] = report["rows"]
    assert (row["team"], row["gpu_hours"], row["cpu_hours"], row["memory_gib_hours"],
            row["cost"]) == ("a", 0, 2.0, 4.0, 0.14)


@pytest.mark.parametrize("quota, field, words", [
    ({"cpus": -1}, "quotas.default.cpus", "is not a positive number of CPUs"),
    ({"cpus": True}, "quotas.default.cpus", "is not a positive number"),
    ({"memory": "lots"}, "quotas.default.memory", "is not a memory size like 512M or 16G"),
    ({"cores": 4}, "quotas.default.cores", "is not a known field"),
])
def test_a_wrong_cpu_or_memory_quota_is_refused_naming_the_field(quota, field, words):
    with pytest.raises(SpecError) as e:
        parse_team({"quotas": {"default": quota}})
    assert e.value.field == field and words in e.value.message, e.value.message


@pytest.mark.parametrize("quota, cpus, memory", [
    ({}, None, None),                      # left out: no limit
    ({"cpus": None, "memory": None}, None, None),
    ({"cpus": 0.5, "memory": 1 << 30}, 0.5, 1 << 30),
    ({"cpus": 0, "memory": 0}, 0.0, 0),    # nothing may be asked for
])
def test_a_cpu_or_memory_quota_left_out_is_no_limit(quota, cpus, memory):
    _weight, quotas = parse_team({"quotas": {"default": quota}})
    assert (quotas["default"].cpus, quotas["default"].memory) == (cpus, memory)
