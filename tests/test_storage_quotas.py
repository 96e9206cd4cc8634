"""A team's storage quota set by an admin (issue 34): ``PUT /teams/NAME``
with ``storage_quota`` keeps it in the database, where it wins over
``GpuHubService.team_storage_quotas`` (the default) and holds from the next
submit without a restart; every change is in the audit log; a bad size is a
400 naming it, a user's try a 403. The API's own handler over HTTP, a real
database and engine, a team space measured on disk; only the hub's login
is left out (a header says who asks)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
from types import SimpleNamespace

import pytest
import yaml
from sqlalchemy import select
from tornado import web
from tornado.httpclient import AsyncHTTPClient

from gpuspawner import cli
from gpuspawner.scheduler.model import Node
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.api.cluster import TeamHandler
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.teams.spaces import SpaceSync
from gpuspawner.service.teams.storage import StorageLedger
from gpuspawner.service.teams.storage_quotas import (StorageQuotas, parse_storage_quota,
                                                     saved)
from gpuspawner.store import AuditEntry, Store, TeamRow
from gpuspawner.vocab.specs import SpecError, parse_job

from test_cpu_admission import DEFAULTS, G, make_engine

T, M = 1 << 40, 1 << 20
PEOPLE = {"root": Identity("root", admin=True, can_submit=True),
          "alice": Identity("alice", teams=frozenset({"vision"}), leads=frozenset({"vision"}),
                            can_submit=True)}


@pytest.mark.parametrize("value, size", [
    ("200G", 200 << 30), ("1.5T", int(1.5 * T)), ("512MiB", 512 * M), (5000, 5000),
    ("0", None), (0, None), ("none", None), ("", None), (None, None),
])
def test_a_size_is_read_as_the_configuration_reads_it_and_0_or_none_removes_it(value, size):
    assert parse_storage_quota(value) == size


# What the API's schema refuses is refused (" 200G", "None": not as the schema spells them).
@pytest.mark.parametrize("value", ["lots", "-1G", "1.5X", "0G", "200 gigs", True, [1], -5,
                                   " 200G", "200G ", "None", " none"])
def test_a_bad_size_names_the_field_and_says_what_a_size_looks_like(value):
    with pytest.raises(SpecError) as e:
        parse_storage_quota(value)
    assert e.value.field == "storage_quota" and e.value.status == 400
    assert "is not a size like 200G or 1.5T" in str(e.value)


class AsWho(TeamHandler):
    """The API's team handler, told who asks by a header instead of the hub."""

    async def prepare(self):
        self.identity = PEOPLE[self.request.headers["X-Who"]]


@pytest.fixture
def hub(db_url, tmp_path):
    """Team vision (alice) with 2 MiB in its space; the configuration gives
    every team 1T; the API's team handler on a port of this host."""
    engine, _backend = make_engine(db_url, tmp_path, [
        LocalNode(Node("host", "default", 2, cpus=8, memory=64 * G), [0, 1])])
    space = tmp_path / "teams" / "vision"
    space.mkdir(parents=True)
    (space / "checkpoint.pt").write_bytes(b"x" * (2 * M))
    quotas = StorageQuotas(engine.store, {"*": T})
    sync = SpaceSync(SimpleNamespace(path=lambda team: str(space)), None, members_of=None,
                     teams=lambda: ["vision"], ledger=StorageLedger(engine.store),
                     quota_of=quotas.of)
    sync.applied["vision"] = ("alice",)
    sync.measure_all()
    # as the service wires them (app.py): the gate and the team's view
    engine.submitting.storage_refusal = sync.refusal
    engine.storage_view = sync.storage_view
    engine.teams.ensure("vision", engine.clock())
    app = web.Application([(r"/teams/([^/]+)", AsWho)], engine=engine,
                          gpuhub=SimpleNamespace(storage_quotas=quotas, max_body_size=1 << 20))
    port = ports_below_ephemeral(1)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(_listen(app, port))
    yield SimpleNamespace(engine=engine, space=space, loop=loop, quotas=quotas,
                          url=f"http://127.0.0.1:{port}/teams/")
    server.stop()
    loop.close()
    engine.store.close()


async def _listen(app, port):
    return app.listen(port, "127.0.0.1")


def put(hub, team: str, body, who: str = "root") -> tuple[int, dict]:
    async def call():
        r = await AsyncHTTPClient().fetch(hub.url + team, method="PUT", body=json.dumps(body),
                                          headers={"X-Who": who}, raise_error=False)
        return r.code, json.loads(r.body)
    return hub.loop.run_until_complete(call())


def submit(hub):
    return hub.engine.submit(PEOPLE["alice"], parse_job(
        {"command": [sys.executable, "-c", "pass"], "gpus": 0, "team": "vision"}, DEFAULTS))


def audit(hub) -> list[tuple]:
    with hub.engine.store.session() as s:
        return [(a.actor, a.target, a.detail) for a in s.scalars(
            select(AuditEntry).where(AuditEntry.action == "set-storage-quota")
            .order_by(AuditEntry.id))]


def test_a_quota_below_the_teams_usage_refuses_its_next_job_at_once_and_deletes_nothing(hub):
    assert submit(hub).state == "queued"  # the configuration's 1T: far from full
    code, team = put(hub, "vision", {"storage_quota": "1M"})
    assert code == 200
    assert team["storage_quota"] == M and team["storage"]["quota_bytes"] == M
    assert team["storage"]["state"] == "full"
    with pytest.raises(SpecError) as refused:
        submit(hub)
    assert refused.value.status == 403
    assert "team vision" in str(refused.value) and "nothing was deleted" in str(refused.value)
    assert (hub.space / "checkpoint.pt").stat().st_size == 2 * M
    # removed: the configuration's quota holds again, and the team's jobs are taken
    code, team = put(hub, "vision", {"storage_quota": "none"})
    assert code == 200 and team["storage_quota"] is None
    assert team["storage"]["quota_bytes"] == T and team["storage"]["state"] == "ok"
    assert submit(hub).state == "queued"
    assert audit(hub) == [("root", "vision", {"before": None, "after": M, "default": T}),
                          ("root", "vision", {"before": M, "after": None, "default": T})]


def test_the_teams_own_quota_wins_over_the_configurations_and_gpu_quotas_are_kept(hub):
    code, team = put(hub, "vision", {"storage_quota": "2T"})
    assert code == 200 and team["storage"]["quota_bytes"] == 2 * T
    assert hub.quotas.of("vision") == 2 * T and hub.quotas.of("nlp") == T
    # a GPU quota change leaves the storage quota as it was, and the reverse
    code, team = put(hub, "vision", {"quotas": {"default": {"nominal": 1}}})
    assert code == 200 and team["storage_quota"] == 2 * T
    assert team["quotas"]["default"]["nominal"] == 1
    code, team = put(hub, "vision", {"storage_quota": 0, "weight": 2})
    assert code == 200 and team["storage_quota"] is None and team["weight"] == 2
    assert team["quotas"]["default"]["nominal"] == 1


@pytest.mark.parametrize("who, body, status, field, words", [
    ("root", {"storage_quota": "lots"}, 400, "storage_quota", "'lots' is not a size like 200G"),
    ("root", {"storage_quota": "-1G"}, 400, "storage_quota", "is not a size like 200G or 1.5T"),
    ("root", {"storage_quota": True}, 400, "storage_quota", "is not a size"),
    ("root", {"storage": "1T"}, 400, "storage", "known fields: quotas, weight, storage_quota"),
    ("alice", {"storage_quota": "10T"}, 403, None, "custom:gpuhub:admin"),
])
def test_a_bad_change_is_refused_naming_the_problem_and_changes_nothing(hub, who, body, status,
                                                                        field, words):
    code, error = put(hub, "vision", body, who)
    assert (code, error.get("field")) == (status, field) and words in error["error"]
    assert hub.quotas.own("vision") is None and audit(hub) == []


def test_the_default_team_has_no_space_so_no_storage_quota(hub):
    hub.engine.teams.default_team = "everyone"
    code, error = put(hub, "everyone", {"storage_quota": "1T", "weight": 3})
    assert code == 409 and "default team" in error["error"]
    assert "everyone" not in hub.engine.teams.names()  # nor its weight saved


@pytest.mark.parametrize("quota, own, view, text", [
    (M, True, {"used_bytes": 2 * M, "measured_at": 1.0},
     "team vision: storage quota 1MiB (its own); 2MiB used, 200 %: its new jobs are refused "
     "until files are removed"),
    (T, False, {"used_bytes": T // 4, "measured_at": 1.0},
     "team vision: storage quota 1TiB (the configuration's); 256GiB used, 25 %"),
    (T, True, None, "team vision: storage quota 1TiB (its own)"),
    (None, False, None, "team vision: no storage quota (none of its own, none configured)"),
])
def test_what_the_admin_reads_after_saving_says_the_quota_and_the_usage(quota, own, view, text):
    assert saved("vision", quota, own, view) == text


def test_kube_manifests_size_a_teams_claim_by_its_own_quota_else_the_configurations(tmp_path):
    (tmp_path / "gpuhub_config.py").write_text(
        'c.KubernetesJobs.team_space_claim = "gpuhub-team-{team}"\n'
        'c.GpuHubService.team_storage_quotas = {"*": "1T"}\n')
    store = Store(f"sqlite:///{tmp_path}/gpuhub.sqlite")
    with store.transaction() as s:
        s.add_all([TeamRow(name="vision", group="team-vision", storage_quota=200 << 30),
                   TeamRow(name="nlp", group="team-nlp")])
    store.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["kube-manifests", "--config", str(tmp_path / "gpuhub_config.py"),
                         "--data-dir", str(tmp_path)]) == 0
    claims = {o["metadata"]["name"]: o["spec"]["resources"]["requests"]["storage"]
              for o in yaml.safe_load_all(out.getvalue())}
    assert claims == {"gpuhub-team-nlp": "1T", "gpuhub-team-vision": str(200 << 30)}
