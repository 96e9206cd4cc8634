"""The scheduler service end to end: a real JupyterHub, its proxy, the
service as a hub-managed service, and real job processes on fake GPUs."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys

import nbformat
import pytest
import requests
from openapi_spec_validator import validate
from tornado.web import RequestHandler

from gpuspawner import cli
from gpuspawner.bench import service_metrics
from gpuspawner.service.api.routes import API_ROUTES

from hub_harness import Hub, fake_uuid, wait_for
from jobs import CHECKPOINTING, read_trace

TEAMS = {"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}},
         "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}}}
GROUPS = {"team-a": ["alice", "amy"], "team-b": ["bob"]}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("hub")), groups=GROUPS, teams=TEAMS, gpus=4,
            gpu_uuids=True)
    try:
        yield h.start()
    finally:
        h.stop()


def ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def train(steps: int, step_s: float) -> list[str]:
    return [sys.executable, "-c", CHECKPOINTING, str(steps), str(step_s)]


def test_borrowing_reclaim_requeue_and_usage_ledger(hub, capsys):
    alice, bob = hub.client("alice"), hub.client("bob")
    jobs = [alice.submit(command=train(40, 0.1), gpus=1, name=f"a{i}") for i in range(5)]
    ids = [j["id"] for j in jobs]

    def states():
        return [alice.workload(i)["state"] for i in ids]
    # Team a holds its nominal 2 and borrows b's idle 2; the fifth waits.
    wait_for(lambda: states().count("running") == 4, "4 of a's jobs running", 30)
    queued = [alice.workload(i) for i in ids if alice.workload(i)["state"] == "queued"]
    assert len(queued) == 1 and queued[0]["reason"]
    running = [alice.workload(i) for i in ids if alice.workload(i)["state"] == "running"]
    assert sum(w["attempts"][-1]["borrowed"] for w in running) == 2

    # The lender wants its quota back: one borrowed job of a is reclaimed.
    b_job = bob.submit(command=train(5, 0.1), gpus=1)
    b_done = bob.wait(b_job["id"], ("succeeded", "failed"), 60)
    assert b_done["state"] == "succeeded", b_done
    finished = [alice.wait(i, ("succeeded", "failed"), 90) for i in ids]
    assert [w["state"] for w in finished] == ["succeeded"] * 5
    victims = [w for w in finished if w["attempt"] > 0]
    assert len(victims) == 1, [w["attempts"] for w in finished]
    victim = victims[0]
    assert [a["state"] for a in victim["attempts"]] == ["preempted", "succeeded"]
    types = [e["type"] for e in alice.get(f"/workloads/{victim['id']}/events").json()["events"]]
    assert types.index("preempted") < types.index("requeued") < types.index("finished")
    assert types.count("admitted") == 2
    # The preemption is in the audit log, saying for whom.
    [entry] = hub.client("root-admin").get("/audit", params={"action": "preempt",
                                                             "target": victim["id"]}).json()["entries"]
    assert entry["actor"] == "scheduler" and entry["detail"]["preemptor"] == b_job["id"]
    # The second attempt resumed from the checkpoint the first one wrote.
    trace = read_trace(os.path.join(victim["checkpoint_dir"], "trace"))
    stop = [t for t in trace if t[0] == "stop"][0]
    second = [t for t in trace if t[0] == "start" and t[1] == 1][0]
    assert second[3] == stop[3] > 0
    log = alice.get(f"/workloads/{victim['id']}/logs", params={"attempt": 0}).text
    assert "checkpointed at step" in log
    # ... and from the CLI, which says where the earlier attempt is
    argv = ["--url", hub.url, "--token", hub.token("alice"), victim["id"]]
    assert cli.main(["logs", "--attempt", "0", *argv]) == 0
    assert "checkpointed at step" in capsys.readouterr().out
    assert cli.main(["logs", *argv]) == 0
    out, err = capsys.readouterr()
    assert "attempt 1 on GPUs" in out and "checkpointed at step" not in out
    assert f"is on attempt 1 (succeeded); its earlier attempts' output: gpuhub logs " \
           f"{victim['id']} --attempt 0" in err

    # The usage ledger adds up: every attempt's GPUs x wall time, per team.
    expected: dict[str, float] = {}
    for w in finished + [b_done]:
        for a in w["attempts"]:
            expected[w["team"]] = expected.get(w["team"], 0) + a["gpus"] * (
                ts(a["ended_at"]) - ts(a["started_at"]))
    admin = hub.client("root-admin")
    usage = admin.get("/usage", params={"group_by": "team"}).json()
    got = {r["team"]: r["gpu_seconds"] for r in usage["rows"]}
    for team, seconds in expected.items():
        assert got[team] == pytest.approx(seconds, abs=0.05)
    borrowed = {r["team"]: r["borrowed_gpu_seconds"] for r in usage["rows"]}
    assert borrowed["a"] > 0 and borrowed["b"] == 0
    pools = alice.get("/pools").json()["pools"]
    assert pools[0]["free"] == 4 and pools[0]["used"] == 0


def test_the_detailed_list_is_each_workloads_own_record(hub):
    """``detail=1`` answers in one call what a GET per workload would."""
    alice = hub.client("alice")
    holder = alice.submit(command=train(300, 0.1), gpus=4, name="holder")["id"]
    alice.wait(holder, "running", 30)
    waiting = [alice.submit(command=train(5, 0.1), gpus=1, name=f"w{i}")["id"] for i in range(2)]
    try:
        # once the scheduler has said why they wait (a cycle may change it between two reads)
        wait_for(lambda: all(alice.workload(w)["reason"] != "queued" for w in waiting),
                 "the scheduler's reasons", 30)
        listed = {w["id"]: w for w in alice.get("/workloads", params={
            "detail": 1, "user": "alice", "state": ["queued", "running"]}).json()["workloads"]}
        for wid in [holder] + waiting:
            assert listed[wid] == alice.workload(wid)
        assert [listed[w]["queue_position"] for w in waiting] == [1, 2]
        assert listed[holder]["attempts"][0]["state"] == "running"
        assert "attempts" not in alice.get("/workloads").json()["workloads"][0]
        r = alice.get("/workloads", params={"detail": "yes"})
        assert r.status_code == 400 and r.json()["field"] == "detail"
    finally:
        for wid in [holder] + waiting:
            alice.request("DELETE", f"/workloads/{wid}")
        for wid in [holder] + waiting:
            alice.wait(wid, "cancelled", 30)


def test_another_teams_workload_is_invisible(hub):
    alice, amy, bob = hub.client("alice"), hub.client("amy"), hub.client("bob")
    job = alice.submit(command=train(200, 0.1), gpus=1)
    wid = job["id"]
    for path in (f"/workloads/{wid}", f"/workloads/{wid}/events", f"/workloads/{wid}/logs"):
        r = bob.get(path)
        assert r.status_code == 404, (path, r.text)
    assert bob.request("DELETE", f"/workloads/{wid}").status_code == 404
    assert bob.post(f"/workloads/{wid}/cancel").status_code == 404
    assert wid not in [w["id"] for w in bob.get("/workloads").json()["workloads"]]
    assert wid not in [w["id"] for w in bob.get("/workloads", params={"team": "a"}).json()["workloads"]]
    # A teammate sees it but may not cancel it; the owner may.
    assert amy.get(f"/workloads/{wid}").status_code == 200
    r = amy.request("DELETE", f"/workloads/{wid}")
    assert r.status_code == 403 and "alice" in r.json()["error"]
    assert alice.workload(wid)["state"] in ("queued", "running")
    assert alice.request("DELETE", f"/workloads/{wid}").status_code == 202
    assert alice.wait(wid, "cancelled", 30)["cancel_requested"]
    # Quotas: read by members, changed by admins only.
    r = bob.request("PUT", "/teams/a", json={"quotas": {"default": {"nominal": 4}}})
    assert r.status_code == 403
    assert alice.get("/teams/a").json()["quotas"]["default"]["nominal"] == 2
    assert bob.get("/teams/a").status_code == 404
    admin = hub.client("root-admin")
    r = admin.request("PUT", "/teams/b", json={"quotas": {"default": {"nominal": 2, "borrowing_limit": 1}}})
    assert r.status_code == 200, r.text
    assert r.json()["quotas"]["default"]["borrowing_limit"] == 1
    r = admin.request("PUT", "/teams/b", json={"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}})
    assert r.status_code == 200


HUGE = "x" * (2 * 1024 * 1024)


@pytest.mark.parametrize("body, status, field", [
    ("{not json", 400, "body"),
    ('["a list"]', 400, "body"),
    ({"command": "true", "pool": "tpu-v9"}, 400, "pool"),
    ({"command": "true", "gpus": -1}, 400, "gpus"),
    ({"command": "true", "gpus": 5}, 400, "gpus"),
    ({"command": "true", "gpus": "two"}, 400, "gpus"),
    ({"command": "true", "time_limit": 10 ** 12}, 400, "time_limit"),
    ({"command": "true", "time_limit": "forever"}, 400, "time_limit"),
    ({"command": "true", "time_limit": -5}, 400, "time_limit"),
    ({"command": "true", "nodes": 2}, 400, "nodes"),
    ({"command": "true", "priority": "urgent"}, 400, "priority"),
    ({"command": "true", "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}, 400, "env.CUDA_VISIBLE_DEVICES"),
    ({"command": "true", "env": {"LD_PRELOAD": "/tmp/x.so"}}, 400, "env.LD_PRELOAD"),
    ({"command": "true", "team": "b"}, 403, "team"),
    ({"command": "true", "gpu": 1}, 400, "gpu"),
    ({"gpus": 1}, 400, "command"),
    ({"command": "true", "working_dir": "no/such/dir"}, 400, "working_dir"),
    ({"command": "true", "working_dir": "/etc"}, 400, "working_dir"),
    ({"command": "true", "working_dir": "../../.."}, 400, "working_dir"),
    ({"command": "true", "checkpoint_dir": "/tmp/elsewhere"}, 400, "checkpoint_dir"),
    ({"command": HUGE}, 413, None),
])
def test_bad_input_is_refused_and_nothing_is_stored(hub, body, status, field):
    alice = hub.client("alice")
    admin = hub.client("root-admin")
    def alices_jobs():  # not the replicas other tests' deployments may add meanwhile
        return len([w for w in admin.get("/workloads", params={"limit": 1000}).json()["workloads"]
                    if w["kind"] == "job" and w["user"] == "alice"])
    before = alices_jobs()
    if isinstance(body, str):
        r = alice.post("/workloads", data=body, headers={"Content-Type": "application/json"})
    else:
        r = alice.post("/workloads", json=body)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["status"] == status and err["error"]
    if field:
        assert err["field"] == field and field.split(".")[0] in err["error"]
    assert alices_jobs() == before


def test_unauthenticated_and_unknown_routes(hub):
    r = requests.get(f"{hub.api}/workloads", timeout=10)
    assert r.status_code in (401, 403)
    r = requests.get(f"{hub.api}/workloads", headers={"Authorization": "token nonsense"}, timeout=10)
    assert r.status_code in (401, 403)
    alice = hub.client("alice")
    assert alice.get("/workloads/does-not-exist").status_code == 404
    # The service's own page (Services → gpuhub): after login, where the API is.
    page = requests.get(f"{hub.url}/services/gpuhub/", timeout=10,
                        headers={"Authorization": f"token {hub.token('alice')}"})
    assert page.status_code == 200 and "api/v1/openapi.json" in page.text
    assert alice.get("/workloads", params={"state": "sleeping"}).json()["field"] == "state"


def test_openapi_document_matches_the_routes(hub):
    doc = requests.get(f"{hub.api}/openapi.json", timeout=10).json()
    validate(doc)
    assert set(doc["paths"]) == {path for path, _ in API_ROUTES}
    for path, handler in API_ROUTES:
        served = {m for m in ("get", "post", "put", "patch", "delete")
                  if getattr(handler, m) is not getattr(RequestHandler, m)}
        assert set(doc["paths"][path]) - {"parameters"} == served, path


def test_logs_follow_streams_until_the_job_ends(hub):
    alice = hub.client("alice")
    job = alice.submit(command=[sys.executable, "-c",
                                "import time\nfor i in range(5):\n print('line', i, flush=True); time.sleep(0.2)"],
                       gpus=0)
    r = alice.session.get(f"{hub.api}/workloads/{job['id']}/logs", params={"follow": "true"},
                          stream=True, timeout=60)
    assert r.headers["Content-Type"].startswith("text/event-stream")
    text, end = "", None
    event = None
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if event == "log":
                text += data["text"]
            elif event == "end":
                end = data
                break
    assert [f"line {i}" for i in range(5)] == [l for l in text.splitlines() if l.startswith("line")]
    assert end == {"attempt_state": "succeeded"}


def test_a_job_is_shown_its_gpus_by_uuid_and_told_their_host_indices(hub):
    """Under a device cgroup CUDA numbers only the GPUs a job may open: the
    job's CUDA_VISIBLE_DEVICES names them by the UUIDs the inventory knows,
    GPUHUB_GPU_INDICES says which host GPUs they are, as the API does."""
    alice = hub.client("alice")
    code = ("import os, time\n"
            "print(*(os.environ[k] for k in ('CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES',"
            " 'GPUHUB_GPU_INDICES')), flush=True)\n"
            "while not os.path.exists(os.path.join(os.environ['GPUHUB_ATTEMPT_DIR'], 'go')):\n"
            "    time.sleep(0.1)\n")
    job = alice.submit(command=[sys.executable, "-c", code], gpus=2)
    running = alice.wait(job["id"], "running", 60)
    log = wait_for(lambda: alice.get(f"/workloads/{job['id']}/logs").text, "its output")
    cuda, nvidia, indices = log.split()
    devices = [int(i) for i in indices.split(",")]
    assert len(devices) == 2 and cuda == nvidia == ",".join(fake_uuid(i) for i in devices)
    assert running["devices"] == devices
    assert running["device_uuids"] == [fake_uuid(i) for i in devices]
    open(os.path.join(hub.data_dir, "workloads", job["id"], "attempt-0", "go"), "w").close()
    assert alice.wait(job["id"], ("succeeded", "failed"), 60)["state"] == "succeeded"


def test_notebook_job_runs_with_parameters(hub):
    alice = hub.client("alice")
    nb = nbformat.v4.new_notebook(metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("epochs = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import os\nprint('trained', epochs, 'epochs on GPUs',"
                                          " os.environ['CUDA_VISIBLE_DEVICES'])")]
    workspace = os.path.join(hub.data_dir, "workspaces", "alice", "nbs")
    os.makedirs(workspace, exist_ok=True)
    nbformat.write(nb, os.path.join(workspace, "train.ipynb"))
    job = alice.submit(notebook="train.ipynb", working_dir="nbs", parameters={"epochs": 3},
                       gpus=1)
    done = alice.wait(job["id"], ("succeeded", "failed"), 120)
    log = alice.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "succeeded", log
    out = nbformat.read(done["output_notebook"], as_version=4)
    printed = "".join(o.get("text", "") for c in out.cells if c.cell_type == "code"
                      for o in c.get("outputs", []))
    assert "trained 3 epochs on GPUs" in printed
    assert json.dumps(done["parameters"]) == '{"epochs": 3}'
    # the log has the cells' output and none of the kernel's TCP warnings
    assert "trained 3 epochs on GPUs" in log and "Executing Cell 2" in log
    assert "without encryption" not in log and "IPKernelApp" not in log, log

    # a cell that raises: the job fails, its log says where and why
    nb.cells.append(nbformat.v4.new_code_cell("raise ValueError('bad batch size')"))
    nbformat.write(nb, os.path.join(workspace, "broken.ipynb"))
    job = alice.submit(notebook="broken.ipynb", working_dir="nbs", gpus=0)
    done = alice.wait(job["id"], ("succeeded", "failed"), 120)
    log = alice.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "failed" and done["exit_code"] == 1, done
    assert "ValueError: bad batch size" in log and "without encryption" not in log, log


def test_notices_audit_and_gpus(hub, tmp_path):
    alice, bob, admin = hub.client("alice"), hub.client("bob"), hub.client("root-admin")
    r = alice.post("/notices", json={"user": "alice", "kind": "x", "message": "hi"})
    assert r.status_code == 403
    r = admin.post("/notices", json={"user": "alice", "server": "", "kind": "cull-warning",
                                     "message": "your server will be stopped at 12:00"})
    assert r.status_code == 201, r.text
    nid = r.json()["id"]
    assert [n["message"] for n in alice.get("/notices").json()["notices"]] == [
        "your server will be stopped at 12:00"]
    assert bob.get("/notices").json()["notices"] == []
    assert bob.get("/notices", params={"user": "alice"}).json()["notices"] == []
    assert admin.post("/notices", json={"user": "alice", "kind": "x"}).json()["field"] == "message"
    assert admin.request("DELETE", f"/notices/{nid}").status_code == 200
    assert alice.get("/notices").json()["notices"] == []

    assert alice.get("/audit").status_code == 403
    assert alice.post("/audit", json={"action": "cull"}).status_code == 403
    r = admin.post("/audit", json={"action": "cull", "target": "alice/", "detail": {"idle_s": 7200}})
    assert r.status_code == 201
    entries = admin.get("/audit", params={"action": "cull"}).json()["entries"]
    assert entries[0]["detail"] == {"idle_s": 7200} and entries[0]["actor"] == "root-admin"
    notices = admin.get("/audit", params={"action": "notice"}).json()["entries"]
    assert notices[0]["target"] == "alice/" and notices[0]["detail"]["kind"] == "cull-warning"

    job = alice.submit(command=train(300, 0.1), gpus=1)
    alice.wait(job["id"], "running", 30)
    assert alice.get("/gpus").status_code == 403
    gpus = admin.get("/gpus").json()["gpus"]
    assert len(gpus) == 4 and all(g["utilization_pct"] == 0.0 for g in gpus)
    held = [g for g in gpus if g["workload"]]
    assert [(g["workload"]["id"], g["workload"]["user"]) for g in held] == [(job["id"], "alice")]
    alice.request("DELETE", f"/workloads/{job['id']}")
    alice.wait(job["id"], "cancelled", 30)


def test_prometheus_metrics(hub):
    url = f"{hub.url}/services/gpuhub/metrics"
    alice = {"Authorization": f"token {hub.token('alice')}"}
    admin = {"Authorization": f"token {hub.token('root-admin')}"}
    assert requests.get(url, headers=alice, timeout=10).status_code == 403
    client = hub.client("alice")
    job = client.submit(command=train(300, 0.1), gpus=2)
    client.wait(job["id"], "running", 30)
    text = requests.get(url, headers=admin, timeout=10).text
    assert 'gpuhub_pool_gpus{pool="default"} 4.0' in text
    assert 'gpuhub_team_gpus{pool="default",team="a"} 2.0' in text
    assert 'gpuhub_pool_free_gpus{pool="default"} 2.0' in text
    assert int(float(re.search(r"^gpuhub_cycle_seconds_count (\S+)", text, re.M).group(1))) > 0
    assert re.search(r'^gpuhub_scheduler_events_total\{type="admitted"\} [1-9]', text, re.M)
    # the event loop's stalls, and the full garbage collections that are one cause of them
    assert re.search(r"^gpuhub_event_loop_lag_seconds_count [1-9]", text, re.M)
    assert re.search(r"^gpuhub_gc_full_pause_seconds_count \d", text, re.M)
    # ... and their time by cause, in the words the benchmark reads
    scraped = service_metrics.parse(text)
    assert all(f"{service_metrics.STALL_CAUSES}:{cause}" in scraped
               for cause in service_metrics.CAUSE_WORDS)
    # the submits the intake stored (the job above, at least), and in how many transactions
    rows = scraped[service_metrics.INTAKE_ROWS].total
    assert 1 <= scraped[service_metrics.INTAKE_BATCHES].total <= rows
    # the reasons and estimates, remade at the first cycle at least, and the times they gave way
    assert scraped[service_metrics.REASONS_DONE].total >= 1
    assert service_metrics.REASONS_GAVE_WAY in scraped
    client.request("DELETE", f"/workloads/{job['id']}")
    client.wait(job["id"], "cancelled", 30)
    hub.client("root-admin").post("/audit", json={"action": "cull", "target": "x"})
    text = requests.get(url, headers=admin, timeout=10).text
    assert re.search(r'^gpuhub_attempts_ended_total\{kind="job",outcome="cancelled"\} [1-9]',
                     text, re.M)
    assert re.search(r'^gpuhub_queue_wait_seconds_count\{kind="job",team="a"\} [1-9]', text, re.M)
    assert re.search(r"^gpuhub_culls_total [1-9]", text, re.M)


def test_grafana_dashboard_uses_only_exported_metrics(hub):
    """Every metric the shipped dashboard queries is one the service exports."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "grafana", "gpuhub-dashboard.json")) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set(re.findall(r"\b(gpuhub_[a-z_]+)", " ".join(exprs)))
    text = requests.get(f"{hub.url}/services/gpuhub/metrics", timeout=10,
                        headers={"Authorization": f"token {hub.token('root-admin')}"}).text
    exported = set(re.findall(r"^# TYPE (gpuhub_[a-z_]+) (\w+)", text, re.M))
    names = {name for name, _ in exported}
    names |= {f"{n}_total" for n, kind in exported if kind == "counter"}
    names |= {f"{n}_{s}" for n, kind in exported if kind == "histogram"
              for s in ("bucket", "sum", "count")}
    assert used and used <= names, used - names


# The service's token cache (GpuHubService.token_cache_seconds, 5 by default)
# plus a request's round trip: how long a revoked token may still work.
REVOCATION_SECONDS = 8


@pytest.mark.parametrize("revoke", ["delete the user", "revoke the token"])
def test_revocation_reaches_the_service_within_seconds(hub, revoke):
    import time

    from hub_harness import ADMIN_TOKEN, Client
    admin = {"Authorization": f"token {ADMIN_TOKEN}"}
    user = "leaver-" + ("user" if revoke == "delete the user" else "token")
    assert requests.post(f"{hub.url}/hub/api/users/{user}", headers=admin,
                         timeout=10).status_code == 201
    requests.post(f"{hub.url}/hub/api/groups/team-a/users", headers=admin,
                  json={"users": [user]}, timeout=10).raise_for_status()
    r = requests.post(f"{hub.url}/hub/api/users/{user}/tokens", headers=admin,
                      json={"note": "revoked by the test"}, timeout=10)
    token = r.json()
    client = Client(hub.api, token["token"])
    assert client.get("/workloads").status_code == 200  # the token is now in the cache
    if revoke == "delete the user":
        r = requests.delete(f"{hub.url}/hub/api/users/{user}", headers=admin, timeout=10)
    else:
        r = requests.delete(f"{hub.url}/hub/api/users/{user}/tokens/{token['id']}",
                            headers=admin, timeout=10)
    assert r.status_code == 204, r.text
    revoked_at = time.monotonic()
    while True:
        r = client.get("/workloads")
        if r.status_code != 200:
            break
        assert time.monotonic() - revoked_at < REVOCATION_SECONDS, \
            f"the token still works {REVOCATION_SECONDS}s after the hub forgot it"
        time.sleep(0.2)
    assert r.status_code == 401 and "authentication required" in r.json()["error"]
    # Writes are refused just the same, and nothing is stored.
    r = client.post("/workloads", json={"command": ["true"], "gpus": 0})
    assert r.status_code == 401
    print(f"{revoke}: the service refused the token {time.monotonic() - revoked_at:.1f}s later")
