"""The admin operations through the REST API of a real hub: drain, GPUs out
of service, prices, hold / release and priority; bad input named with the
right status code; and everything an admin set survives a restart."""
from __future__ import annotations

import sys

import pytest

from hub_harness import Hub, wait_for

GROUPS = {"team-a": ["alice", "amy"], "team-b": ["bert"]}
TEAMS = {"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}},
         "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}}
LEAD = """
c.JupyterHub.load_roles.append({"name": "lead-a", "users": ["amy"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-a"]})
"""


def sleeper(seconds: float, gpus: int = 1) -> dict:
    return {"command": [sys.executable, "-c", f"import time; time.sleep({seconds})"],
            "gpus": gpus, "pool": "default"}


@pytest.mark.parametrize(
    "method, path, body, status, field, words",
    [
        ("PATCH", "/nodes/NODE", {}, 400, "drained", "is required"),
        ("PATCH", "/nodes/NODE", {"drained": "yes"}, 400, "drained", "true or false"),
        ("PATCH", "/nodes/NODE", {"drained": True, "colour": 1}, 400, "colour", "not a known field"),
        ("PATCH", "/nodes/nosuch", {"drained": True}, 404, None, "no node nosuch"),
        ("PATCH", "/nodes/NODE/gpus/1", {"in_service": False}, 400, "reason", "say why"),
        ("PATCH", "/nodes/NODE/gpus/9", {"in_service": False, "reason": "x"}, 404, None, "has no GPU 9"),
        ("PATCH", "/pools/default", {"price_per_gpu_hour": -1}, 400, "price_per_gpu_hour", "from 0"),
        ("PATCH", "/pools/default", {"price_per_gpu_hour": "cheap"}, 400, "price_per_gpu_hour", "number"),
        ("PATCH", "/pools/h100", {"price_per_gpu_hour": 1}, 404, None, "no pool h100"),
        ("PUT", "/teams/a", {"quotas": {"default": {"nominal": 5}}}, 400,
         "quotas.default.nominal", "pool default has 4 GPUs in all"),
        ("PUT", "/teams/a", {"quotas": {"default": {"nominal": 1, "lending_limit": 2}}}, 400,
         "quotas.default.lending_limit", "only from its own idle nominal quota"),
    ],
)
def test_bad_admin_requests_name_the_problem(hub, method, path, body, status, field, words):
    r = hub.client("root-admin").request(method, path.replace("NODE", hub.node), json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert r.json().get("field") == field


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("ops")), groups=GROUPS, teams=TEAMS, gpus=4,
            extra_hub_config=LEAD).start()
    h.node = h.client("root-admin").get("/pools").json()["pools"][0]["nodes"][0]["name"]
    yield h
    h.stop()


def test_hold_release_and_priority(hub):
    alice, amy, bert = hub.client("alice"), hub.client("amy"), hub.client("bert")
    hogs = [alice.submit(**sleeper(120))["id"] for _ in range(2)]
    for wid in hogs:
        alice.wait(wid, "running")
    queued = alice.submit(**sleeper(1))["id"]
    # a running job cannot be held; another team's member cannot see it
    assert alice.post(f"/workloads/{hogs[0]}/hold").status_code == 409
    assert bert.post(f"/workloads/{queued}/hold").status_code == 404
    # the owner holds her own job; it leaves the queue but keeps its place
    r = alice.post(f"/workloads/{queued}/hold")
    assert r.status_code == 200 and r.json()["state"] == "held"
    assert alice.get("/workloads", params={"state": "held"}).json()["workloads"][0]["id"] == queued
    # owners may not raise priorities; their team lead may
    r = alice.request("PUT", f"/workloads/{queued}/priority", json={"priority": "production"})
    assert r.status_code == 403 and "lead of team a" in r.json()["error"]
    r = amy.request("PUT", f"/workloads/{queued}/priority", json={"priority": "urgent"})
    assert r.status_code == 400 and r.json()["field"] == "priority" and "best-effort" in r.json()["error"]
    r = amy.request("PUT", f"/workloads/{queued}/priority", json={"priority": "best-effort"})
    assert r.status_code == 200 and r.json()["priority"] == "best-effort"
    assert alice.post(f"/workloads/{queued}/unhold").status_code == 200
    assert alice.workload(queued)["state"] == "queued"
    events = [e["type"] for e in alice.get(f"/workloads/{queued}/events").json()["events"]]
    assert events[-3:] == ["held", "priority-changed", "released"]
    # a held job can be cancelled without ever having run
    alice.post(f"/workloads/{queued}/hold")
    assert alice.post(f"/workloads/{queued}/cancel").status_code == 202
    assert alice.workload(queued)["state"] == "cancelled"
    for wid in hogs:
        alice.post(f"/workloads/{wid}/cancel")
        alice.wait(wid, "cancelled")


def test_drain_and_gpu_marks_and_price_survive_a_restart(hub, tmp_path):
    admin = hub.client("root-admin")
    assert admin.request("PATCH", f"/nodes/{hub.node}/gpus/1",
                         json={"in_service": False, "reason": "fan failure"}).status_code == 200
    assert admin.request("PATCH", "/pools/default", json={"price_per_gpu_hour": 2.5}).status_code == 200
    assert admin.request("PATCH", f"/nodes/{hub.node}", json={"drained": True,
                                                              "reason": "maintenance"}).status_code == 200
    held = hub.client("bert").submit(**sleeper(1))["id"]
    hub.client("bert").post(f"/workloads/{held}/hold")
    hub.stop()
    again = Hub(hub.workdir, groups=GROUPS, teams=TEAMS, gpus=4, extra_hub_config=LEAD).start()
    try:
        admin = again.client("root-admin")
        [pool] = admin.get("/pools").json()["pools"]
        [node] = pool["nodes"]
        assert node["drained"] is True
        assert node["devices"][1]["admin_mark"] == "by root-admin: fan failure"
        assert pool["capacity"] == 3
        assert admin.get("/usage").json()["prices"] == {"default": 2.5}
        assert again.client("bert").workload(held)["state"] == "held"
        # drained: a new job waits, and starts once the node is undrained
        wid = again.client("bert").submit(**sleeper(0.5))["id"]
        wait_for(lambda: "waiting" in again.client("bert").workload(wid)["reason"], "a reason")
        admin.request("PATCH", f"/nodes/{node['name']}", json={"drained": False})
        w = again.client("bert").wait(wid, "succeeded")
        assert 1 not in w["attempts"][0]["placement"][0]["devices"]
    finally:
        again.stop()
