"""The lab extension's sweeps and schedules handlers (gpuhub_lab) in a real
Jupyter server against a real JupyterHub + scheduler service with four fake
GPUs, as tests/test_lab_server.py does for jobs: the Sweep tab's form
becomes a sweep over the notebook's parameters whose tasks' output
notebooks and metrics come back in the server's files, a script's grid
becomes its arguments, cancel-all and retry pass through, a schedule is
made, paused, resumed, run now, edited and deleted, and bad forms — the
extension's and the service's refusals — come back naming the field."""
from __future__ import annotations

import asyncio
import json
import os

import nbformat
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from notebooks import write_notebook
from test_lab_server import (call, error, files, hub, jp_root_dir,  # noqa: F401 (fixtures)
                             jp_server_config, wait_state)

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# The metric as scrapbook's glue writes it (no scrapbook needed in the job).
GLUE = """\
from IPython.display import display
loss = round(abs(lr - 0.01) * 100 + epochs, 6)
display({"application/scrapbook.scrap.json+json":
         {"name": "loss", "data": loss, "encoder": "json", "version": 1}},
        metadata={"scrapbook": {"name": "loss", "data": True, "display": False}}, raw=True)
print(f"lr={lr} epochs={epochs} loss={loss}")
"""


@pytest.fixture
def sweep_files(files, hub):
    write_notebook(files / "project" / "tune.ipynb", "lr = 0.1\nepochs = 1\nmodel = 'mlp'", GLUE)
    (files / "project" / "fail.sh").write_text('echo "lr=$GPUHUB_PARAM_LR"; exit 3\n')
    # A spawned server makes the output folders as alice; this one runs in
    # the test's (root) process, so they are made hers beforehand.
    for folder in ("runs/sweep", "runs/nightly"):
        os.makedirs(files / folder)
    hub.give("alice", str(files))
    return files


async def body_of(jp_fetch, *path, **kw):
    return json.loads((await call(jp_fetch, *path, **kw)).body)


async def wait_sweep(jp_fetch, sid: str, timeout: float = 180) -> dict:
    for _ in range(int(timeout / 0.5)):
        sweep = await body_of(jp_fetch, "sweeps", sid)
        if sweep["state"] != "running":
            return sweep
        await asyncio.sleep(0.5)
    raise AssertionError(f"sweep {sid} still running: {sweep['counts']}")


async def test_the_sweep_editor_reads_the_parameters_cell_with_types(jp_fetch, sweep_files):
    found = (await body_of(jp_fetch, "parameters", path="project/tune.ipynb"))["parameters"]
    assert [(p["name"], p["default"], p["type"]) for p in found] == [
        ("lr", "0.1", "float"), ("epochs", "1", "int"), ("model", "'mlp'", "str")]


async def test_a_notebook_sweep_runs_its_grid_and_shows_each_tasks_metric_and_notebook(
        jp_fetch, sweep_files, hub):
    r = await call(jp_fetch, "sweeps", method="POST", body={
        "path": "project/tune.ipynb", "gpus": 1, "parameters": {"model": "cnn"},
        "output_dir": "runs/sweep",
        "grid": {"lr": [0.1, 0.01], "epochs": [1, 2]}, "max_running": 2,
        "metric": {"name": "loss", "goal": "min"}})
    assert r.code == 201
    sweep = json.loads(r.body)
    assert sweep["total"] == 4 and sweep["max_running"] == 2 and sweep["user"] == "alice"
    assert sweep["name"] == "tune"
    # Every task is a workload of alice's with the grid's point merged into
    # the form's parameters, run in the notebook's folder.
    tasks = {t["index"]: t for t in (await body_of(jp_fetch, "sweeps", sweep["id"]))["tasks"]}
    stored = hub.client("alice").workload(tasks[3]["workload_id"])
    assert stored["parameters"] == {"model": "cnn", "lr": 0.01, "epochs": 2}
    assert stored["working_dir"] == str(sweep_files / "project")
    assert stored["sweep_id"] == sweep["id"] and stored["sweep_index"] == 3

    done = await wait_sweep(jp_fetch, sweep["id"])
    assert done["state"] == "succeeded", done["tasks"]
    assert done["counts"]["succeeded"] == 4
    by_index = {t["index"]: t for t in done["tasks"]}
    assert {i: t["metric"] for i, t in by_index.items()} == {0: 10.0, 1: 11.0, 2: 1.0, 3: 2.0}
    assert done["best"]["index"] == 2 and done["best"]["parameters"] == {"lr": 0.01, "epochs": 1}
    # Each task's executed notebook is its own, in the server's files.
    paths = [t["output_path"] for t in done["tasks"]]
    assert all(paths) and len(set(paths)) == 4, paths
    executed = nbformat.read(str(sweep_files / by_index[2]["output_path"]), as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "lr=0.01 epochs=1 loss=1.0" in printed

    # The list (mine) has it, without its tasks; the jobs' list has no task
    # of it (a sweep of thousands would push every other job off the list).
    listed = (await body_of(jp_fetch, "sweeps", scope="mine"))["sweeps"]
    assert [s["id"] for s in listed if s["id"] == sweep["id"]] == [sweep["id"]]
    assert "tasks" not in listed[0]
    jobs = (await body_of(jp_fetch, "workloads", scope="mine"))["workloads"]
    assert not [w for w in jobs if w["sweep_id"]], jobs
    alice = hub.client("alice")
    tasks_of = alice.get("/workloads", params={"sweep_id": sweep["id"]}).json()["workloads"]
    assert sorted(w["sweep_index"] for w in tasks_of) == [0, 1, 2, 3]
    others = alice.get("/workloads", params={"sweep_id": "none"}).json()["workloads"]
    assert not [w for w in others if w["sweep_id"]]


async def test_a_script_sweep_gets_its_grid_as_arguments_and_can_be_retried(
        jp_fetch, sweep_files, hub):
    sweep = await body_of(jp_fetch, "sweeps", method="POST", body={
        "path": "project/fail.sh", "gpus": 0, "grid": {"lr": [0.5, 0.25]}})
    tasks = (await body_of(jp_fetch, "sweeps", sweep["id"]))["tasks"]
    commands = sorted(hub.client("alice").workload(t["workload_id"])["command"] for t in tasks)
    assert commands == [["bash", "fail.sh", "--lr=0.25"], ["bash", "fail.sh", "--lr=0.5"]]
    # A job of the form that runs if the sweep fails waits for it, holding nothing.
    (sweep_files / "report.sh").write_text("echo reporting\n")
    report = await body_of(jp_fetch, "workloads", method="POST", body={
        "path": "report.sh", "gpus": 1, "output_dir": "runs/nightly",
        "after": [{"id": sweep["id"], "condition": "failed"}]})
    assert report["after"] == [{"id": sweep["id"], "condition": "failed"}]
    assert report["state"] == "waiting" and sweep["id"] in report["reason"]
    failed = await wait_sweep(jp_fetch, sweep["id"])
    assert failed["state"] == "failed" and failed["counts"]["failed"] == 2
    ran = await wait_state(jp_fetch, report["id"], ("succeeded", "failed", "cancelled"))
    assert ran["state"] == "succeeded", ran["reason"]
    before = {t["index"]: t["workload_id"] for t in failed["tasks"]}

    r = await call(jp_fetch, "sweeps", sweep["id"], "retry", method="POST", body={})
    assert r.code == 202
    retried = json.loads(r.body)
    assert all(t["workload_id"] != before[t["index"]] for t in retried["tasks"])
    await wait_sweep(jp_fetch, sweep["id"])


async def test_cancel_all_ends_every_task_and_nothing_is_left_to_retry_twice(
        jp_fetch, sweep_files):
    (sweep_files / "slow.sh").write_text("sleep 60\n")
    sweep = await body_of(jp_fetch, "sweeps", method="POST", body={
        "path": "slow.sh", "gpus": 1, "grid": {"n": [1, 2, 3]}, "max_running": 1})
    r = await call(jp_fetch, "sweeps", sweep["id"], "cancel", method="POST", body={})
    assert r.code == 202
    cancelled = await wait_sweep(jp_fetch, sweep["id"], timeout=60)
    assert cancelled["state"] == "cancelled"
    assert cancelled["counts"]["cancelled"] == 3, cancelled["counts"]
    code, body = await error(jp_fetch, "sweeps", "s000000000000", "retry", method="POST",
                             body={})
    assert code == 404 and body["error"], body
    code, body = await error(jp_fetch, "sweeps", sweep["id"], "explode", method="POST", body={})
    assert code == 404 and "known: cancel, retry" in body["error"]


async def test_a_schedule_is_made_paused_resumed_run_now_edited_and_deleted(
        jp_fetch, sweep_files, hub):
    r = await call(jp_fetch, "schedules", method="POST", body={
        "path": "project/tune.ipynb", "gpus": 0, "schedule_name": "nightly-tune",
        "cron": "30 2 * * *", "timezone": "Europe/Paris", "parameters": {"lr": 0.5},
        "output_dir": "runs/nightly"})
    assert r.code == 201
    made = json.loads(r.body)
    assert made["name"] == "nightly-tune" and made["cron"] == "30 2 * * *"
    assert made["timezone"] == "Europe/Paris" and not made["paused"]
    assert made["next_run_at"] and made["source_path"] == "project/tune.ipynb"
    assert made["spec"]["parameters"] == {"lr": 0.5}
    cid = made["id"]
    listed = (await body_of(jp_fetch, "schedules"))["schedules"]
    assert cid in [s["id"] for s in listed]

    paused = await body_of(jp_fetch, "schedules", cid, "pause", method="POST", body={})
    assert paused["paused"] and paused["next_run_at"] is None
    resumed = await body_of(jp_fetch, "schedules", cid, "resume", method="POST", body={})
    assert not resumed["paused"] and resumed["next_run_at"]

    r = await call(jp_fetch, "schedules", cid, "run", method="POST", body={})
    assert r.code == 201
    job = json.loads(r.body)
    assert job["source_path"] == "project/tune.ipynb" and job["schedule_id"] == cid
    assert job["parameters"] == {"lr": 0.5}
    done = await wait_state(jp_fetch, job["id"], ("succeeded", "failed"))
    if done["state"] != "succeeded":
        print((await call(jp_fetch, "workloads", job["id"], "logs")).body.decode())
    assert done["state"] == "succeeded", done["reason"]
    again = await body_of(jp_fetch, "schedules", cid)
    assert again["last_workload_id"] == job["id"]
    assert again["recent"][0]["workload_id"] == job["id"]

    edited = await body_of(jp_fetch, "schedules", cid, method="PATCH", body={"cron": "@hourly"})
    assert edited["cron"] == "@hourly"
    r = await call(jp_fetch, "schedules", cid, method="DELETE")
    assert r.code == 204
    code, _ = await error(jp_fetch, "schedules", cid)
    assert code == 404
    # The job it made stays.
    assert hub.client("alice").workload(job["id"])["id"] == job["id"]


SWEEP = {"path": "project/tune.ipynb", "gpus": 1, "grid": {"lr": [0.1]}}
SCHEDULE = {"path": "project/tune.ipynb", "gpus": 0, "cron": "0 9 * * 1-5"}


@pytest.mark.parametrize("what, form, status, field, words", [
    # the extension's own checks
    ("sweeps", {**SWEEP, "grid": None}, 400, "grid", "at least one parameter"),
    ("sweeps", {**SWEEP, "grid": {"lr": []}}, 400, "grid", "lr: give a list"),
    ("sweeps", {**SWEEP, "grid": {"2x": [1]}}, 400, "grid", "not a parameter name"),
    ("sweeps", {**SWEEP, "max_running": 0}, 400, "max_running", "at least 1"),
    ("sweeps", {**SWEEP, "metric": {"name": "loss", "goal": "up"}}, 400, "metric", "max or min"),
    ("sweeps", {**SWEEP, "after": [{"id": "w1", "condition": "maybe"}]}, 400, "after",
     "condition must be one of ok, any, failed"),
    ("sweeps", {**SWEEP, "path": "../x.ipynb"}, 400, "path", "outside this server's files"),
    ("schedules", {**SCHEDULE, "cron": ""}, 400, "cron", "is required"),
    ("schedules", {**SCHEDULE, "catch_up": "twice"}, 400, "catch_up", "once or skip"),
    # the service's, passed through with its field
    ("sweeps", {**SWEEP, "after": [{"id": "w0123456789ab"}]}, 400, "after[0].id",
     "w0123456789ab"),
    ("sweeps", {**SWEEP, "gpus": 65}, 400, "template.gpus_per_node", ""),
    ("schedules", {**SCHEDULE, "cron": "61 * * * *"}, 400, "cron", ""),
    ("schedules", {**SCHEDULE, "timezone": "Mars/Olympus"}, 400, "timezone", "Mars/Olympus"),
    ("schedules", {**SCHEDULE, "team": "b"}, 403, "team", "not a member"),
])
async def test_bad_sweeps_and_schedules_are_refused_with_the_field_and_nothing_is_made(
        jp_fetch, sweep_files, hub, what, form, status, field, words):
    alice = hub.client("alice")
    before = (len(alice.get("/workloads").json()["workloads"]),
              len(alice.get(f"/{what}").json()[what]))
    code, body = await error(jp_fetch, what, method="POST", body=form)
    assert code == status and body.get("field") == field and words in body["error"], body
    after = (len(alice.get("/workloads").json()["workloads"]),
             len(alice.get(f"/{what}").json()[what]))
    assert after == before


@pytest.mark.parametrize("method, path", [
    ("GET", "sweeps"), ("POST", "sweeps"), ("GET", "sweeps/s1"), ("POST", "sweeps/s1/cancel"),
    ("GET", "schedules"), ("POST", "schedules"), ("PATCH", "schedules/c1"),
    ("DELETE", "schedules/c1"), ("POST", "schedules/c1/run"),
])
async def test_every_workflow_verb_needs_the_servers_login(jp_fetch, jp_base_url,
                                                            http_server_port, method, path):
    url = f"http://127.0.0.1:{http_server_port[-1]}{jp_base_url}gpuhub/{path}"
    with pytest.raises(HTTPClientError) as e:
        await AsyncHTTPClient().fetch(url, method=method,
                                      body="{}" if method in ("POST", "PATCH") else None)
    assert e.value.code == 403
