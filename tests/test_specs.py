"""Job spec validation and scope parsing: pure, table-driven."""
from __future__ import annotations

import pytest
import yaml

from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.app import OPENAPI
from gpuspawner.service.access.identity import identity_from_model
from gpuspawner.vocab.specs import Limits, SpecError, parse_duration, parse_job

LIMITS = Limits(max_time_limit=7 * 86400, default_time_limit=86400, default_pool="a100")


@pytest.mark.parametrize("text, seconds", [
    (600, 600), (1.5, 1.5), ("90", 90), ("45m", 2700), ("2h30m", 9000), ("1d", 86400),
    ("1h 15s", 3615), ("0.5h", 1800),
])
def test_durations(text, seconds):
    assert parse_duration(text, "time_limit") == seconds


@pytest.mark.parametrize("text", ["forever", "", "h", "-5", -5, 0, True, None, "2x", [1]])
def test_bad_durations_name_the_field(text):
    with pytest.raises(SpecError) as e:
        parse_duration(text, "time_limit")
    assert e.value.field == "time_limit"


@pytest.mark.parametrize("body, field", [
    (None, "body"),
    ([], "body"),
    ({"command": "x", "colour": "red"}, "colour"),
    ({"command": "x", "kind": "notebook"}, "kind"),
    ({}, "command"),
    ({"command": "x", "notebook": "a.ipynb"}, "command"),
    ({"command": ""}, "command"),
    ({"command": []}, "command"),
    ({"command": ["python", 3]}, "command"),
    ({"command": "x", "gpus": -1}, "gpus"),
    ({"command": "x", "gpus": 65}, "gpus"),
    ({"command": "x", "gpus": 1.5}, "gpus"),
    ({"command": "x", "gpus": True}, "gpus"),
    ({"command": "x", "nodes": 0}, "nodes"),
    ({"command": "x", "time_limit": 8 * 86400}, "time_limit"),
    ({"command": "x", "grace_period": "2h"}, "grace_period"),
    ({"command": "x", "env": {"GPUHUB_ATTEMPT": "3"}}, "env.GPUHUB_ATTEMPT"),
    ({"command": "x", "env": {"1BAD": "x"}}, "env.1BAD"),
    ({"command": "x", "env": {"OK": 1}}, "env.OK"),
    ({"command": "x", "env": []}, "env"),
    ({"command": "x", "name": "has space"}, "name"),
    ({"command": "x", "parameters": {"lr": 0.1}}, "parameters"),
    ({"notebook": "t.ipynb", "parameters": [1]}, "parameters"),
    ({"command": "x", "project": 7}, "project"),
    ({"command": "x", "pool": "p" * 65}, "pool"),
    ({"command": "x\x00y"}, "command"),
    ({"command": [""]}, "command"),
    ({"notebook": ""}, "notebook"),
    ({"notebook": "  "}, "notebook"),
    ({"notebook": "t.ipynb", "parameters": {"p": "x" * 70000}}, "parameters"),
    ({"command": "x", "name": "job\n"}, "name"),
    ({"command": "x", "env": {"A\n": "x"}}, "env.A\n"),
    ({"command": "x", "env": {"LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD"),
    ({"command": "x", "env": {"OK": "1", "LD_LIBRARY_PATH": "/tmp"}}, "env.LD_LIBRARY_PATH"),
    ({"command": "x", "env": {"LD_AUDIT": "/tmp/a.so"}}, "env.LD_AUDIT"),
    ({"command": "x", "nodes": 2, "topology": "strict"}, "topology"),
    ({"command": "x", "nodes": 2, "topology": "required", "topology_key": "a b"}, "topology_key"),
    ({"command": "x", "nodes": 2, "topology": "required", "topology_key": 3}, "topology_key"),
])
def test_bad_specs_name_the_field(body, field):
    with pytest.raises(SpecError) as e:
        parse_job(body, LIMITS)
    assert e.value.field == field
    assert e.value.status == 400


@pytest.mark.parametrize("body, expect", [
    ({"command": "python train.py"}, {"command": ("python train.py",), "shell": True,
                                      "gpus_per_node": 1, "nodes": 1, "pool": "a100",
                                      "time_limit": 86400}),
    ({"command": ["python", "t.py"], "gpus": 0, "time_limit": "2h"},
     {"command": ("python", "t.py"), "shell": False, "gpus_per_node": 0, "time_limit": 7200}),
    ({"notebook": "t.ipynb", "parameters": {"lr": 0.1}, "pool": "h100", "gpus": 8, "nodes": 2},
     {"notebook": "t.ipynb", "parameters": {"lr": 0.1}, "pool": "h100", "gpus_per_node": 8, "nodes": 2}),
    ({"command": "x", "env": {"WANDB_MODE": "offline"}, "project": "search", "priority": "best-effort"},
     {"env": {"WANDB_MODE": "offline"}, "project": "search", "priority": "best-effort"}),
    ({"command": "x", "nodes": 2}, {"topology": "none", "topology_key": "switch"}),
    ({"command": "x", "nodes": 2, "topology": "required"},
     {"topology": "required", "topology_key": "switch"}),
    ({"command": "x", "nodes": 4, "topology": "preferred", "topology_key": "rack"},
     {"topology": "preferred", "topology_key": "rack"}),
])
def test_good_specs(body, expect):
    spec = parse_job(body, LIMITS)
    for key, value in expect.items():
        assert getattr(spec, key) == value, key


def test_no_pool_and_no_default():
    with pytest.raises(SpecError) as e:
        parse_job({"command": "x"}, Limits(default_pool=""))
    assert e.value.field == "pool"


@pytest.mark.parametrize("scopes, groups, expect", [
    (["custom:gpuhub:submit"], ["team-a", "staff"],
     dict(teams={"a"}, leads=set(), admin=False, can_submit=True)),
    ([], ["team-a"], dict(teams={"a"}, leads=set(), admin=False, can_submit=False)),
    (["custom:gpuhub:submit", "custom:gpuhub:team-admin!group=team-b"], ["team-a", "team-b"],
     dict(teams={"a", "b"}, leads={"b"}, admin=False)),
    (["custom:gpuhub:team-admin"], ["team-a", "team-b"], dict(leads={"a", "b"})),
    (["custom:gpuhub:team-admin!group=other"], ["team-a"], dict(leads=set())),
    (["custom:gpuhub:admin"], [], dict(teams=set(), admin=True, can_submit=True)),
])
def test_identity_from_scopes_and_groups(scopes, groups, expect):
    who = identity_from_model({"name": "u", "scopes": scopes}, groups, "team-")
    for key, value in expect.items():
        assert getattr(who, key) == value, key


@pytest.mark.parametrize("who, owner, team, sees, acts", [
    (dict(teams={"a"}), "u", "a", True, True),
    (dict(teams={"a"}), "v", "a", True, False),
    (dict(teams={"a"}), "v", "b", False, False),
    (dict(teams={"a"}, leads={"a"}), "v", "a", True, True),
    (dict(admin=True), "v", "z", True, True),
])
def test_who_sees_and_acts(who, owner, team, sees, acts):
    from gpuspawner.service.access.identity import Identity
    ident = Identity("u", teams=frozenset(who.get("teams", ())),
                     leads=frozenset(who.get("leads", ())), admin=who.get("admin", False))
    assert ident.sees_team(team) is sees
    assert ident.acts_on(owner, team) is acts


def openapi_at(*path: str):
    with open(OPENAPI) as f:
        node = yaml.safe_load(f)
    for key in path:
        node = node[key]
    return node


@pytest.mark.parametrize("where, allowed_empty", [
    (("components", "schemas", "JobSpec", "properties", "priority"), True),
    (("paths", "/workloads/{id}/priority", "put", "requestBody", "content", "application/json",
      "schema", "properties", "priority"), False),
], ids=["submit", "set priority"])
def test_the_openapi_document_lists_the_priority_classes_the_service_takes(where, allowed_empty):
    """A client generated from the document offers what the service takes:
    the default policy's classes (a submission may leave it empty: batch)."""
    classes = set(get_policy("gpuhub").priority_classes)
    assert set(openapi_at(*where)["enum"]) == classes | ({""} if allowed_empty else set())
