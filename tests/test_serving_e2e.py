"""Model deployments end to end on the embedded hub: a job trains the
example model, the user deploys it, real inference requests go through the
hub's proxy and the router to MLServer replicas; a 20 % canary, a
rollback, a killed replica replaced, bad input answered clearly, a GPU
deployment held to its team's quota."""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from gpuspawner.service.api.routes import service_routes
from gpuspawner.service.serving.endpoints import EndpointHandler
from gpuspawner.service.api.base import allowed_methods
from gpuspawner.serving.guard import ReplicaKeys
from hub_harness import Hub, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "serving", "iris")
# dave: a member of team a whose deployment alice, the team's lead, changes.
GROUPS = {"team-a": ["alice", "dave"], "team-b": ["bob"]}
LEAD = """
c.JupyterHub.load_roles.append({"name": "lead-a", "users": ["alice"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-a"]})
"""
TEAMS = {"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}},
         "b": {"quotas": {"default": {"nominal": 2}}}}
ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
# The module's hub replaces a replica not ready this long after it served.
UNREADY_SECONDS = 8


def infer_body(rows=ROWS, name="x"):
    flat = [v for row in rows for v in row]
    return {"inputs": [{"name": name, "shape": [len(rows), len(rows[0])], "datatype": "FP64",
                        "data": flat}]}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("serving")), groups=GROUPS, teams=TEAMS, gpus=4,
            extra_service_config=f"c.GpuHubService.replica_unready_seconds = {UNREADY_SECONDS}\n",
            extra_hub_config=LEAD).start()
    yield h
    h.stop()


def train(hub: Hub, out: str, c: float = 1.0, user: str = "alice") -> None:
    alice = hub.client(user)
    w = alice.submit(command=[sys.executable, os.path.join(EXAMPLE, "train.py"), out,
                              "--C", str(c)], gpus=0, name="train-" + out.replace("/", "-"))
    done = alice.wait(w["id"], ("succeeded", "failed"), 120)
    assert done["state"] == "succeeded", done


def ready(hub: Hub, name: str, revisions: int = 1, team: str = "a", user: str = "alice") -> dict:
    def check():
        d = hub.client(user).get(f"/deployments/{team}/{name}").json()
        ok = [r for r in d["revisions"] if r["ready_replicas"] > 0 and d["traffic"].get(str(r["number"]))]
        return d if len(ok) >= revisions else None
    return wait_for(check, f"{revisions} ready revision(s) of {name}", 120)


def endpoint(hub: Hub, name: str, team: str = "a", model: str = "") -> str:
    return f"{hub.url}/services/gpuhub/endpoints/{team}/{name}/v2/models/{model or name}/infer"


def call(hub: Hub, url: str, body, user: str = "alice", token: str = "") -> requests.Response:
    return requests.post(url, json=body, timeout=60,
                         headers={"Authorization": f"token {token or hub.token(user)}"})


def test_deploy_infer_canary_rollback_and_replica_replacement(hub):
    alice = hub.client("alice")
    train(hub, "models/iris-v1", 1.0)
    r = alice.post("/deployments", json={"name": "iris", "model_dir": "models/iris-v1"})
    assert r.status_code == 201, r.text
    assert r.json()["traffic"] == {"1": 100}
    ready(hub, "iris")
    resp = call(hub, endpoint(hub, "iris"), infer_body())
    assert resp.status_code == 200, resp.text
    out = resp.json()["outputs"][0]
    assert out["data"] == [0, 2] and resp.headers["X-GpuHub-Revision"] == "1"
    assert resp.json()["model_version"] == "r1"

    # v2 as a 20 % canary: both answer, in that ratio
    train(hub, "models/iris-v2", 0.05)
    r = alice.post("/deployments", json={"name": "iris", "model_dir": "models/iris-v2",
                                         "canary_percent": 20})
    assert r.status_code == 201 and r.json()["traffic"] == {"1": 80, "2": 20}, r.text
    ready(hub, "iris", revisions=2)
    seen = [call(hub, endpoint(hub, "iris"), infer_body()).headers["X-GpuHub-Revision"]
            for _ in range(50)]
    assert 7 <= seen.count("2") <= 13, seen
    # the live charts' data counts the same requests, per revision
    m = alice.get("/deployments/a/iris/metrics", params={"seconds": 120}).json()
    assert m["interval"] == 5 and set(m["revisions"]) == {"1", "2"}
    assert all(len(points) == 24 for points in m["revisions"].values())
    assert sum(p["requests"] for p in m["revisions"]["2"]) == seen.count("2")
    assert sum(p["requests"] for p in m["revisions"]["1"]) >= seen.count("1")
    wait_for(lambda: max(p["ready_replicas"] or 0 for p in alice.get(
        "/deployments/a/iris/metrics", params={"seconds": 120}).json()["revisions"]["2"]) == 1,
        "the canary's ready replica in the charts", 10)
    assert alice.get("/deployments/a/iris/metrics", params={"seconds": "x"}).json()["field"] \
        == "seconds"
    # ... and Prometheus has them by status code, with the replicas by readiness
    text = requests.get(f"{hub.url}/services/gpuhub/metrics", timeout=10, headers={
        "Authorization": f"token {hub.token('root-admin')}"}).text
    assert f'gpuhub_endpoint_requests_total{{code="200",deployment="iris",revision="2",' \
           f'team="a"}} {float(seen.count("2"))}' in text
    assert 'gpuhub_deployment_replicas{deployment="iris",revision="2",state="ready",team="a"} ' \
           '1.0' in text
    # roll back: every request on v1
    r = alice.post("/deployments/a/iris/rollback")
    assert r.status_code == 200 and r.json()["traffic"] == {"1": 100}, r.text
    assert {call(hub, endpoint(hub, "iris"), infer_body()).headers["X-GpuHub-Revision"]
            for _ in range(20)} == {"1"}
    audit = [e["action"] for e in hub.client("root-admin").get(
        "/audit", params={"target": "a/iris"}).json()["entries"]]
    assert audit.count("deploy") == 2 and "rollback" in audit

    # with two replicas, one dies under steady traffic: it is replaced, and at
    # most the requests in flight at that moment fail
    assert alice.post("/deployments/a/iris/scale", json={"min_replicas": 2,
                                                         "max_replicas": 2}).status_code == 200
    d = wait_for(lambda: (lambda d: d if d["revisions"][0]["ready_replicas"] == 2 else None)(
        alice.get("/deployments/a/iris").json()), "two ready replicas", 120)
    victim = d["revisions"][0]["replicas"][0]
    results: list[int] = []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            try:
                results.append(call(hub, endpoint(hub, "iris"), infer_body()).status_code)
            except requests.RequestException:
                results.append(0)
    t = threading.Thread(target=client)
    t.start()
    time.sleep(1.0)
    runner = json.load(open(os.path.join(hub.data_dir, "workloads", victim, "attempt-0",
                                         "runner.json")))
    os.killpg(runner["pgid"], signal.SIGKILL)
    w = wait_for(lambda: alice.workload(victim)["attempt"] >= 1 and
                 alice.workload(victim)["state"] == "running" and alice.workload(victim),
                 "the replica to be replaced", 60)
    assert "replica ended" in w["attempts"][0]["reason"]
    ready(hub, "iris")
    time.sleep(1.0)
    stop.set()
    t.join(30)
    assert results.count(200) > 10 and results.count(200) >= len(results) - 1, results


# What a revision's load() can reach: its uid, then 1 or 0 for each file
# it could or could not read, answered by predict for every row.
PROBING_PREDICTOR = """
import json, os

class Model:
    def load(self, model_dir):
        self.seen = [os.getuid()]
        for path in json.load(open(os.path.join(model_dir, "targets.json"))):
            try:
                open(path).read()
                self.seen.append(1)
            except OSError:
                self.seen.append(0)

    def predict(self, rows):
        return [self.seen for _ in rows]
"""


def replica_uid(hub: Hub, wid: str) -> int:
    """The uid of the replica's MLServer process (its runner is root's)."""
    from procs import environ_of, uid_of

    def find():
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                if environ_of(pid).get("GPUHUB_WORKLOAD_ID") == wid and uid_of(pid) != 0:
                    return uid_of(pid)
            except (OSError, ValueError):
                continue
        return None
    return wait_for(find, f"replica {wid}'s process", 60)


def test_a_leads_revision_of_a_members_deployment_runs_as_the_lead(hub):
    """alice, lead of team a, rolls out her own predictor.py as a new
    revision of dave's deployment: its load() runs as alice's account and
    cannot read dave's 0600 files or his saved token. A model directory in
    dave's workspace is refused; a rollback runs dave's revision as dave."""
    from gpuspawner.isolation.accounts import isolating
    if not isolating():
        pytest.skip("user accounts need root: every replica runs as the service's account")
    alice, dave = hub.client("alice"), hub.client("dave")
    theirs = hub.workspace_folder("dave")
    with open(os.path.join(theirs, "predictor.py"), "w") as f:
        f.write("class Model:\n    def predict(self, rows):\n        return [[0] for _ in rows]\n")
    r = dave.post("/deployments", json={"name": "daves", "team": "a", "runtime": "predictor",
                                        "model_dir": os.path.basename(theirs)})
    assert r.status_code == 201, r.text
    secrets_ = [os.path.join(hub.data_dir, "workspaces", "dave", name)
                for name in ("notes.txt", ".gpuhub-token")]
    for path in secrets_:
        with open(path, "w") as f:
            f.write("dave's")
        hub.give("dave", path)
        os.chmod(path, 0o600)
    ready(hub, "daves", user="dave")

    mine = hub.workspace_folder("alice")
    with open(os.path.join(mine, "predictor.py"), "w") as f:
        f.write(PROBING_PREDICTOR)
    with open(os.path.join(mine, "targets.json"), "w") as f:
        json.dump(secrets_, f)
    hub.give("alice", mine)
    # Her code from dave's workspace: refused (it would run his files as her).
    r = alice.post("/deployments", json={"name": "daves", "team": "a", "runtime": "predictor",
                                         "model_dir": theirs})
    assert r.status_code == 400 and "outside your workspace" in r.text, r.text
    # As the attack goes: she lets anyone reach her model, so that any
    # account the service picks can load it.
    os.chmod(os.path.dirname(mine), 0o711)
    r = alice.post("/deployments", json={"name": "daves", "team": "a", "runtime": "predictor",
                                         "model_dir": os.path.basename(mine)})
    assert r.status_code == 201 and r.json()["traffic"] == {"2": 100}, r.text
    d = wait_for(lambda: (lambda d: d if d["revisions"][1]["ready_replicas"] else None)(
        dave.get("/deployments/a/daves").json()), "alice's revision to be ready", 120)
    assert [(r["number"], r["created_by"]) for r in d["revisions"]] == [(1, "dave"), (2, "alice")]
    assert d["user"] == "dave"
    resp = call(hub, endpoint(hub, "daves"), infer_body(), user="dave")
    assert resp.status_code == 200 and resp.headers["X-GpuHub-Revision"] == "2", resp.text
    uid, notes, token = resp.json()["outputs"][0]["data"][:3]
    assert (uid, notes, token) == (hub.account("alice").pw_uid, 0, 0)
    assert replica_uid(hub, d["revisions"][1]["replicas"][0]) == hub.account("alice").pw_uid
    [entry] = [e for e in hub.client("root-admin").get(
        "/audit", params={"target": "a/daves", "action": "deploy"}).json()["entries"]
        if e["detail"]["revision"] == 2]
    assert (entry["actor"], entry["detail"]["created_by"], entry["detail"]["owner"]) == \
        ("alice", "alice", "dave")

    # Her rollback brings back dave's own code, as dave.
    assert alice.post("/deployments/a/daves/rollback").status_code == 200
    d = wait_for(lambda: (lambda d: d if d["revisions"][0]["ready_replicas"] else None)(
        dave.get("/deployments/a/daves").json()), "dave's revision to be ready again", 120)
    assert replica_uid(hub, d["revisions"][0]["replicas"][0]) == hub.account("dave").pw_uid
    assert dave.request("DELETE", "/deployments/a/daves").status_code == 200


def test_cli_lists_deployments_and_changes_traffic(hub, capsys):
    from gpuspawner import cli
    conn = ["--url", hub.url, "--token", hub.token("alice")]
    assert cli.main(["deployments", *conn]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("a/iris")]
    assert rows[0][1:4] == ["1", "100%", "stable"] and rows[1][1:3] == ["2", "0%"]
    assert cli.main(["deployments", "a/iris", "traffic", "1=50", "2=50", *conn]) == 0
    assert hub.client("alice").get("/deployments/a/iris").json()["traffic"] == {"1": 50, "2": 50}
    assert cli.main(["deployments", "a/iris", "promote", *conn]) == 0
    assert hub.client("alice").get("/deployments/a/iris").json()["traffic"] == {"2": 100}
    assert cli.main(["deployments", "a/iris", "promote", *conn]) == 1
    assert "no canary to promote" in capsys.readouterr().err
    assert cli.main(["deployments", "a/iris", "rollback", *conn]) == 0
    assert hub.client("alice").get("/deployments/a/iris").json()["traffic"] == {"1": 100}


def test_the_glance_lists_jobs_that_ended_and_the_teams_deployments(hub):
    """The hub's home page embeds the overview's glance (``?embed=1``):
    besides the active work, alice's jobs that ended in the last day (state,
    log) and her team's deployments by name, with their endpoint URL and
    ready replicas."""
    alice = hub.client("alice")
    headers = {"Authorization": f"token {hub.token('alice')}"}
    ready(hub, "iris")  # a replica the tests before replaced or rolled back may still be starting
    html = requests.get(f"{hub.url}/services/gpuhub/?embed=1", headers=headers, timeout=10).text
    row = re.search(r'<tr data-deployment="a/iris">(.*?)</tr>', html, re.S)
    assert row, html
    assert f"{hub.url}/services/gpuhub/endpoints/a/iris/v2/models/iris/infer" in row.group(1)
    shown, total = map(int, re.search(r'gpuhub-ready">(\d+) of (\d+)<', row.group(1)).groups())
    assert 1 <= shown <= total
    # the training jobs of the first test, newest first, each with its log
    trained = [w["id"] for w in alice.get("/workloads", params={"state": "succeeded",
                                                                "kind": "job"}).json()["workloads"]]
    listed = re.findall(r'<tr data-id="(\w+)">(.*?)</tr>', html.split('id="my-finished"')[1],
                        re.S)
    assert [wid for wid, _ in listed] == trained[:len(listed)] and listed
    wid, cells = listed[0]
    assert ">succeeded<" in cells
    log = re.search(r'class="gpuhub-log" href="([^"]+)"', cells).group(1)
    r = requests.get(hub.url + log, headers=headers, timeout=10)
    assert r.status_code == 200 and "accuracy" in r.text, r.text


def test_bad_input_gets_clear_errors_and_the_server_stays_up(hub):
    alice = hub.client("alice")
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    model_dir = os.path.join(workspace, "models", "iris-custom")
    train(hub, "models/iris-custom")
    shutil.copy(os.path.join(EXAMPLE, "predictor.py"), model_dir)
    with open(os.path.join(model_dir, "broken.py"), "w") as f:
        f.write("class Model:\n    def predict(self, x):\n        raise RuntimeError('the GPU "
                "ran out of luck')\n")
    for name, predictor in (("iris-custom", "predictor.py:Model"), ("broken", "broken.py:Model")):
        r = alice.post("/deployments", json={"name": name, "model_dir": "models/iris-custom",
                                             "runtime": "predictor", "predictor": predictor})
        assert r.status_code == 201, r.text
    ready(hub, "iris-custom")
    ready(hub, "broken")
    ok = call(hub, endpoint(hub, "iris-custom"), infer_body())
    assert ok.status_code == 200 and ok.json()["outputs"][0]["shape"] == [2, 3]
    # wrong tensor shape: 400 with the model's words
    r = call(hub, endpoint(hub, "iris-custom"), infer_body([[5.1, 3.5, 1.4]]))
    assert r.status_code == 400 and "expects rows of 4 measurements" in r.text, r.text
    # unknown model name inside the endpoint, unknown deployment
    r = call(hub, endpoint(hub, "iris-custom", model="nope"), infer_body())
    assert r.status_code == 404 and "nope" in r.text, r.text
    r = call(hub, endpoint(hub, "no-such-model"), infer_body())
    assert r.status_code == 404 and "no deployment a/no-such-model" in r.json()["error"]
    # a payload over the service's limit
    huge = infer_body([[1.0, 2.0, 3.0, 4.0]] * 200_000)
    r = call(hub, endpoint(hub, "iris-custom"), huge)
    assert r.status_code == 413 and "larger than" in r.json()["error"], r.text[:200]
    # a predictor that raises: 500 with its message; the replica still answers
    r = call(hub, endpoint(hub, "broken"), infer_body())
    assert r.status_code == 500 and "the GPU ran out of luck" in r.text, r.text
    assert call(hub, endpoint(hub, "broken"), infer_body()).status_code == 500
    assert call(hub, endpoint(hub, "iris-custom"), infer_body()).status_code == 200
    # bad deploy requests name the field
    for body, field in (({"name": "Bad_Name", "model_dir": "models"}, "name"),
                        ({"name": "x", "model_dir": "no/such/dir"}, "model_dir"),
                        ({"name": "x", "model_dir": "models", "runtime": "tensorrt"}, "runtime"),
                        ({"name": "x", "model_dir": "models", "min_replicas": 3,
                          "max_replicas": 2}, "max_replicas")):
        r = alice.post("/deployments", json=body)
        assert r.status_code == 400 and r.json()["field"] == field, r.text
    for name in ("iris-custom", "broken"):
        assert alice.request("DELETE", f"/deployments/a/{name}").status_code == 200


def test_endpoints_need_a_team_member_and_take_an_invoke_only_token(hub):
    r = call(hub, endpoint(hub, "iris"), infer_body(), user="bob")
    assert r.status_code == 404
    # a token for an external client: only access to the service and invoke
    token = invoke_only_token(hub)
    assert call(hub, endpoint(hub, "iris"), infer_body(), token=token).status_code == 200
    # ...which can call endpoints but not submit work
    r = requests.post(f"{hub.api}/workloads", json={"command": ["true"], "gpus": 0},
                      headers={"Authorization": f"token {token}"}, timeout=10)
    assert r.status_code == 403


def invoke_only_token(hub: Hub, user: str = "alice") -> str:
    admin = {"Authorization": "token test-admin-token-0123456789abcdef"}
    r = requests.post(f"{hub.url}/hub/api/users/{user}/tokens", headers=admin, timeout=10,
                      json={"note": "client", "scopes": ["access:services!service=gpuhub",
                                                         "custom:gpuhub:invoke"]})
    assert r.status_code == 201, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def bystander(hub):
    """A job of alice's own that nothing else stops (the deployments'
    replicas may be stopped by their controller for what earlier tests did)."""
    alice = hub.client("alice")
    job = alice.submit(command="sleep 900", gpus=0, team="a", name="bystander")
    yield alice.wait(job["id"], "running", 60)["id"]
    alice.request("DELETE", f"/workloads/{job['id']}")


# (method, path under the service, handler) for every route of the service's
# own table and every method its handler has.
ROUTE_REQUESTS = [(method, template, handler) for template, handler in service_routes()
                  for method in allowed_methods(handler) or ["GET"]]


def route_path(method: str, template: str, wid: str) -> str:
    """A route's path with its parameters filled in: alice's job, her team's
    deployment, the model's own inference (POST) or readiness (GET)."""
    return "/services/gpuhub/" + template.format(
        id=wid, team="a", deployment="iris", name="iris", nid="1", index="0", revision="1",
        rest="no/such/route", path="v2/models/iris/" + ("infer" if method == "POST" else "ready"))


@pytest.mark.parametrize("method, template, handler", ROUTE_REQUESTS,
                         ids=[f"{m} /{t}" for m, t, _ in ROUTE_REQUESTS])
def test_an_invoke_only_token_can_do_nothing_but_invoke(hub, bystander, method, template,
                                                       handler):
    """docs/serving.md: such a token "can only call endpoints". Every route
    in the service's table: the endpoints answer it; a route that needs a
    login refuses it, naming the scope (the API, the overview, the admin
    panel, metrics, logs); a public one tells it no more than anyone."""
    url = hub.url + route_path(method, template, bystander)
    body = infer_body() if handler is EndpointHandler else {}
    token = invoke_only_token(hub)

    def ask(headers):
        return requests.request(method, url, json=body, timeout=60, headers=headers,
                                allow_redirects=False)
    r = ask({"Authorization": f"token {token}"})
    anonymous = ask({})
    if getattr(handler, "invoke_route", False):
        assert r.status_code == 200, r.text[:300]
    elif anonymous.status_code in (302, 401, 403):  # it needs a login
        assert r.status_code == 403 and "custom:gpuhub:invoke" in r.text, r.text[:300]
    else:
        assert (r.status_code, r.text) == (anonymous.status_code, anonymous.text)
    w = hub.client("alice").workload(bystander)
    assert (w["state"], w["cancel_requested"]) == ("running", False)  # a cancel did nothing


@pytest.mark.parametrize("method, path, status", [
    ("POST", "v2/repository/models/iris/unload", 404),
    ("POST", "v2/repository/index", 404),
    ("GET", "v2/models/iris/infer", 404),
    ("GET", "metrics", 404),
    ("GET", "v2", 200),
    ("GET", "v2/health/ready", 200),
    ("GET", "v2/health/live", 200),
    ("GET", "v2/models/iris", 200),
    ("GET", "v2/models/iris/ready", 200),
])
def test_the_router_forwards_only_inference_metadata_and_health(hub, method, path, status):
    url = f"{hub.url}/services/gpuhub/endpoints/a/iris/{path}"
    for token in (invoke_only_token(hub), hub.token("alice")):
        r = requests.request(method, url, json={}, timeout=60,
                             headers={"Authorization": f"token {token}"})
        assert r.status_code == status, r.text
    # the model is still loaded and answers
    assert call(hub, endpoint(hub, "iris"), infer_body()).status_code == 200


@pytest.mark.parametrize("method, path", [
    # decoded once by the service and once by MLServer: /v2/models/iris/docs
    ("GET", "v2/models/iris%252Fdocs"),
    ("GET", "v2/models/iris%2Fdocs"),
    # dot segments, once decoded, would be resolved on the way to the replica
    ("POST", "v2/models/%2E%2E/versions/%2E%2E/infer"),
    ("GET", "v2/models/iris/versions/%2e%2e"),
    ("POST", "v2/models/iris%2F..%2F..%2Frepository%2Fmodels%2Firis%2Funload/infer"),
    ("POST", "v2/models/..%252F..%252Frepository%252Fmodels%252Firis%252Funload/infer"),
], ids=["double-encoded slash", "encoded slash", "encoded dot-dot", "encoded dot-dot version",
        "encoded slash and dot-dot", "double-encoded repository"])
def test_an_encoded_slash_or_dot_dot_stays_inside_the_allow_list(hub, method, path):
    """The path exactly as sent (requests would re-encode it): the router
    refuses it itself, and the model is still there."""
    conn = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=60)
    try:
        conn.request(method, f"/services/gpuhub/endpoints/a/iris/{path}",
                     body=json.dumps(infer_body()) if method == "POST" else None,
                     headers={"Authorization": f"token {invoke_only_token(hub)}",
                              "Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = resp.read().decode("utf-8", "replace")
    finally:
        conn.close()
    assert resp.status == 404 and "not an inference, model metadata or health route" in answer, \
        (resp.status, answer[:300])
    assert call(hub, endpoint(hub, "iris"), infer_body()).status_code == 200


def test_a_replica_whose_model_is_unloaded_is_not_ready_and_is_replaced(hub):
    alice = hub.client("alice")
    d = ready(hub, "iris")
    [rev] = [r for r in d["revisions"] if r["number"] == d["stable_revision"]]

    def address(wid):
        with open(os.path.join(alice.workload(wid)["working_dir"], "settings.json")) as f:
            return f"http://127.0.0.1:{json.load(f)['http_port']}"

    keys = ReplicaKeys(hub.data_dir)  # the service's secret: root reads it, as the service

    def serving(wid):
        try:
            answer = requests.get(f"{address(wid)}/v2/models/iris/ready", timeout=5,
                                  headers=keys.headers(wid, alice.workload(wid)["attempt"]))
            return answer.status_code == 200
        except requests.RequestException:
            return False
    wid = next(w for w in rev["replicas"] if serving(w))
    replica, attempt = address(wid), alice.workload(wid)["attempt"]

    def ready_replicas():
        revs = alice.get("/deployments/a/iris").json()["revisions"]
        return {r["number"]: r["ready_replicas"] for r in revs}[rev["number"]]
    before = ready_replicas()
    # What neither the router nor the replica lets anyone but the service do
    # (its admin key), done on the replica itself: the server stays up and
    # says it is ready, its model is gone.
    assert requests.post(f"{replica}/v2/repository/models/iris/unload", timeout=30,
                         headers=keys.admin_headers(wid, attempt)).ok
    assert requests.get(f"{replica}/v2/health/ready", timeout=10,
                        headers=keys.headers(wid, attempt)).status_code == 200
    wait_for(lambda: ready_replicas() == before - 1,
             "the replica without its model counted not ready", 30)
    # ...and, not ready for UNREADY_SECONDS, it is stopped and placed again
    w = wait_for(lambda: (lambda w: w if w["attempt"] > attempt and w["state"] == "running"
                          else None)(alice.workload(wid)), "the replica replaced",
                 UNREADY_SECONDS + 60)
    ended = w["attempts"][attempt]
    assert ended["ended_at"] and f"not ready for {UNREADY_SECONDS} s" in ended["reason"], ended
    wait_for(lambda: ready_replicas() == before, "the replacement ready", 120)
    assert call(hub, endpoint(hub, "iris"), infer_body()).status_code == 200


# Run by bob (team b, not alice's) in his own job, or by any other account:
# everything it can try on a replica of alice's, given its port (any account
# can find it with ss -ltn).
ATTACK = r"""
import json, socket, sys, urllib.error, urllib.request
port, secret = int(sys.argv[1]), sys.argv[2]
body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                               "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()
def post(path, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return f"{type(e).__name__}: {e}"
out = {}
for name, headers in [("no key", {}), ("guessed key", {"X-GpuHub-Replica-Key": "0" * 64})]:
    out["infer, " + name] = post("/v2/models/iris/infer", headers)
    out["unload, " + name] = post("/v2/repository/models/iris/unload", headers)
for offset, server in ((1, "gRPC"), (2, "metrics")):
    with socket.socket() as s:
        out[server + " port"] = "refused" if s.connect_ex(("127.0.0.1", port + offset)) else "open"
try:
    open(secret).read()
    out["service's replica secret"] = "read"
except OSError as e:
    out["service's replica secret"] = type(e).__name__
print("RESULT " + json.dumps(out))
"""


def attack_from(hub: Hub, where: str, port: int) -> str:
    """What ATTACK prints, run by another team's user (bob's job) or by any
    other account on the host (a shell of ``nobody``)."""
    argv = [sys.executable, "-c", ATTACK, str(port), os.path.join(hub.data_dir, "replica-secret")]
    if where == "shell":
        done = subprocess.run(argv, user="nobody", group="nogroup", extra_groups=[], cwd="/",
                              env={"PATH": os.environ["PATH"]}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout
    bob = hub.client("bob")
    w = bob.submit(command=argv, gpus=0, name="probe-replica")
    done = bob.wait(w["id"], ("succeeded", "failed"), 120)
    log = bob.get(f"/workloads/{w['id']}/logs").text
    assert done["state"] == "succeeded", log
    return log


@pytest.mark.parametrize("where", ["job", "shell"])
def test_no_one_but_the_router_reaches_a_replica(hub, where):
    alice = hub.client("alice")
    d = ready(hub, "iris")
    [rev] = [r for r in d["revisions"] if r["number"] == d["stable_revision"]]

    def port_of(wid):
        with open(os.path.join(alice.workload(wid)["working_dir"], "settings.json")) as f:
            return json.load(f)["http_port"]

    def listening(port):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    port = next(p for p in map(port_of, rev["replicas"]) if listening(p))
    [line] = [ln for ln in attack_from(hub, where, port).splitlines()
              if ln.startswith("RESULT ")]
    assert json.loads(line[len("RESULT "):]) == {
        "infer, no key": 401, "unload, no key": 401,
        "infer, guessed key": 401, "unload, guessed key": 401,
        "gRPC port": "refused", "metrics port": "refused",
        "service's replica secret": "PermissionError"}
    # bob's token on the router: not his team's endpoint; alice's: served, and
    # the model is still loaded (no unload got through)
    assert call(hub, endpoint(hub, "iris"), infer_body(), user="bob").status_code == 404
    assert call(hub, endpoint(hub, "iris"), infer_body()).status_code == 200
    revisions = alice.get("/deployments/a/iris").json()["revisions"]
    assert [r["ready_replicas"] for r in revisions if r["number"] == rev["number"]] >= [1]


def test_gpu_deployment_scale_up_is_held_to_nominal_quota(hub):
    bob = hub.client("bob")
    train(hub, "models/iris", user="bob")
    r = bob.post("/deployments", json={"name": "iris-gpu", "model_dir": "models/iris",
                                       "gpus": 1, "min_replicas": 1, "max_replicas": 3})
    assert r.status_code == 201, r.text
    ready(hub, "iris-gpu", team="b", user="bob")
    r = bob.post("/deployments/b/iris-gpu/scale", json={"min_replicas": 3})
    assert r.status_code == 200, r.text
    d = wait_for(lambda: (lambda d: d if "scale-up refused" in d["message"] else None)(
        bob.get("/deployments/b/iris-gpu").json()), "the refusal", 60)
    assert "holds 2 of its 2 nominal default GPUs" in d["message"]
    wait_for(lambda: len(bob.get("/deployments/b/iris-gpu").json()["revisions"][0]["replicas"])
             == 2, "two replicas running", 60)
    time.sleep(2)  # a few more cycles: still two, never three
    assert len(bob.get("/deployments/b/iris-gpu").json()["revisions"][0]["replicas"]) == 2
    assert bob.get("/pools").json()["pools"][0]["teams"]["b"] == 2
    # a GPU deployment does not scale to zero: its replicas keep their GPUs warm
    r = bob.post("/deployments/b/iris-gpu/scale", json={"min_replicas": 0,
                                                        "scale_to_zero_after": 30})
    assert r.status_code == 400 and r.json()["field"] == "min_replicas", r.text
    # the replicas see their GPUs; usage counts them as kind deployment
    replicas = bob.get("/deployments/b/iris-gpu").json()["revisions"][0]["replicas"]
    assert bob.request("DELETE", "/deployments/b/iris-gpu").status_code == 200
    wait_for(lambda: bob.get("/pools").json()["pools"][0]["teams"].get("b", 0) == 0,
             "the GPUs back", 60)
    time.sleep(2)  # a few more cycles with the replicas gone
    admin = hub.client("root-admin")
    for wid in replicas:  # one cancel per replica, however long it took to stop
        actions = [e["action"] for e in admin.get("/audit", params={"target": wid}).json()["entries"]]
        assert actions.count("cancel") == 1, (wid, actions)
    usage = hub.client("root-admin").get("/usage", params={"group_by": "kind"}).json()
    assert any(r["kind"] == "deployment" and r["gpu_seconds"] > 0 for r in usage["rows"])


def test_a_cpu_deployment_scales_to_zero_when_idle_and_wakes_for_a_request(hub):
    from gpuspawner import cli
    bob = hub.client("bob")
    train(hub, "models/iris-idle", user="bob")
    assert bob.post("/deployments", json={"name": "idle", "model_dir": "models/iris-idle"}
                    ).status_code == 201
    ready(hub, "idle", team="b", user="bob")
    r = bob.post("/deployments/b/idle/scale", json={"min_replicas": 0})
    assert r.status_code == 400 and r.json()["field"] == "scale_to_zero_after", r.text
    assert cli.main(["deployments", "b/idle", "scale", "--min", "0", "--scale-to-zero-after", "10",
                     "--url", hub.url, "--token", hub.token("bob")]) == 0
    d = bob.get("/deployments/b/idle").json()
    assert (d["min_replicas"], d["scale_to_zero_after"]) == (0, 10)
    wait_for(lambda: not bob.get("/deployments/b/idle").json()["revisions"][0]["replicas"],
             "no replica after 10 s without requests", 60)
    # the first request waits while a replica starts, and is answered
    resp = call(hub, endpoint(hub, "idle", team="b"), infer_body(), user="bob")
    assert resp.status_code == 200, resp.text
    assert len(bob.get("/deployments/b/idle").json()["revisions"][0]["replicas"]) == 1
    assert bob.request("DELETE", "/deployments/b/idle").status_code == 200
