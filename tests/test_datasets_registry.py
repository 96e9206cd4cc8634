"""The datasets' registry against a real database (SQLite and PostgreSQL, the
migrations' tables): who may register, share, revoke and delete; what the
check at submit and at a start says; every change and use in the audit log,
whose hash chain holds."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from gpuspawner.service.access.identity import Identity
from gpuspawner.service.datasets.registry import Datasets
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.store import AuditEntry, Store
from gpuspawner.store.audit import verify
from gpuspawner.vocab.specs import SpecError

ALICE = Identity("alice", teams=frozenset({"vision"}), leads=frozenset({"vision"}),
                 can_submit=True)
CAROL = Identity("carol", teams=frozenset({"nlp"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"bio"}), can_submit=True)
ADMIN = Identity("root", admin=True)


@pytest.fixture
def registry(db_url, tmp_path):
    store = Store(db_url)
    workspaces = tmp_path / "workspaces"
    (workspaces / "alice" / "imagenet").mkdir(parents=True)
    (tmp_path / "srv" / "census").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    clock = iter(float(t) for t in range(1000, 10**6)).__next__
    cluster = SimpleNamespace(state=SimpleNamespace(capacity={"eu": 4, "us": 4}))
    yield Datasets(SimpleNamespace(store=store, clock=clock), cluster,
                   lambda: ["bio", "nlp", "vision"], lambda user: str(workspaces / user),
                   roots=[str(tmp_path / "srv")])
    store.close()


def audit(registry) -> list[tuple[str, str, str]]:
    with registry.store.session() as s:
        entries = s.scalars(select(AuditEntry).order_by(AuditEntry.id)).all()
        assert verify(entries) is None
        return [(e.actor, e.action, e.target) for e in entries]


def test_a_lead_registers_shares_revokes_and_deletes_and_each_is_audited(registry, tmp_path):
    d = registry.create(ALICE, {"name": "imagenet", "path": "imagenet", "shared_with": ["nlp"]})
    assert (d.team, d.shared_with, d.pools) == ("vision", ("nlp",), ())
    assert d.path == os.path.realpath(tmp_path / "workspaces" / "alice" / "imagenet")
    assert registry.share(ALICE, "imagenet", "bio").shared_with == ("bio", "nlp")
    assert registry.unshare(ALICE, "imagenet", "bio").shared_with == ("nlp",)
    census = registry.create(ADMIN, {"name": "census", "team": "nlp", "pools": ["eu"],
                                     "path": str(tmp_path / "srv" / "census")})
    assert census.pools == ("eu",)
    assert [x.name for x in registry.listing(CAROL)] == ["census", "imagenet"]
    assert [x.name for x in registry.listing(BOB)] == []
    registry.delete(ALICE, "imagenet")
    assert registry.find("imagenet") is None
    assert audit(registry) == [
        ("alice", "dataset-create", "imagenet"), ("alice", "dataset-grant", "imagenet"),
        ("alice", "dataset-grant", "imagenet"), ("alice", "dataset-revoke", "imagenet"),
        ("root", "dataset-create", "census"), ("alice", "dataset-delete", "imagenet")]


@pytest.mark.parametrize("who, body, error, status, words", [
    (CAROL, {"name": "x", "path": "."}, SpecError, 403, "only a team's lead or an admin"),
    (ALICE, {"name": "x", "path": ".", "team": "nlp"}, SpecError, 403, "only a lead of team nlp"),
    (ADMIN, {"name": "x", "path": "/tmp"}, SpecError, 400, "say which team"),
    (ALICE, {"name": "x", "path": "../../outside"}, SpecError, 400, "is not a folder in your"),
    (ALICE, {"name": "x", "path": "nosuch"}, SpecError, 400, "is not a folder in your"),
    (ALICE, {"name": "X", "path": "imagenet"}, SpecError, 400, "is not a dataset name"),
    (ALICE, {"name": "x", "path": "imagenet", "pools": ["mars"]}, SpecError, 400, "unknown pool"),
    (ALICE, {"name": "x", "path": "imagenet", "shared_with": ["vision"]}, SpecError, 400,
     "owns the dataset"),
    (ALICE, {"name": "x", "path": "imagenet", "shared_with": ["nosuch"]}, SpecError, 404,
     "no team nosuch"),
    (ALICE, {"name": "x", "path": "imagenet", "colour": 1}, SpecError, 400, "not a known field"),
    (ALICE, {"name": "x", "path": "imagenet", "node_labels": {"region": "eu west"}}, SpecError,
     400, "is not a node label value"),
    (ALICE, {"name": "x", "path": "imagenet", "node_labels": "region=eu"}, SpecError, 400,
     "must be an object of node labels"),
])
def test_a_bad_registration_is_refused_naming_the_problem(registry, who, body, error, status,
                                                          words):
    with pytest.raises(error, match=words) as e:
        registry.create(who, body)
    assert e.value.status == status
    assert registry.find("x") is None and audit(registry) == []


def test_a_taken_name_and_a_non_lead_change_are_refused(registry):
    registry.create(ALICE, {"name": "imagenet", "path": "imagenet", "shared_with": ["nlp"]})
    with pytest.raises(Conflict, match="exists already"):
        registry.create(ALICE, {"name": "imagenet", "path": "imagenet"})
    with pytest.raises(Forbidden, match="only a lead of team vision"):
        registry.share(CAROL, "imagenet", "bio")
    with pytest.raises(NotFound):       # bob may not read it: not told it exists
        registry.delete(BOB, "imagenet")
    with pytest.raises(NotFound, match="not shared with team bio"):
        registry.unshare(ALICE, "imagenet", "bio")


def test_the_check_at_submit_and_again_at_the_start(registry):
    registry.create(ALICE, {"name": "imagenet", "path": "imagenet", "shared_with": ["nlp"],
                            "pools": ["eu"]})
    assert [d.name for d in registry.check(["imagenet"], "nlp", "eu")] == ["imagenet"]
    for names, team, pool, status, field, words in (
            (["nosuch"], "nlp", "eu", 404, "datasets", "no dataset nosuch"),
            (["imagenet"], "bio", "eu", 403, "datasets", "team bio may not read dataset imagenet"),
            (["imagenet"], "nlp", "us", 403, "pool", "may only be read in pool eu")):
        with pytest.raises(SpecError, match=words) as e:
            registry.check(names, team, pool)
        assert (e.value.status, e.value.field) == (status, field)
    row = SimpleNamespace(id="w1", attempt=0, user="carol", team="nlp", pool="eu",
                          spec={"datasets": ["imagenet"]})
    assert registry.mounts(row) == (("imagenet", registry.find("imagenet").path),)
    assert audit(registry)[-1] == ("carol", "dataset-use", "imagenet")
    registry.unshare(ALICE, "imagenet", "nlp")   # revoked while the workload waited
    with pytest.raises(Forbidden, match="changed since the submit: team nlp may not read"):
        registry.mounts(row)


@pytest.mark.parametrize("path", ["../bob/private", "bobs", "bobs/private"])
def test_a_lead_cannot_register_a_team_mates_folder_even_through_a_link(registry, tmp_path,
                                                                        path):
    """alice leads vision; bob's workspace is his. A path up and out of her
    workspace, or a link she planted in it that points into his, resolves
    outside the folders she may register: refused, nothing stored, and the
    answer does not say whether his folder exists."""
    bob = tmp_path / "workspaces" / "bob" / "private"
    bob.mkdir(parents=True)
    (tmp_path / "workspaces" / "alice" / "bobs").symlink_to(bob.parent)
    with pytest.raises(SpecError) as e:
        registry.create(ALICE, {"name": "stolen", "path": path})
    assert e.value.field == "path" and "is not a folder in your workspace" in e.value.message
    assert registry.find("stolen") is None


def test_node_labels_are_kept_handed_to_the_scheduler_and_checked_again_at_the_start(registry,
                                                                                      tmp_path):
    eu = registry.create(ADMIN, {"name": "census", "team": "nlp", "path": str(tmp_path / "srv" /
                                 "census"), "node_labels": {"region": "eu"}})
    registry.create(ALICE, {"name": "imagenet", "path": "imagenet"})
    assert eu.node_labels == {"region": "eu"}
    assert registry.node_rules(["census", "imagenet"]) == {"census": {"region": "eu"}}
    row = SimpleNamespace(id="w1", attempt=0, user="carol", team="nlp", pool="us",
                          spec={"datasets": ["census"], "dataset_nodes": {"census": {"region": "eu"}}})
    assert registry.mounts(row) == (("census", eu.path),)
    # deleted and registered again with another rule while the workload waited:
    # it was placed by the old one, so it does not start
    registry.delete(ADMIN, "census")
    registry.create(ADMIN, {"name": "census", "team": "nlp", "path": eu.path,
                            "node_labels": {"region": "ch"}})
    with pytest.raises(Forbidden, match="dataset census may now only be read on nodes labelled "
                                        "region=ch"):
        registry.mounts(row)
    with registry.store.session() as s:
        [create] = [e for e in s.scalars(select(AuditEntry).order_by(AuditEntry.id))
                    if e.action == "dataset-create" and e.target == "census"][-1:]
        assert create.detail["node_labels"] == {"region": "ch"}
