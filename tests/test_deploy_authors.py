"""Who may change a deployment, and whose account its code runs as.

A revision's code (its model directory, its ``predictor.py``) runs as the
account of the user who created that revision, never as the deployment's
owner: a team lead who rolls out a fix to bob's deployment runs it as
herself, from her own workspace. Changes that run no new code (scale,
traffic, promote, rollback, delete) are for the owner, the team's leads
and admins. On a real database with the engine and the serving controller;
the end-to-end probe (the replica's uid, bob's 0600 file from ``load()``)
is in tests/test_serving_e2e.py."""
from __future__ import annotations

import asyncio
import os

import pytest
from sqlalchemy import select

from gpuspawner.scheduler.model import DEPLOYMENT
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.errors import Forbidden, NotFound
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.wiring import serving_controller
from gpuspawner.vocab.specs import SpecError
from gpuspawner.store import AuditEntry, DeploymentRow, RevisionRow, WorkloadRow

from test_dependencies import finish, job
from test_engine_steps import make_engine

V = frozenset({"v"})
BOB = Identity("bob", teams=V, can_submit=True)  # the deployment's owner
ALICE = Identity("alice", teams=V, leads=V, can_submit=True)  # lead of team v
DAVE = Identity("dave", teams=V, can_submit=True)  # bob's teammate
CAROL = Identity("carol", teams=frozenset({"n"}), can_submit=True)  # another team
ROOT = Identity("root", admin=True, can_submit=True)
WHO = {w.name: w for w in (BOB, ALICE, DAVE, CAROL, ROOT)}


@pytest.fixture
def engine(tmp_path):
    e = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    yield e


def model(engine, user: str, path: str = "model") -> str:
    full = os.path.join(engine.launcher.workspace(user), path)
    os.makedirs(full, exist_ok=True)
    with open(os.path.join(full, "predictor.py"), "w") as f:
        f.write("class Model:\n    def predict(self, x):\n        return x\n")
    return full


def deploy(engine, who: Identity, model_dir: str, **extra):
    spec = parse_deploy({"name": "m", "team": "v", "model_dir": model_dir,
                         "runtime": "predictor", **extra}, "default")
    return serving_controller(engine).deployments.deploy(who, spec)


def reconcile(engine) -> None:
    asyncio.run(serving_controller(engine).reconcile())
    engine.tick()


def replicas(engine) -> dict[int, set[str]]:
    """revision -> the users its replica workloads run as (queued or running)."""
    out: dict[int, set[str]] = {}
    with engine.store.session() as s:
        for w in s.scalars(select(WorkloadRow).where(
                WorkloadRow.kind == DEPLOYMENT, WorkloadRow.state.in_(("queued", "running")))):
            out.setdefault(w.spec["revision"], set()).add(w.user)
    return out


def audit(engine, action: str) -> list[tuple[str, dict]]:
    with engine.store.session() as s:
        return [(a.actor, a.detail) for a in s.scalars(
            select(AuditEntry).where(AuditEntry.action == action).order_by(AuditEntry.id))]


def bobs_deployment(engine) -> None:
    model(engine, "bob")
    deploy(engine, BOB, "model")
    reconcile(engine)
    assert replicas(engine) == {1: {"bob"}}


# ---- code changes: a new revision of bob's deployment ------------------------------------

@pytest.mark.parametrize("actor,model_dir,outcome", [
    ("bob", "own", "runs as bob"),
    ("alice", "own", "runs as alice"),          # the lead's fix runs as the lead
    ("root", "own", "runs as root"),            # so does an admin's
    ("alice", "bob-absolute", "outside your workspace"),
    ("alice", "bob-relative", "outside your workspace"),
    ("dave", "own", Forbidden),                 # a teammate is not a lead
    ("carol", "own", "not a member of team 'v'"),
])
def test_a_new_revision_runs_as_its_author_from_the_authors_workspace(
        engine, actor, model_dir, outcome):
    bobs_deployment(engine)
    bob_dir = os.path.join(engine.launcher.workspace("bob"), "model")
    path = {"own": "fix", "bob-absolute": bob_dir, "bob-relative": "../bob/model"}[model_dir]
    model(engine, actor, "fix")
    if not isinstance(outcome, str) or not outcome.startswith("runs as"):
        with pytest.raises((SpecError, Forbidden)) as e:
            deploy(engine, WHO[actor], path)
        if isinstance(outcome, str):
            assert isinstance(e.value, SpecError) and outcome in e.value.message
        else:
            assert isinstance(e.value, outcome)
        reconcile(engine)
        assert replicas(engine) == {1: {"bob"}}  # nothing changed
        return
    deploy(engine, WHO[actor], path)
    reconcile(engine)
    author = outcome.split()[-1]
    assert replicas(engine) == {2: {author}}
    with engine.store.session() as s:
        dep = s.scalars(select(DeploymentRow)).one()
        assert dep.user == "bob"  # still bob's deployment
        rev = s.get(RevisionRow, (dep.id, 2))
        assert (rev.created_by, rev.model_dir) == (
            author, os.path.join(engine.launcher.workspace(author), "fix"))
    assert [(actor_, d["revision"], d["created_by"], d["owner"])
            for actor_, d in audit(engine, "deploy")] == [("bob", 1, "bob", "bob"),
                                                          (author, 2, author, "bob")]


def test_a_canary_and_its_stable_revision_run_as_their_own_authors(engine):
    bobs_deployment(engine)
    model(engine, "alice", "fix")
    deploy(engine, ALICE, "fix", canary_percent=50, min_replicas=2, max_replicas=2)
    reconcile(engine)
    assert replicas(engine) == {1: {"bob"}, 2: {"alice"}}


def test_rolling_back_runs_the_older_revision_as_its_own_author(engine):
    """alice's revision 2 replaced bob's revision 1; her rollback brings
    back bob's code, as bob (he asked for it to run), and a traffic change
    back to revision 2 runs hers as her. The audit says whose code takes
    the traffic."""
    bobs_deployment(engine)
    model(engine, "alice", "fix")
    deploy(engine, ALICE, "fix")
    reconcile(engine)
    assert replicas(engine) == {2: {"alice"}}
    ctl = serving_controller(engine)
    ctl.deployments.rollback(ALICE, "v", "m")
    reconcile(engine)
    assert replicas(engine) == {1: {"bob"}}
    ctl.deployments.set_traffic(BOB, "v", "m", {"2": 100}, "traffic", "")
    reconcile(engine)
    assert replicas(engine) == {2: {"alice"}}
    assert [(a, d["after"], d["runs_as"]) for a, d in audit(engine, "rollback")] == [
        ("alice", {"1": 100}, {"1": "bob"})]
    assert [(a, d["runs_as"]) for a, d in audit(engine, "traffic")] == [("bob", {"2": "alice"})]


def test_a_waiting_revision_of_a_lead_is_checked_in_her_workspace_and_runs_as_her(engine):
    bobs_deployment(engine)
    train = engine.submit(ALICE, job())
    engine.tick()
    deploy(engine, ALICE, "later", after=[{"id": train.id}])
    model(engine, "alice", "later")  # made by her job
    finish(engine, train.id)
    engine.tick()
    reconcile(engine)
    assert replicas(engine) == {2: {"alice"}}
    assert [(a, d["revision"], d["created_by"]) for a, d in audit(engine, "deploy-released")] \
        == [("gpuhub", 2, "alice")]


# ---- changes that run no new code --------------------------------------------------------

def scale(ctl, who):
    ctl.deployments.scale(who, "v", "m", {"max_replicas": 2})


def traffic(ctl, who):
    ctl.deployments.set_traffic(who, "v", "m", {"1": 100}, "traffic", "")


def rollback(ctl, who):
    ctl.deployments.rollback(who, "v", "m")


def delete(ctl, who):
    ctl.deployments.delete(who, "v", "m")


@pytest.mark.parametrize("change", [scale, traffic, rollback, delete])
@pytest.mark.parametrize("actor,outcome", [
    ("bob", None), ("alice", None), ("root", None), ("dave", Forbidden), ("carol", NotFound),
])
def test_changes_without_new_code_are_for_the_owner_the_leads_and_admins(
        engine, change, actor, outcome):
    bobs_deployment(engine)
    model(engine, "bob", "v2")
    deploy(engine, BOB, "v2")
    reconcile(engine)
    ctl = serving_controller(engine)
    if outcome is None:
        change(ctl, WHO[actor])
        reconcile(engine)
        # No revision was added, and the replicas run as bob, whose code it is.
        assert set().union(*replicas(engine).values()) <= {"bob"}
        return
    with pytest.raises(outcome):
        change(ctl, WHO[actor])
    reconcile(engine)
    assert replicas(engine) == {2: {"bob"}}


def test_a_replica_started_as_the_owner_by_an_older_release_is_replaced(engine):
    """An upgraded service: alice's revision has a replica that an older
    release started as bob. It is stopped, and its replacement runs as her."""
    bobs_deployment(engine)
    model(engine, "alice", "fix")
    deploy(engine, ALICE, "fix")
    reconcile(engine)
    with engine.store.transaction() as s:
        old = s.scalars(select(WorkloadRow).where(WorkloadRow.kind == DEPLOYMENT,
                                                  WorkloadRow.state == "running")).one()
        old.user, old_id = "bob", old.id
    assert replicas(engine) == {2: {"bob"}}
    reconcile(engine)
    reconcile(engine)
    assert replicas(engine) == {2: {"alice"}}
    with engine.store.session() as s:
        assert s.get(WorkloadRow, old_id).state not in ("queued", "running")
