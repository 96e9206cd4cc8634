"""Hostile input against a live hub, on SQLite and on PostgreSQL (issue 16):
every bad request gets a 4xx that names the problem and stores nothing,
paths stay in the user's workspace, the body limit holds for chunked
bodies, and the OpenAPI document agrees with the service."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from xml.etree import ElementTree

import pytest

import requests

from gpuspawner.vocab.errors import SpecError

from conftest import fresh_pg_database
from hub_harness import ADMIN_TOKEN, Hub, wait_for

TEAMS = {"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}},
         "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}}}
GROUPS = {"team-a": ["alice", "root-admin"], "team-b": ["bob"]}


# On a loaded machine the service may take longer than JupyterHub's 30 s to
# answer, and the hub then exits.
SLOW_START = """
for service in c.JupyterHub.services:
    service["timeout"] = 150
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hub(request, tmp_path_factory):
    """One hub per database for this module's tests."""
    with (fresh_pg_database() if request.param == "postgresql"
          else _sqlite()) as db_url:
        h = Hub(str(tmp_path_factory.mktemp(f"hostile-{request.param}")), groups=GROUPS,
                teams=TEAMS, gpus=4, db_url=db_url, extra_hub_config=SLOW_START)
        try:
            yield h.start(timeout=180)
        finally:
            h.stop()


class _sqlite:
    def __enter__(self):
        return ""  # the service's default: SQLite in its data directory

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope="module")
def deployment(hub):
    """A deployment that starts no replica (scaled to zero), for its actions."""
    folder = hub.workspace_folder("alice")
    r = hub.client("alice").post("/deployments", json={
        "name": "m", "model_dir": folder, "gpus": 0, "min_replicas": 0,
        "scale_to_zero_after": 600})
    assert r.status_code == 201, r.text
    # The controller submits the first revision's replica right after (it
    # scales to zero only once idle): let that land before any count.
    admin = hub.client("root-admin")
    wait_for(lambda: admin.get("/workloads", params={"limit": 1000}).json()["workloads"],
             "the deployment's first replica", 60)
    return folder


def latest_audit(hub, n=3) -> list:
    """The newest audit entries, for a failure's message."""
    entries = hub.client("root-admin").get("/audit", params={"limit": 5000}).json()["entries"]
    return sorted(entries, key=lambda e: e["id"])[-n:]


def counts(hub) -> dict:
    """What requests may store. Audit entries by people only: the scheduler
    and the hub's services write theirs in the background (the deployment's,
    the culler's) whenever they act."""
    admin = hub.client("root-admin")
    people = {"root-admin", *(u for members in GROUPS.values() for u in members)}
    entries = admin.get("/audit", params={"limit": 5000}).json()["entries"]
    return {"workloads": len(admin.get("/workloads", params={"limit": 1000}).json()["workloads"]),
            "notices": len(admin.get("/notices").json()["notices"]),
            "schedules": len(admin.get("/schedules").json()["schedules"]),
            "audit": sum(e["actor"] in people for e in entries)}


DEEP = "[" * 100_000 + "]" * 100_000
MODEL = "MODEL"  # stands for the deployment's model directory


@pytest.mark.parametrize("who, method, path, body, status, field", [
    # usage windows that no date can show
    ("alice", "GET", "/usage?from=nan", None, 400, "from"),
    ("alice", "GET", "/usage?from=inf", None, 400, "from"),
    ("alice", "GET", "/usage?from=-inf", None, 400, "from"),
    ("alice", "GET", "/usage?from=1e18", None, 400, "from"),
    ("alice", "GET", "/usage?to=999999999999", None, 400, "to"),
    ("alice", "GET", "/usage?format=AAA", None, 400, "format"),
    ("alice", "GET", "/usage?from=0&series_by=team", None, 400, "series_by"),
    ("alice", "GET", "/workloads?kind=bogus", None, 400, "kind"),
    ("alice", "GET", "/workloads?team=a%00", None, 400, "team"),
    ("alice", "GET", "/workloads?limit=%D9%A1", None, 400, "limit"),
    # traffic keys that are not revision numbers
    ("alice", "POST", "/deployments/a/m/traffic", {"traffic": {"x": 100}}, 400, "traffic"),
    ("alice", "POST", "/deployments/a/m/traffic", {"traffic": {"1.5": 100}}, 400, "traffic"),
    ("alice", "POST", "/deployments/a/m/traffic", {"traffic": {"": 100}}, 400, "traffic"),
    # JSON that is not JSON, or nested past any need
    ("alice", "POST", "/workloads", DEEP, 400, "body"),
    ("alice", "POST", "/workloads", '{"command": "true", "parameters": {"x": NaN}}', 400, "body"),
    ("alice", "POST", "/workloads", '{"notebook": "n.ipynb", "parameters": {"x": 1e999}}', 400,
     "parameters.x"),
    ("root-admin", "POST", "/audit", '{"action": "x", "detail": {"n": NaN}}', 400, "body"),
    ("root-admin", "POST", "/audit", {"action": "x", "detail": {"n": "a\u0000b"}}, 400,
     "detail.n"),
    # lone surrogates: valid JSON escapes, but not text (no database encodes them)
    ("alice", "POST", "/workloads", '{"command": "true", "name": "job\\ud800"}', 400, "name"),
    ("alice", "POST", "/workloads", '{"command": "echo \\udfff"}', 400, "command"),
    ("root-admin", "POST", "/audit", '{"action": "x", "detail": {"n\\udc00": 1}}', 400,
     "detail"),
    # NUL where a path goes
    ("alice", "POST", "/deployments", {"name": "n", "model_dir": "a\u0000b"}, 400, "model_dir"),
    ("alice", "POST", "/workloads", {"command": "true", "working_dir": "a\u0000"}, 400,
     "working_dir"),
    # notices: the database's column sizes, and data that is an object
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k" * 33, "message": "m"}, 400, "kind"),
    ("root-admin", "POST", "/notices", {"user": "u" * 256, "kind": "k", "message": "m"}, 400, "user"),
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k", "message": "m",
                                        "server": "s" * 256}, 400, "server"),
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k", "message": "m", "data": [1]},
     400, "data"),
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k", "message": "m", "data": "x"},
     400, "data"),
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k", "message": "m", "data": 3},
     400, "data"),
    ("root-admin", "POST", "/notices", {"user": "u", "kind": "k", "message": "m",
                                        "expires_at": 1e300}, 400, "expires_at"),
    ("root-admin", "DELETE", "/notices/999999999999", None, 404, None),
    # names and environment variables: no trailing newline
    ("alice", "POST", "/workloads", {"command": "true", "name": "job\n"}, 400, "name"),
    ("alice", "POST", "/workloads", {"command": "true", "env": {"A\n": "x"}}, 400, "env.A\n"),
    # notebooks: not empty, in the workspace, parameters that fit a command line
    ("alice", "POST", "/workloads", {"notebook": "", "gpus": 2}, 400, "notebook"),
    ("alice", "POST", "/workloads", {"notebook": "/etc/passwd"}, 400, "notebook"),
    ("alice", "POST", "/workloads", {"notebook": "../../../../../../etc/passwd"}, 400,
     "notebook"),
    ("alice", "POST", "/workloads", {"notebook": "n.ipynb",
                                     "parameters": {"p": "x" * 200 * 1024}}, 400, "parameters"),
    # schedules: cron and time zone named with the problem; the job checked at creation
    ("alice", "POST", "/schedules", {"name": "n", "cron": "61 * * * *",
                                     "spec": {"command": "true"}}, 400, "cron"),
    ("alice", "POST", "/schedules", {"name": "n", "cron": "@daily", "timezone": "Mars/Base",
                                     "spec": {"command": "true"}}, 400, "timezone"),
    ("alice", "POST", "/schedules", {"name": "n", "cron": "@daily",
                                     "spec": {"command": "true", "pool": "nope"}}, 400, "spec.pool"),
    ("bob", "POST", "/schedules", {"name": "n", "cron": "@daily", "team": "a",
                                   "spec": {"command": "true"}}, 403, "team"),
    ("alice", "PATCH", "/schedules/c0123456789ab", {"cron": "@daily"}, 404, None),
    # a predictor outside its model directory
    ("alice", "POST", "/deployments", {"name": "p", "model_dir": MODEL, "runtime": "predictor",
                                       "predictor": "../../../tmp/x.py:M"}, 400, "predictor"),
    ("alice", "POST", "/deployments", {"name": "p", "model_dir": MODEL, "runtime": "predictor",
                                       "predictor": "/tmp/x.py:M"}, 400, "predictor"),
])
def test_bad_input_names_the_field_and_stores_nothing(hub, deployment, who, method, path, body,
                                                      status, field):
    if isinstance(body, dict) and body.get("model_dir") == MODEL:
        body = {**body, "model_dir": deployment}
    before = counts(hub)
    client = hub.client(who)
    if isinstance(body, str):
        r = client.request(method, path, data=body, headers={"Content-Type": "application/json"})
    else:
        r = client.request(method, path, json=body)
    assert r.status_code == status, r.text[:300]
    err = r.json()
    assert err["status"] == status and err["error"]
    if field:
        assert err["field"] == field, err
    assert counts(hub) == before, latest_audit(hub)


def test_a_notice_at_the_column_limits_is_stored_and_audited(hub):
    """On PostgreSQL the audit entry's target (user/server) is longer than
    its column: it is cut, the notice is stored whole."""
    before = counts(hub)
    r = hub.client("root-admin").post("/notices", json={
        "user": "u" * 255, "server": "s" * 255, "kind": "k" * 32, "message": "m" * 2000})
    assert r.status_code == 201, r.text[:300]
    assert (r.json()["user"], r.json()["server"]) == ("u" * 255, "s" * 255)
    after = counts(hub)
    assert (after["notices"], after["audit"]) == (before["notices"] + 1, before["audit"] + 1)


def test_the_answer_does_not_tell_whether_a_file_outside_exists(hub):
    alice = hub.client("alice")
    folder = hub.workspace_folder("alice")
    os.symlink("/etc/passwd", os.path.join(folder, "link.ipynb"))
    outside = os.path.join(os.path.dirname(hub.data_dir), "secret.ipynb")
    with open(outside, "w") as f:
        f.write("{}")
    answers = {}
    for name, notebook in [("exists outside", outside), ("missing outside", outside + ".nope"),
                           ("link out", "link.ipynb"), ("missing inside", "nope.ipynb"),
                           ("up and out", "../../../../secret.ipynb")]:
        r = alice.post("/workloads", json={"notebook": notebook, "working_dir": folder})
        assert r.status_code == 400 and r.json()["field"] == "notebook", (name, r.text)
        answers[name] = r.json()["error"].replace(repr(notebook), "NAME")
    assert len(set(answers.values())) == 1, answers


def test_a_chunked_body_over_the_limit_is_refused(hub):
    before = counts(hub)
    alice = hub.client("alice")
    payload = json.dumps({"command": "true", "name": "big",
                          "env": {f"V{i}": "x" * 60000 for i in range(40)}}).encode()
    assert len(payload) > 2 * 1024 * 1024

    def chunks():
        for i in range(0, len(payload), 64 * 1024):
            yield payload[i:i + 64 * 1024]
    r = alice.post("/workloads", data=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert "larger than" in r.json()["error"]
    assert counts(hub) == before
    # Under the limit, chunked is fine.
    small = json.dumps({"command": "true", "name": "small-chunked"}).encode()
    r = alice.post("/workloads", data=iter([small[:10], small[10:]]),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text


def test_notebook_server_logs_answer_at_once(hub):
    admin = hub.client("root-admin")
    r = admin.post("/workloads", json={"kind": "notebook", "user": "alice", "team": "a",
                                       "gpus": 0})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    alice = hub.client("alice")
    started = time.monotonic()
    r = alice.get(f"/workloads/{wid}/logs", params={"follow": "true"}, timeout=10)
    assert r.status_code == 409 and "notebook server" in r.json()["error"]
    assert time.monotonic() - started < 5
    assert admin.post(f"/workloads/{wid}/release", json={"reason": "test"}).status_code == 200
    for follow in ("null", "1", "yes"):
        r = alice.get(f"/workloads/{wid}/logs", params={"follow": follow})
        assert r.status_code == 400 and r.json()["field"] == "follow", r.text


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/workloads/a.b", 404),
    ("GET", "/workloads/" + "x" * 33, 404),
    ("GET", "/nodes/x/gpus/99999", 404),
    ("GET", "/no/such/route", 404),
    ("TRACE", "/workloads", 405),
    ("PUT", "/me", 405),
    ("DELETE", "/openapi.json", 405),
])
def test_unknown_paths_and_methods_answer_json(hub, method, path, status):
    r = hub.client("alice").request(method, path)
    assert r.status_code == status, r.text[:300]
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["status"] == status
    if status == 405:
        assert r.headers["Allow"], r.headers


# A fixed seed, and a fixed number of examples per operation in each pass
# (SCHEMATHESIS_PASSES), so that a run is bounded and repeatable. One worker:
# hypothesis' lambda descriptions parse source with ast, which Python 3.11
# does not survive from two threads.
SCHEMATHESIS_SEED = 16
SCHEMATHESIS_TIME_LIMIT = 480
# Who runs it, with how many examples per operation, per database.
# Root-admin reaches every answer, on both. A plain team member and a token
# with only custom:gpuhub:invoke get the role-dependent answers (403s,
# team-limited lists) that admin never sees: a few examples each, on
# PostgreSQL only (the stricter database), keep the module's CI time small.
SCHEMATHESIS_PASSES = {"sqlite": [("root-admin", 8)],
                       "postgresql": [("root-admin", 8), ("alice", 2), ("invoke-only", 1)]}


def role_token(hub, who: str) -> str:
    if who != "invoke-only":
        return hub.token(who)
    r = requests.post(f"{hub.url}/hub/api/users/alice/tokens", timeout=10,
                      headers={"Authorization": f"token {ADMIN_TOKEN}"},
                      json={"note": "schemathesis", "expires_in": 3600,
                            "scopes": ["access:services!service=gpuhub", "custom:gpuhub:invoke"]})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def schemathesis(hub, who: str, examples: int, workdir) -> tuple[bool, str]:
    """One bounded run as ``who``: whether it found nothing, and what it said."""
    cli = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    junit = workdir / "schemathesis.xml"
    started = time.monotonic()
    run = subprocess.run(
        [cli, "--config-file", os.path.join(os.path.dirname(__file__), "schemathesis.toml"),
         "run", f"{hub.api}/openapi.json", "--url", hub.api,
         "--checks", "all", "--max-examples", str(examples),
         "--seed", str(SCHEMATHESIS_SEED), "--workers", "1", "--request-timeout", "30",
         "--suppress-health-check", "all", "--report", "junit",
         "--report-junit-path", str(junit)],
        capture_output=True, text=True, timeout=SCHEMATHESIS_TIME_LIMIT,
        # The token by environment (tests/schemathesis.toml's headers), not
        # in argv, which every local account can read in /proc.
        env=dict(os.environ, GPUHUB_TOKEN=role_token(hub, who)),
        cwd=workdir)  # where it keeps its cache
    seconds = time.monotonic() - started
    out = run.stdout + run.stderr
    suite = ElementTree.parse(junit).getroot()
    generated = re.search(r"(\d+) generated", out)
    print(f"schemathesis ({hub.db_url or 'sqlite'}, {who}, {examples} examples): "
          f"{suite.get('tests')} operations, {generated.group(1) if generated else '?'} cases, "
          f"{seconds:.0f} s, {suite.get('failures')} failing operations")
    return run.returncode == 0 and suite.get("failures") == "0", out


def test_schemathesis_finds_no_failure(hub, deployment, tmp_path):
    """schemathesis with every check on against the live service, once per
    role of SCHEMATHESIS_PASSES (the module's last test: it leaves behind
    whatever it managed to create)."""
    failed = {}
    for who, examples in SCHEMATHESIS_PASSES["postgresql" if hub.db_url else "sqlite"]:
        workdir = tmp_path / who
        workdir.mkdir()
        ok, out = schemathesis(hub, who, examples, workdir)
        if not ok:
            failed[who] = out[-20000:]
    assert not failed, "\n\n".join(f"as {who}:\n{out}" for who, out in failed.items())


@pytest.mark.parametrize("raw, field, says", [
    (b'{"name": "a\\ud800"}', "name", "a lone surrogate (\\ud800, not half of a pair)"),
    (b'{"env": {"A": "\\udc00b"}}', "env.A", "a lone surrogate (\\udc00"),
    (b'{"env": {"\\udbff": "b"}}', "env", "must not have a key with a lone surrogate"),
    (b'[["x", "\\ud83d"]]', "body[0][1]", "lone surrogate"),
    (b'{"command": "a\\u0000b"}', "command", "must not contain NUL characters"),
])
def test_a_request_body_with_what_no_database_stores_is_refused(raw, field, says):
    """What ``json.loads`` accepts but no database stores as text is a 400
    that names the field, not a 500 at the commit."""
    from gpuspawner.service.api.base import parse_json_body
    with pytest.raises(SpecError) as e:
        parse_json_body(raw)
    assert e.value.field == field and says in str(e.value), str(e.value)


def test_a_request_body_with_whole_surrogate_pairs_is_text():
    from gpuspawner.service.api.base import parse_json_body
    assert parse_json_body(b'{"name": "\\ud83d\\ude00 \\u00e9"}') == {"name": "\U0001f600 \u00e9"}


@pytest.mark.parametrize("value", [
    {"workloads": [{"id": "w1", "gpus": 0.25, "env": {"A": "ü ✓"}, "after": []}], "next": None},
    {1: "a GPU index as a key", 2.5: "b"},
    {"name": "a lone surrogate \ud800 from a JSON escape"},
    {"bytes": 2 ** 70},
    [True, False, None, -0.0, 1e300, "é"],
])
def test_a_response_body_reads_back_as_the_json_module_writes_it(value):
    """Response bodies are written by orjson, falling back to the json
    module for what only it writes: a client reads the same either way."""
    from gpuspawner.service.api.base import encode_json
    assert json.loads(encode_json(value)) == json.loads(json.dumps(value))
