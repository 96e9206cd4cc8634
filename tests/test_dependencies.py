"""Dependencies between workloads: which end state meets which condition
(pure, table-driven), and the engine's waiting state on a real database:
a waiting job holds nothing, is queued when its dependency is met, is
cancelled with the reason when it can no longer be, and a restart loses
none of it."""
from __future__ import annotations

import pytest

from gpuspawner.backends.base import EXITED, AttemptExit
from gpuspawner.scheduler.workflow.dependencies import (MET, NEVER, WAIT, find_cycle, resolve,
                                             sweep_outcome, verdict)
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError, parse_after, parse_job

from test_engine_steps import ALICE, make_engine, row_of

BOB = Identity("bob", teams=frozenset({"b"}), can_submit=True)


@pytest.mark.parametrize("condition,state,expected", [
    ("ok", "succeeded", MET), ("ok", "failed", NEVER), ("ok", "cancelled", NEVER),
    ("ok", "stopped", NEVER), ("ok", None, WAIT), ("ok", "running", WAIT),
    ("ok", "waiting", WAIT),
    ("failed", "failed", MET), ("failed", "cancelled", MET), ("failed", "succeeded", NEVER),
    ("failed", "queued", WAIT),
    ("any", "succeeded", MET), ("any", "failed", MET), ("any", "cancelled", MET),
    ("any", "stopping", WAIT), ("any", "held", WAIT),
])
def test_which_end_state_meets_which_condition(condition, state, expected):
    assert verdict(condition, state) == expected


@pytest.mark.parametrize("after,states,expected", [
    ([], {}, (MET, "")),
    ([("w1", "ok")], {"w1": "succeeded"}, (MET, "")),
    ([("w1", "ok")], {"w1": None}, (WAIT, "waiting for w1 (ok)")),
    ([("w1", "ok"), ("s2", "any")], {"w1": "succeeded", "s2": None},
     (WAIT, "waiting for s2 (any)")),
    ([("w1", "ok"), ("w2", "ok")], {"w1": None, "w2": "failed"},
     (NEVER, "dependency w2 failed")),
    ([("w1", "failed")], {"w1": "succeeded"}, (NEVER, "dependency w1 succeeded, not failed")),
])
def test_the_verdict_over_all_dependencies_names_what_it_waits_for(after, states, expected):
    assert resolve([{"id": i, "condition": c} for i, c in after], states) == expected


@pytest.mark.parametrize("counts,cancel_requested,expected", [
    ({"succeeded": 3}, False, "succeeded"),
    ({"succeeded": 2, "running": 1}, False, None),
    ({"succeeded": 2, "waiting": 1}, True, None),
    ({"succeeded": 2, "failed": 1}, False, "failed"),
    ({"succeeded": 2, "cancelled": 1}, True, "cancelled"),
    ({"succeeded": 3, "failed": 0}, False, "succeeded"),
])
def test_a_sweep_ends_when_all_its_tasks_did(counts, cancel_requested, expected):
    assert sweep_outcome(counts, cancel_requested) == expected


@pytest.mark.parametrize("edges,cycle", [
    ({"a": ["b"], "b": ["c"]}, None),
    ({"a": ["a"]}, ["a", "a"]),
    ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
    ({"a": ["b", "x"], "b": ["c"], "c": ["a"], "x": ["c"]}, "a->?->c->a"),
    ({"a": ["b"], "b": ["c"], "c": ["b"]}, None),  # a cycle, but not through the new one
])
def test_a_cycle_through_the_new_workload_is_found(edges, cycle):
    found = find_cycle("a", edges)
    if isinstance(cycle, str):
        assert found[0] == "a" and found[-2:] == ["c", "a"]
        assert all(y in edges[x] for x, y in zip(found, found[1:]))
    else:
        assert found == cycle


@pytest.mark.parametrize("value,field", [
    ("w0123456789ab", "after"),
    ([{"id": "w1"}], "after[0].id"),
    ([{"id": "w0123456789ab", "condition": "afterok"}], "after[0].condition"),
    ([{"id": "w0123456789ab", "when": "ok"}], "after[0]"),
    ([{"id": f"w{i:012x}"} for i in range(65)], "after"),
])
def test_bad_after_is_refused_naming_the_field(value, field):
    with pytest.raises(SpecError) as e:
        parse_after(value)
    assert e.value.field == field


def test_after_defaults_to_ok_and_drops_duplicates():
    assert parse_after([{"id": "w0123456789ab"}, {"id": "w0123456789ab", "condition": "ok"},
                        {"id": "s0123456789ab", "condition": "any"}]) == [
        {"id": "w0123456789ab", "condition": "ok"}, {"id": "s0123456789ab", "condition": "any"}]


# ---- the engine ---------------------------------------------------------------------
def job(gpus=1, after=()):
    return parse_job({"command": ["true"], "gpus": gpus, "pool": "default",
                      "after": [{"id": i, "condition": c} for i, c in after]})


def finish(engine, wid, code=0):
    row = row_of(engine, wid)
    engine.backend.exits.append(AttemptExit(wid, row.attempt, EXITED, code, engine.clock()))


def test_a_waiting_job_holds_no_quota_and_no_reservation(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=4)
    first = engine.submit(ALICE, job(gpus=2))
    engine.tick()
    big = engine.submit(ALICE, job(gpus=4, after=[(first.id, "ok")]))
    small = engine.submit(ALICE, job(gpus=2))
    engine.tick()
    assert row_of(engine, big.id).state == "waiting"
    assert row_of(engine, big.id).reason == f"waiting for {first.id} (ok)"
    assert big.id not in engine.scheduler.state.pending
    # Had the 4-GPU job been queued, its reservation would keep the 2 free GPUs
    # for it; waiting, it leaves them to the job submitted after it.
    assert row_of(engine, small.id).state == "running"


@pytest.mark.parametrize("condition,code,state,reason", [
    ("ok", 0, "running", ""),
    ("ok", 1, "cancelled", "dependency {dep} failed"),
    ("failed", 1, "running", ""),
    ("failed", 0, "cancelled", "dependency {dep} succeeded, not failed"),
    ("any", 1, "running", ""),
])
def test_a_dependent_is_queued_when_met_and_cancelled_when_never(db_url, tmp_path, condition,
                                                                   code, state, reason):
    engine = make_engine(db_url, tmp_path, gpus=2)
    dep = engine.submit(ALICE, job())
    engine.tick()
    after = engine.submit(ALICE, job(after=[(dep.id, condition)]))
    engine.tick()
    assert row_of(engine, after.id).state == "waiting"
    finish(engine, dep.id, code)
    engine.tick()
    row = row_of(engine, after.id)
    assert row.state == state
    if reason:
        assert row.reason == reason.format(dep=dep.id)


def test_a_cancellation_cascades_down_a_chain(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    a = engine.submit(ALICE, job())
    b = engine.submit(ALICE, job(after=[(a.id, "ok")]))
    c = engine.submit(ALICE, job(after=[(b.id, "ok")]))
    engine.cancel(ALICE, a.id)  # while queued
    engine.tick()
    assert row_of(engine, b.id).reason == f"dependency {a.id} cancelled"
    assert (row_of(engine, c.id).state, row_of(engine, c.id).reason) == (
        "cancelled", f"dependency {b.id} cancelled")


def test_a_waiting_job_can_be_cancelled(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    a = engine.submit(ALICE, job())
    b = engine.submit(ALICE, job(after=[(a.id, "ok")]))
    engine.cancel(ALICE, b.id)
    finish(engine, a.id)
    engine.tick()
    engine.tick()
    assert (row_of(engine, b.id).state, row_of(engine, b.id).reason) == (
        "cancelled", "cancelled by alice while waiting")


def test_unknown_and_unseen_targets_are_refused_naming_them(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    theirs = engine.submit(BOB, job())
    for target in ("w0123456789ab", theirs.id):
        with pytest.raises(SpecError) as e:
            engine.submit(ALICE, job(after=[(target, "ok")]))
        assert e.value.field == "after[0].id" and target in e.value.message


def test_the_wait_survives_a_restart(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    a = engine.submit(ALICE, job())
    engine.tick()
    b = engine.submit(ALICE, job(after=[(a.id, "ok")]))
    engine.tick()
    engine.on_exit(AttemptExit(a.id, row_of(engine, a.id).attempt, EXITED, 0, engine.clock()))
    # The service dies before its next cycle; the new one finds b waiting.
    engine.starter.close()
    again = make_engine(db_url, tmp_path)
    assert row_of(again, b.id).state == "waiting"
    again.tick()
    assert row_of(again, b.id).state == "running"


def test_the_rules_name_the_end_states_as_the_service_does():
    from gpuspawner.scheduler.workflow import dependencies
    from gpuspawner.vocab import states
    assert dependencies.FINAL_STATES == states.FINAL_STATES


# ---- eligibility: a released dependent is ordered and aged from its release -------------
@pytest.mark.parametrize("submitted,eligible,submit_time", [
    (100.0, None, 100.0),     # queued at submit
    (100.0, 43300.0, 43300.0),  # waited 12 h for its dependency: eligible from its release
])
def test_the_scheduler_sees_a_released_job_as_submitted_when_it_became_eligible(
        submitted, eligible, submit_time):
    from gpuspawner.service.loop.rebuild import to_workload
    from gpuspawner.store import WorkloadRow
    row = WorkloadRow(id="w0123456789ab", name="j", kind="job", team="a", user="alice",
                      project="", pool="default", gpus_per_node=1, num_nodes=1, priority="",
                      state="queued", attempt=0, preempted_by=[], spec={},
                      submitted_at=submitted, eligible_at=eligible)
    assert to_workload(row).submit_time == submit_time


@pytest.mark.parametrize("gate_ends,other_submitted,starts_first", [
    (50.0, 100.0, "dependent"),  # eligible at 50, before the other job came
    (200.0, 100.0, "other"),     # eligible at 200: the job submitted at 100 was there first
])
def test_a_released_dependent_queues_from_when_it_became_eligible(
        db_url, tmp_path, gate_ends, other_submitted, starts_first):
    now = [0.0]
    engine = make_engine(db_url, tmp_path, gpus=3)
    engine.clock = lambda: now[0]
    hold = engine.submit(ALICE, job(gpus=2))
    gate = engine.submit(ALICE, job(gpus=1))
    engine.tick()
    dependent = engine.submit(ALICE, job(gpus=2, after=[(gate.id, "ok")]))
    events = sorted([(gate_ends, "gate"), (other_submitted, "other")])
    ids = {"dependent": dependent.id}
    for t, what in events:
        now[0] = t
        if what == "gate":
            finish(engine, gate.id)
        else:
            ids["other"] = engine.submit(ALICE, job(gpus=2)).id
        engine.tick()
    released = row_of(engine, dependent.id)
    assert released.state == "queued" and released.submitted_at == 0.0
    assert released.eligible_at == gate_ends
    now[0] = 300.0
    finish(engine, hold.id)  # 3 GPUs free: room for one of the two 2-GPU jobs
    engine.tick()
    states = {name: row_of(engine, wid).state for name, wid in ids.items()}
    assert states == {name: "running" if name == starts_first else "queued" for name in ids}
