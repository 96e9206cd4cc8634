"""A job's own token and a workload's secrets, on a real hub (issue 29, items
4 and 5).

- A job's token (``GPUHUB_TOKEN``) may submit follow-ups in its team, up to
  the limits, and read its own workload; every other route answers 403
  saying why (service/access/job_scope.py). Tried with a token made as the service
  makes them (its note names the attempt), and from inside a real job with
  the token it was given.
- ``env`` values are the owner's (and admins', audited): a team-mate sees
  the names only (service/workloads/env_access.py).
"""
from __future__ import annotations

import html
import json
import os
import sys

import pytest
import requests

from gpuspawner.hub.config import JOB_TOKEN_SCOPES
from gpuspawner.service.api.routes import API_ROUTES
from gpuspawner.service.api.base import allowed_methods
from gpuspawner.service.access.job_scope import ALLOWED

from hub_harness import ADMIN_TOKEN, Client, Hub

SECRET = "wandb-secret-of-alice-0123456789"
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]
REFUSED = "a job's token may not"
# Small enough that every job of the module runs at once on a 2-core host.
SMALL = {"cpus": 0.1, "memory": "256M"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("jobscope")),
            groups={"team-a": ["alice", "bob"], "team-b": ["carol"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}},
                   "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}},
            extra_service_config="c.GpuHubService.job_token_max_follow_ups = 2\n"
                                 "c.GpuHubService.job_token_max_pipeline = 3\n")
    try:
        yield h.start()
    finally:
        h.stop()


@pytest.fixture(scope="module")
def world(hub):
    """alice's job (with a secret in its env) and another of hers, bob's job."""
    alice, bob = hub.client("alice"), hub.client("bob")
    job = alice.submit(command=SLEEP, gpus=0, name="pipeline",
                       env={"WANDB_API_KEY": SECRET, "EPOCHS": "3"}, **SMALL)
    other = alice.submit(command=SLEEP, gpus=0, name="other", **SMALL)
    bobs = bob.submit(command=SLEEP, gpus=0, name="bobs", **SMALL)
    for w in (job, other, bobs):
        hub.client("root-admin").wait(w["id"], "running", 60)
    yield {"job": job["id"], "other": other["id"], "bobs": bobs["id"]}
    for w in (job, other):
        alice.post(f"/workloads/{w['id']}/cancel")
    bob.post(f"/workloads/{bobs['id']}/cancel")


def job_token(hub: Hub, user: str, wid: str, attempt: int = 0) -> str:
    """A token as JobTokens makes one for an attempt (its scopes, its note)."""
    r = requests.post(f"{hub.url}/hub/api/users/{user}/tokens", timeout=10,
                      headers={"Authorization": f"token {ADMIN_TOKEN}"},
                      json={"scopes": JOB_TOKEN_SCOPES, "expires_in": 3600,
                            "note": f"gpuhub job {wid} attempt {attempt}"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


DEPLOYMENT = {"name": "iris", "model_dir": "iris"}
SCHEDULE = {"name": "nightly", "cron": "0 3 * * *", "paused": True,
            "spec": {"command": ["true"], "gpus": 0}}

# (method, path, body, status for the job's token). {job}: its own workload;
# {other}: another of its user's; {bobs}: a team-mate's.
ROUTES = [
    ("GET", "/me", None, 200),
    ("GET", "/workloads/{job}", None, 200),
    ("GET", "/workloads/{job}/events", None, 200),
    ("GET", "/workloads/{job}/logs", None, 200),
    ("GET", "/workloads/{other}", None, 403),
    ("GET", "/workloads/{other}/logs", None, 403),
    ("GET", "/workloads/{bobs}", None, 403),
    ("GET", "/workloads/{bobs}/logs", None, 403),
    ("GET", "/workloads/{bobs}/events", None, 403),
    ("GET", "/workloads", None, 403),
    ("POST", "/workloads/{other}/cancel", None, 403),
    ("DELETE", "/workloads/{other}", None, 403),
    ("POST", "/workloads/{bobs}/cancel", None, 403),
    ("POST", "/workloads/{job}/cancel", None, 403),
    ("POST", "/workloads/{other}/hold", None, 403),
    ("POST", "/workloads/{other}/priority", {"priority": "high"}, 403),
    ("POST", "/deployments", DEPLOYMENT, 403),
    ("GET", "/deployments", None, 403),
    ("DELETE", "/deployments/a/iris", None, 403),
    ("POST", "/deployments/a/iris/scale", {"replicas": 2}, 403),
    ("POST", "/deployments/a/iris/rollback", {}, 403),
    ("POST", "/schedules", SCHEDULE, 403),
    ("GET", "/schedules", None, 403),
    ("PATCH", "/schedules/c123", {"paused": True}, 403),
    ("DELETE", "/schedules/c123", None, 403),
    ("POST", "/schedules/c123/run", None, 403),
    ("POST", "/sweeps", {"template": {"command": ["true"]}, "grid": {"x": [1]}}, 403),
    ("POST", "/sweeps/s123/cancel", None, 403),
    ("GET", "/teams", None, 403),
    ("PUT", "/teams/a", {"weight": 5}, 403),
    ("GET", "/usage", None, 403),
    ("GET", "/audit", None, 403),
    ("GET", "/gpus", None, 403),
    ("POST", "/notices", {"user": "bob", "kind": "info", "message": "hi"}, 403),
    ("POST", "/whatif", {"set": {}}, 403),
    ("GET", "/pools", None, 403),
    ("GET", "/history/trace", None, 403),
]
OUTSIDE_API = [("GET", "/metrics"), ("GET", "/admin/"), ("GET", "/admin/queue"),
               ("GET", "/endpoints/a/iris/v2/models/iris")]


def test_the_table_allows_only_routes_that_exist():
    """A misspelt route in job_scope.ALLOWED would refuse what a job needs."""
    served = {(m, path) for path, handler in API_ROUTES for m in allowed_methods(handler)}
    assert set(ALLOWED) <= served, set(ALLOWED) - served


@pytest.mark.parametrize("method,path,body,status", ROUTES,
                         ids=[f"{m} {p}" for m, p, _b, _s in ROUTES])
def test_a_jobs_token_uses_only_the_routes_a_job_needs(hub, world, method, path, body, status):
    token = job_token(hub, "alice", world["job"])
    url = path.format(**world)
    r = Client(hub.api, token).request(method, url, json=body)
    assert r.status_code == status, r.text
    if status == 403:
        assert r.json()["error"].startswith(REFUSED), r.text
    if status == 403 and method == "GET":
        # What the job's token could read before: alice's own token reads
        # it (the writes are not tried with hers: they would act).
        mine = Client(hub.api, hub.token("alice")).request(method, url, json=body)
        assert REFUSED not in mine.text, mine.text


@pytest.mark.parametrize("method,path", OUTSIDE_API)
def test_a_jobs_token_opens_no_page_endpoint_or_metrics(hub, world, method, path):
    h = {"Authorization": f"token {job_token(hub, 'alice', world['job'])}"}
    r = requests.request(method, f"{hub.url}/services/gpuhub{path}", headers=h, timeout=30,
                         allow_redirects=False)
    assert r.status_code == 403, (r.status_code, r.text[:300])
    assert REFUSED in html.unescape(r.text), r.text[:300]  # the pages' is HTML


def test_a_jobs_token_submits_follow_ups_in_its_team_up_to_the_limits(hub, world):
    job = Client(hub.api, job_token(hub, "alice", world["job"]))
    r = job.post("/workloads", json={"command": ["true"], "gpus": 0, "team": "b"})
    assert r.status_code == 403 and "its own team (a)" in r.json()["error"], r.text
    first, second = (job.submit(command=["true"], gpus=0, name=f"step{i}") for i in (1, 2))
    assert first["team"] == second["team"] == "a" and first["user"] == "alice"
    # It reads what it submitted (a pipeline waits for its next step).
    assert job.get(f"/workloads/{first['id']}").status_code == 200
    r = job.post("/workloads", json={"command": ["true"], "gpus": 0})
    assert r.status_code == 403, r.text
    assert "more than 2 follow-ups per attempt" in r.json()["error"]
    # Counted in the database per attempt: the next attempt starts afresh.
    again = Client(hub.api, job_token(hub, "alice", world["job"], attempt=1))
    assert again.post("/workloads", json={"command": ["true"], "gpus": 0}).status_code == 201
    # A follow-up's own token counts against the pipeline (3 in all here).
    step = Client(hub.api, job_token(hub, "alice", first["id"]))
    r = step.post("/workloads", json={"command": ["true"], "gpus": 0})
    assert r.status_code == 403 and "in one pipeline" in r.json()["error"], r.text


def test_a_jobs_token_reads_what_its_job_waits_for(hub, world):
    """A pipeline's evaluation reads the sweep it waited for
    (docs/workflows.md); another job's token does not."""
    alice = hub.client("alice")
    r = alice.post("/sweeps", json={"template": {"command": ["true"], "gpus": 0},
                                    "grid": {"x": [1]}})
    assert r.status_code == 201, r.text
    sweep = r.json()["id"]
    evaluate = alice.submit(command=["true"], gpus=0, after=[{"id": sweep}])
    waiter = Client(hub.api, job_token(hub, "alice", evaluate["id"]))
    assert waiter.get(f"/sweeps/{sweep}").status_code == 200
    assert waiter.get(f"/workloads/{world['other']}").status_code == 403
    r = Client(hub.api, job_token(hub, "alice", world["job"])).get(f"/sweeps/{sweep}")
    assert r.status_code == 403 and r.json()["error"].startswith(REFUSED), r.text


IN_JOB = r'''
import json, os, urllib.request, urllib.error
url, token = os.environ["GPUHUB_URL"].rstrip("/") + "/api/v1", os.environ["GPUHUB_TOKEN"]
targets = json.load(open("targets.json"))
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "token " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}").get("error", "")
me = os.environ["GPUHUB_WORKLOAD_ID"]
out = {
    "read own": call("GET", "/workloads/" + me),
    "read own log": call("GET", "/workloads/" + me + "/logs"),
    "follow-up": call("POST", "/workloads", {"command": ["true"], "gpus": 0}),
    "cancel another": call("POST", "/workloads/%s/cancel" % targets["other"]),
    "read bob's log": call("GET", "/workloads/%s/logs" % targets["bobs"]),
    "read bob's env": call("GET", "/workloads/%s" % targets["bobs"]),
    "deploy": call("POST", "/deployments", {"name": "x", "model_dir": "x"}),
    "schedule": call("POST", "/schedules", {"name": "x", "cron": "0 3 * * *",
                                            "spec": {"command": ["true"]}}),
}
def page(path):
    req = urllib.request.Request(os.environ["GPUHUB_URL"].rstrip("/") + path,
                                 headers={"Authorization": "token " + token})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
out["admin page"] = page("/admin/")
print("RESULT" + json.dumps(out) + "END", flush=True)
'''


def test_from_inside_a_job_its_token_is_held_to_the_job(hub, world):
    alice = hub.client("alice")
    folder = hub.workspace_folder("alice")
    for name, text in (("probe.py", IN_JOB), ("targets.json", json.dumps(world))):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    hub.give("alice", folder)
    w = alice.submit(command=[sys.executable, "probe.py"], gpus=0, name="probe",
                     working_dir=os.path.basename(folder), **SMALL)
    done = alice.wait(w["id"], ("succeeded", "failed"), 90)
    log = alice.get(f"/workloads/{w['id']}/logs").text
    assert done["state"] == "succeeded", log
    got = json.loads(log.split("RESULT", 1)[1].split("END", 1)[0])
    assert {k: v[0] for k, v in got.items()} == {
        "read own": 200, "read own log": 200, "follow-up": 201, "cancel another": 403,
        "read bob's log": 403, "read bob's env": 403, "deploy": 403, "schedule": 403,
        "admin page": 403}, got
    assert all(REFUSED in html.unescape(v[1]) for v in got.values() if v[0] == 403), got
    assert alice.workload(world["other"])["state"] == "running"


@pytest.mark.parametrize("forged", [
    "gpuhub-job-",                                              # the prefix alone
    "gpuhub-job-" + "A" * 43,                                   # its shape, never made
    "gpuhub-job-" + "x" * 5000,                                 # long
    "gpuhub-job-%00%ff../../admin",                             # odd characters
])
@pytest.mark.parametrize("where", ["header", "query"])
def test_a_forged_job_token_is_refused_by_name(hub, forged, where):
    """A token of the service's own shape that it did not make: 401 with
    the reason in the header, and no page. In the URL no token is taken at
    all (the hub's rule): 401, or 400 naming a NUL."""
    if where == "header":
        r = requests.get(f"{hub.api}/me", headers={"Authorization": f"token {forged}"},
                         timeout=10)
        assert r.status_code == 401, r.text
        assert "a job's token ends with its attempt" in r.json()["error"]
    else:
        r = requests.get(f"{hub.api}/me?token={forged}", timeout=10)
        assert r.status_code == (400 if "%00" in forged else 401), r.text
        assert r.json()["error"]
    page = requests.get(f"{hub.url}/services/gpuhub/admin/",
                        headers={"Authorization": f"token {forged}"}, timeout=10,
                        allow_redirects=False)
    assert page.status_code == 403


def test_a_team_mate_sees_the_names_of_alices_env_never_its_values(hub, world):
    alice, bob, admin = hub.client("alice"), hub.client("bob"), hub.client("root-admin")
    wid = world["job"]
    assert alice.workload(wid)["env"]["WANDB_API_KEY"] == SECRET
    assert alice.workload(wid)["env_redacted"] is False
    seen = bob.workload(wid)
    assert seen["env"] == {"WANDB_API_KEY": "•••", "EPOCHS": "•••"} and seen["env_redacted"]
    sched = alice.post("/schedules", json={**SCHEDULE, "spec": {
        "command": ["true"], "gpus": 0, "env": {"WANDB_API_KEY": SECRET}}})
    assert sched.status_code == 201, sched.text
    for path, params in (("/workloads", {}), ("/workloads", {"detail": "1"}),
                         (f"/workloads/{wid}", {}), (f"/workloads/{wid}/events", {}),
                         ("/schedules", {})):
        r = bob.get(path, params=params)
        assert r.status_code == 200 and SECRET not in r.text, (path, params)
    listed = {w["id"]: w for w in bob.get("/workloads").json()["workloads"]}
    assert listed[wid]["env"] == {"WANDB_API_KEY": "•••", "EPOCHS": "•••"}
    [s] = [s for s in bob.get("/schedules").json()["schedules"] if s["id"] == sched.json()["id"]]
    assert s["spec"]["env"] == {"WANDB_API_KEY": "•••"}
    # Logs stay the team's (docs/service.md, Trust model).
    assert bob.get(f"/workloads/{wid}/logs").status_code == 200
    # An admin reads the values of one workload, and each read is in the
    # audit log; a list (the panels poll it) shows the names only.
    before = admin.get("/audit", params={"action": "read-env"}).json()["entries"]
    listed = {w["id"]: w for w in admin.get("/workloads").json()["workloads"]}
    assert listed[wid]["env_redacted"] and SECRET not in json.dumps(listed)
    assert admin.workload(wid)["env"]["WANDB_API_KEY"] == SECRET
    after = admin.get("/audit", params={"action": "read-env"}).json()["entries"]
    new = [e for e in after if e["id"] not in {b["id"] for b in before}]
    assert [(e["actor"], e["target"], e["detail"]) for e in new] == [
        ("root-admin", wid, {"owner": "alice", "names": ["EPOCHS", "WANDB_API_KEY"]})], new
    alice.request("DELETE", f"/schedules/{sched.json()['id']}")
