"""A deployment revision that waits for a job (``after``), on a real
database with the engine and the serving controller: while it waits it has
no replicas and the deployment serves as it was; once its dependency is met
its model directory is checked and it rolls out; a failed dependency or an
invalid model directory ends it ``failed`` with the reason, nothing else
changed; a restart loses none of it."""
from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from sqlalchemy import select

from gpuspawner.scheduler.model import DEPLOYMENT
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.wiring import serving_controller
from gpuspawner.vocab.specs import SpecError
from gpuspawner.store import AuditEntry, DeploymentRow, RevisionRow, WorkloadRow

from test_dependencies import finish, job
from test_engine_steps import ALICE, make_engine


def deploy(engine, name="iris", model_dir="model", **extra):
    spec = parse_deploy({"name": name, "model_dir": model_dir, **extra}, "default")
    return serving_controller(engine).deployments.deploy(ALICE, spec)


def model(engine, path="model"):
    full = os.path.join(engine.launcher.workspace("alice"), path)
    os.makedirs(full, exist_ok=True)
    return full


def revisions(engine):
    with engine.store.session() as s:
        dep = s.scalars(select(DeploymentRow)).one()
        revs = s.scalars(select(RevisionRow).order_by(RevisionRow.number)).all()
        return dep, {r.number: (r.state, r.reason) for r in revs}


def replicas(engine):
    with engine.store.session() as s:
        return [(w.spec["revision"], w.gpus_per_node) for w in s.scalars(
            select(WorkloadRow).where(WorkloadRow.kind == DEPLOYMENT,
                                      WorkloadRow.state.in_(("queued", "running"))))]


def reconcile(engine):
    ctl = serving_controller(engine)
    asyncio.run(ctl.reconcile())
    engine.tick()


def test_a_new_deployment_waits_without_replicas_then_rolls_out(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    train = engine.submit(ALICE, job())
    engine.tick()
    # The model does not exist yet: the job makes it.
    deploy(engine, after=[{"id": train.id}])
    reconcile(engine)
    dep, revs = revisions(engine)
    assert revs == {1: ("waiting", f"waiting for {train.id} (ok)")}
    assert dep.traffic == {} and dep.message == f"revision 1 is waiting for {train.id} (ok)"
    assert replicas(engine) == []
    model(engine)
    finish(engine, train.id)
    engine.tick()
    reconcile(engine)
    dep, revs = revisions(engine)
    assert revs == {1: ("ready", "")} and dep.traffic == {"1": 100}
    assert replicas(engine) == [(1, 0)]


@pytest.mark.parametrize("code,make_model,reason", [
    (1, True, "dependency {job} failed"),
    (0, False, "model_dir: '{dir}' is not a directory"),
])
def test_a_revision_that_cannot_roll_out_fails_and_the_old_one_keeps_serving(
        db_url, tmp_path, code, make_model, reason):
    engine = make_engine(db_url, tmp_path)
    first = model(engine, "v1")
    deploy(engine, model_dir="v1")
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, model_dir="v2", min_replicas=2, max_replicas=3,
           after=[{"id": train.id, "condition": "ok"}])
    reconcile(engine)
    assert revisions(engine)[1][2][0] == "waiting"
    assert replicas(engine) == [(1, 0)]  # revision 1 serves on, as deployed
    if make_model:
        model(engine, "v2")
    finish(engine, train.id, code)
    engine.tick()
    reconcile(engine)
    dep, revs = revisions(engine)
    why = reason.format(job=train.id, dir=os.path.join(os.path.dirname(first), "v2"))
    assert revs[1] == ("ready", "") and revs[2][0] == "failed" and revs[2][1].startswith(why)
    assert dep.traffic == {"1": 100} and (dep.min_replicas, dep.max_replicas) == (1, 1)
    assert dep.message == f"revision 2 not deployed: {revs[2][1]}"
    assert replicas(engine) == [(1, 0)]


def test_a_canary_after_a_job_gets_its_share_once_released(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    model(engine, "v1")
    model(engine, "v2")
    deploy(engine, model_dir="v1")
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, model_dir="v2", canary_percent=20, after=[{"id": train.id}])
    ctl = serving_controller(engine)
    with pytest.raises(SpecError) as e:  # not deployed yet: no traffic to it
        ctl.deployments.set_traffic(ALICE, "a", "iris", {"2": 50, "1": 50}, "traffic", "")
    assert "no deployed revision 2" in e.value.message
    finish(engine, train.id)
    engine.tick()
    reconcile(engine)
    assert revisions(engine)[0].traffic == {"1": 80, "2": 20}


def test_a_cancelled_revision_never_rolls_out_and_the_deployment_serves_on(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    model(engine, "v1")
    deploy(engine, model_dir="v1")
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, model_dir="v2", min_replicas=2, max_replicas=3,
           after=[{"id": train.id, "condition": "ok"}])
    reconcile(engine)
    deployments = serving_controller(engine).deployments
    dep = deployments.cancel_revision(ALICE, "a", "iris", 2)
    assert dep.message == "revision 2 cancelled by alice; serving revision 1 (100%) as before"
    model(engine, "v2")
    finish(engine, train.id)  # its job succeeds after all: nothing rolls out
    engine.tick()
    reconcile(engine)
    dep, revs = revisions(engine)
    assert revs == {1: ("ready", ""), 2: ("cancelled", "cancelled by alice")}
    assert dep.traffic == {"1": 100} and (dep.min_replicas, dep.max_replicas) == (1, 1)
    assert replicas(engine) == [(1, 0)]
    with engine.store.session() as s:
        entry = s.scalars(select(AuditEntry).where(AuditEntry.action == "cancel-revision")).one()
        assert (entry.actor, entry.target, entry.detail["was"]) == \
            ("alice", "a/iris", f"waiting for {train.id} (ok)")


BOB = Identity("bob", teams=frozenset({"a"}), can_submit=True)


@pytest.mark.parametrize("who, number, error, message", [
    (ALICE, 1, Conflict, "revision 1 of a/iris is ready, not waiting: only a waiting revision "
                         "can be cancelled (roll it back instead)"),
    (ALICE, 7, NotFound, "deployment a/iris has no revision 7"),
    (BOB, 2, Forbidden, "deployment a/iris belongs to alice"),
])
def test_only_its_owner_cancels_and_only_a_waiting_revision(db_url, tmp_path, who, number, error,
                                                           message):
    engine = make_engine(db_url, tmp_path)
    model(engine, "v1")
    deploy(engine, model_dir="v1")
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, model_dir="v2", after=[{"id": train.id}])
    with pytest.raises(error) as e:
        serving_controller(engine).deployments.cancel_revision(who, "a", "iris", number)
    assert str(e.value).startswith(message)
    assert revisions(engine)[1][2][0] == "waiting"


def test_the_wait_survives_a_restart(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, after=[{"id": train.id}])
    model(engine)
    finish(engine, train.id)
    engine.tick()
    engine.starter.close()
    again = make_engine(db_url, tmp_path)
    assert revisions(again)[1] == {1: ("waiting", f"waiting for {train.id} (ok)")}
    reconcile(again)
    assert revisions(again)[1] == {1: ("ready", "")}
    assert replicas(again) == [(1, 0)]


@pytest.mark.parametrize("after,field", [
    ([{"id": "w0123456789ab"}], "after[0].id"),
    ([{"id": "w0123456789ab", "condition": "later"}], "after[0].condition"),
    ("w0123456789ab", "after"),
])
def test_a_bad_after_is_refused_naming_it_and_nothing_is_made(db_url, tmp_path, after, field):
    engine = make_engine(db_url, tmp_path)
    with pytest.raises(SpecError) as e:
        deploy(engine, after=after)
    assert e.value.field == field
    with engine.store.session() as s:
        assert s.scalars(select(DeploymentRow)).all() == []


def test_the_controllers_rounds_do_not_wait_for_anothers_write_turn_when_nothing_waits(
        db_url, tmp_path):
    """The serving controller reconciles every second on the event loop.
    With no revision waiting it must not wait while another thread holds
    the write turn (the cycle's worker writing a long queue's waiting
    reasons): every request would wait with it."""
    engine = make_engine(db_url, tmp_path)
    model(engine)
    deploy(engine)
    reconcile(engine)
    assert revisions(engine)[1] == {1: ("ready", "")}
    held, release = threading.Event(), threading.Event()

    def hold_the_write_turn():
        with engine.store.transaction():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_write_turn)
    holder.start()
    try:
        assert held.wait(5)
        started = time.monotonic()
        asyncio.run(serving_controller(engine).reconcile())
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join()
    assert waited < 5, f"the controller's round waited {waited:.1f} s for the write turn"
    # With a revision waiting, its round does take the turn, and rolls it out.
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, after=[{"id": train.id}])
    finish(engine, train.id)
    engine.tick()
    reconcile(engine)
    assert revisions(engine)[1] == {1: ("ready", ""), 2: ("ready", "")}
