"""The lab extension's server side (gpuhub_lab) in a real Jupyter server
(pytest-jupyter's jp_fetch) against a real JupyterHub + scheduler service
with four fake GPUs: what the front end sends becomes the right job, the
job's files land in the server's tree, logs stream through, and errors —
the form's and the service's — come back with their messages and fields."""
from __future__ import annotations

import asyncio
import io
import json
import os
import pathlib
import re
import zipfile

import nbformat
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_harness import Hub
from notebooks import write_notebook

pytest_plugins = ["pytest_jupyter.jupyter_server"]

SCRIPT = """\
import argparse, os
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--tag")
a = p.parse_args()
print(f"lr={a.lr} tag={a.tag} gpus={os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
open(os.path.join(os.environ["OUTPUT_DIR"], "model.bin"), "w").write("weights")
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("labhub")), groups={"team-a": ["alice", "amy"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}},
            # The Jupyter server under test runs in this (root) process, so the folders its
            # extension makes in alice's workspace are root's: only the hand-over at an
            # account's first use gives them to her, and team spaces would make the
            # accounts at the service's start.
            extra_service_config="c.GpuHubService.team_spaces = False\n")
    try:
        yield h.start()
    finally:
        h.stop()


@pytest.fixture
def jp_root_dir(hub):
    """The notebook server's files are in alice's workspace, as a spawned server's are."""
    return pathlib.Path(hub.workspace_folder("alice"))


@pytest.fixture
def jp_server_config(hub):
    return {"ServerApp": {"jpserver_extensions": {"gpuhub_lab": True}},
            "GpuHubLab": {"service_url": f"{hub.url}/services/gpuhub",
                          "token": hub.token("alice")}}


@pytest.fixture
def files(jp_root_dir, hub):
    write_notebook(jp_root_dir / "project" / "train.ipynb", "epochs = 1\nname = 'base'",
                   'print(f"{name}: {epochs} epochs")')
    (jp_root_dir / "project" / "train.py").write_text(SCRIPT)
    hub.give("alice", str(jp_root_dir))  # hers, as her own server would have made them
    return jp_root_dir


async def call(jp_fetch, *path, method="GET", body=None, **params):
    kw = {"method": method, "params": params}
    if body is not None:
        kw["body"] = json.dumps(body)
    r = await jp_fetch("gpuhub", *path, **kw)
    return r


async def error(jp_fetch, *path, **kw) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *path, **kw)
    return e.value.code, json.loads(e.value.response.body)


async def wait_state(jp_fetch, wid: str, states, timeout: float = 60) -> dict:
    for _ in range(int(timeout / 0.3)):
        w = json.loads((await call(jp_fetch, "workloads", wid)).body)
        if w["state"] in states:
            return w
        await asyncio.sleep(0.3)
    raise AssertionError(f"{wid} is {w['state']} ({w['reason']}), not {states}")


async def test_a_notebook_job_runs_with_its_parameters_and_its_output_lands_in_the_tree(
        jp_fetch, files, hub):
    r = await call(jp_fetch, "workloads", method="POST", body={
        "path": "project/train.ipynb", "gpus": 2, "parameters": {"epochs": 3, "name": "big"},
        "env": {"WANDB_MODE": "offline"}, "time_limit": "10m", "priority": "batch"})
    assert r.code == 201
    job = json.loads(r.body)
    assert job["name"] == "train" and job["gpus"] == 2 and job["user"] == "alice"
    assert job["source_path"] == "project/train.ipynb"
    # What the service stored: the notebook in its folder, papermill parameters,
    # the output notebook and $OUTPUT_DIR inside the server's files.
    stored = hub.client("alice").workload(job["id"])
    assert stored["working_dir"] == str(files / "project")
    assert stored["notebook"] == "train.ipynb"
    assert stored["parameters"] == {"epochs": 3, "name": "big"}
    assert stored["time_limit"] == 600
    assert stored["env"]["WANDB_MODE"] == "offline"
    out_dir = stored["env"]["OUTPUT_DIR"]
    assert out_dir.startswith(str(files / "outputs" / "train-")) and os.path.isdir(out_dir)

    done = await wait_state(jp_fetch, job["id"], ("succeeded", "failed"))
    assert done["state"] == "succeeded", done["reason"]
    out = files / done["output_path"]
    assert done["output_path"].startswith("outputs/train-") and out.is_file()
    executed = nbformat.read(str(out), as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "big: 3 epochs" in printed

    # The list (my jobs) shows the same paths for the finished job.
    page = json.loads((await call(jp_fetch, "workloads", scope="mine")).body)
    listed = page["workloads"]
    assert [w["output_path"] for w in listed if w["id"] == job["id"]] == [done["output_path"]]
    assert page["next_cursor"] is None  # one page: fewer jobs than a page holds


async def test_a_script_job_gets_its_parameters_as_arguments_and_its_outputs_zip(
        jp_fetch, files, hub):
    # A spawned server makes the output folder as alice; this one runs in
    # the test's (root) process, so the folder is made hers beforehand.
    os.makedirs(files / "runs" / "lr")
    hub.give("alice", str(files))
    r = await call(jp_fetch, "workloads", method="POST", body={
        "path": "project/train.py", "gpus": 1, "name": "tune-lr",
        "parameters": {"lr": 0.1, "tag": "first"}, "output_dir": "runs/lr"})
    job = json.loads(r.body)
    assert job["command"] == ["python", "train.py", "--lr=0.1", "--tag=first"]
    # Resubmitting reads the arguments back as parameters.
    assert job["parameters"] == {"lr": 0.1, "tag": "first"}
    assert job["output_dir_path"] == "runs/lr"
    done = await wait_state(jp_fetch, job["id"], ("succeeded", "failed"))
    assert done["state"] == "succeeded", done["reason"]
    # model.bin is no model a runtime loads: nothing to deploy
    assert done["model_path"] is None

    text = (await call(jp_fetch, "workloads", job["id"], "logs")).body.decode()
    assert "lr=0.1 tag=first gpus=" in text

    r = await call(jp_fetch, "workloads", job["id"], "outputs")
    assert r.headers["Content-Type"] == "application/zip"
    assert 'filename="tune-lr-outputs.zip"' in r.headers["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(r.body))
    assert archive.namelist() == ["runs/lr/model.bin"]
    assert archive.read("runs/lr/model.bin") == b"weights"


async def test_the_log_stream_follows_a_running_job_to_its_end(jp_fetch, files,
                                                               jp_base_url, jp_auth_header,
                                                               http_server_port):
    (files / "slow.sh").write_text("for i in 1 2 3; do echo step $i; sleep 1; done\n")
    job = json.loads((await call(jp_fetch, "workloads", method="POST",
                                 body={"path": "slow.sh", "gpus": 1})).body)
    assert job["command"] == ["bash", "slow.sh"]
    await wait_state(jp_fetch, job["id"], ("running", "succeeded"))
    chunks: list[bytes] = []
    url = (f"http://127.0.0.1:{http_server_port[-1]}{jp_base_url}gpuhub/workloads/"
           f"{job['id']}/logs?follow=true&attempt=0")
    r = await AsyncHTTPClient().fetch(url, headers=jp_auth_header, request_timeout=60,
                                      streaming_callback=chunks.append)
    assert r.headers["Content-Type"] == "text/event-stream"
    stream = b"".join(chunks).decode()
    events = [block for block in stream.split("\n\n") if block.strip()]
    texts = "".join(json.loads(e.split("data: ", 1)[1])["text"]
                    for e in events if "event: log" in e)
    assert "step 1\nstep 2\nstep 3\n" in texts
    assert events[-1].startswith("event: end")
    assert json.loads(events[-1].split("data: ", 1)[1]) == {"attempt_state": "succeeded"}


async def test_closing_a_followed_log_is_quiet(jp_fetch, files, jp_base_url, jp_auth_header,
                                               http_server_port, caplog):
    """A browser tab closed while it follows a log: no uncaught exception, no
    5xx in the server's log, and the server keeps serving."""
    (files / "chatty.sh").write_text("for i in $(seq 60); do echo tick $i; sleep 0.2; done\n")
    job = json.loads((await call(jp_fetch, "workloads", method="POST",
                                 body={"path": "chatty.sh", "gpus": 0})).body)
    await wait_state(jp_fetch, job["id"], ("running",))
    path = f"{jp_base_url}gpuhub/workloads/{job['id']}/logs?follow=true"
    caplog.clear()
    for _ in range(2):  # closed at once, and closed after the first events
        reader, writer = await asyncio.open_connection("127.0.0.1", http_server_port[-1])
        head = "".join(f"{k}: {v}\r\n" for k, v in jp_auth_header.items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
                     f"{head}\r\n".encode())
        await writer.drain()
        if _:
            assert b"event: log" in await reader.readuntil(b"event: log")
        writer.close()
        await asyncio.sleep(1.5)  # more chunks arrive from the service for the closed tab
    w = json.loads((await call(jp_fetch, "workloads", job["id"])).body)
    assert w["state"] == "running"  # the server still answers; the job runs on
    await call(jp_fetch, "workloads", job["id"], method="DELETE")
    logged = "\n".join(f"{r.levelname} {r.getMessage()}" for r in caplog.records)
    assert "Uncaught exception" not in logged, logged
    assert " 502 " not in logged and not [r for r in caplog.records
                                          if r.levelname in ("ERROR", "CRITICAL")], logged


async def open_follows(hub) -> int:
    """Followed logs the service holds open now (its gpuhub_log_follows gauge)."""
    r = await AsyncHTTPClient().fetch(f"{hub.url}/services/gpuhub/metrics", request_timeout=10,
                                      headers={"Authorization": f"token {hub.token('root-admin')}"})
    return int(float(re.search(r"^gpuhub_log_follows (\S+)", r.body.decode(), re.M).group(1)))


async def eventually(check, seconds: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.2)


async def test_a_closed_tab_frees_the_services_connection_at_once(jp_fetch, files, jp_base_url,
                                                                  jp_auth_header,
                                                                  http_server_port, hub):
    """A tab following a job that prints nothing is closed: the lab server
    closes its request to the service then, not when the service next sends
    something (for a quiet or queued attempt, up to an hour later)."""
    (files / "quiet.sh").write_text("sleep 120\n")
    job = json.loads((await call(jp_fetch, "workloads", method="POST",
                                 body={"path": "quiet.sh", "gpus": 0})).body)
    await wait_state(jp_fetch, job["id"], ("running",))

    async def follows(n):
        return await open_follows(hub) == n

    # Tabs of earlier tests closed at once too: a count taken while one of
    # theirs was still closing would make this one's +1 invisible.
    await eventually(lambda: follows(0), 10, "earlier tests' followed logs to close")
    reader, writer = await asyncio.open_connection("127.0.0.1", http_server_port[-1])
    head = "".join(f"{k}: {v}\r\n" for k, v in jp_auth_header.items())
    writer.write(f"GET {jp_base_url}gpuhub/workloads/{job['id']}/logs?follow=true HTTP/1.1\r\n"
                 f"Host: localhost\r\nAccept: text/event-stream\r\n{head}\r\n".encode())
    await writer.drain()
    await eventually(lambda: follows(1), 30, "the service to hold the followed log")
    writer.close()
    await eventually(lambda: follows(0), 5, "the service's stream to close with the tab")
    await call(jp_fetch, "workloads", job["id"], method="DELETE")


async def test_cancel_a_queued_job_and_see_it_in_the_teams_list(jp_fetch, files, hub):
    amy = hub.client("amy")
    holder = amy.submit(name="amy-holds", command=["sleep", "60"], gpus=2)
    try:
        amy.wait(holder["id"], "running")
        job = json.loads((await call(jp_fetch, "workloads", method="POST",
                                     body={"path": "project/train.py", "gpus": 2})).body)
        waiting = await wait_state(jp_fetch, job["id"], ("queued",))
        assert waiting["queue_position"] == 1
        team = json.loads((await call(jp_fetch, "workloads", scope="team")).body)["workloads"]
        assert {holder["id"], job["id"]} <= {w["id"] for w in team}
        # why it waits comes with the service's next reasons pass (reasons_interval)
        for _ in range(30):
            mine = json.loads((await call(jp_fetch, "workloads", scope="mine")).body)["workloads"]
            listed = [w for w in mine if w["id"] == job["id"]]
            if "may hold at most 2" in listed[0]["reason"]:
                break
            await asyncio.sleep(0.3)
        assert holder["id"] not in {w["id"] for w in mine}
        assert listed[0]["queue_position"] == 1
        assert "may hold at most 2" in listed[0]["reason"]

        r = await call(jp_fetch, "workloads", job["id"], method="DELETE")
        assert r.code == 202 and json.loads(r.body)["state"] == "cancelled"
        # Cancelling a teammate's job is not alice's to do: the service says so.
        code, body = await error(jp_fetch, "workloads", holder["id"], method="DELETE")
        assert code in (403, 404) and body["error"], body
    finally:
        amy.request("DELETE", f"/workloads/{holder['id']}")


async def test_the_jobs_list_comes_a_page_at_a_time_newest_first(jp_fetch, files, hub):
    ids = []
    for _ in range(2):
        job = json.loads((await call(jp_fetch, "workloads", method="POST",
                                     body={"path": "project/train.py", "gpus": 2})).body)
        ids.append(job["id"])
        await call(jp_fetch, "workloads", job["id"], method="DELETE")
    page = json.loads((await call(jp_fetch, "workloads", scope="mine", limit="1")).body)
    assert [w["id"] for w in page["workloads"]] == [ids[-1]] and page["next_cursor"]
    two = json.loads((await call(jp_fetch, "workloads", scope="mine", limit="2")).body)
    assert [w["id"] for w in two["workloads"]] == ids[::-1]


@pytest.mark.parametrize("limit", ["0", "501", "lots", "-1"])
async def test_a_bad_page_size_is_refused_naming_it(jp_fetch, files, limit):
    code, body = await error(jp_fetch, "workloads", scope="mine", limit=limit)
    assert code == 400 and body["field"] == "limit" and "1 to 500" in body["error"], body


@pytest.mark.parametrize("form, field, words", [
    ({"path": "../etc/passwd"}, "path", "outside this server's files"),
    ({"path": "project/missing.ipynb"}, "path", "is not a file"),
    ({"path": "project"}, "path", "is not a file"),
    ({"path": "notes.txt"}, "path", "not a notebook"),
    # counts are the service's to check: its refusal comes through, naming its field
    ({"path": "project/train.py", "gpus": "two"}, "gpus_per_node", "must be an integer"),
    ({"path": "project/train.py", "nodes": 0}, "nodes", "between 1 and"),
    ({"path": "project/train.py", "env": {"A": 1}}, "env", "NAME: text"),
    ({"path": "project/train.py", "output_dir": "../elsewhere"}, "output_dir", "outside"),
    ({"path": "project/train.py", "colour": "red"}, "colour", "not a field"),
    ({"path": "project/train.py", "datasets": "imagenet"}, "datasets", "list of dataset names"),
])
async def test_bad_forms_are_refused_with_the_field_and_nothing_is_submitted(
        jp_fetch, files, hub, form, field, words):
    (files / "notes.txt").write_text("not a job")
    before = len(hub.client("alice").get("/workloads").json()["workloads"])
    code, body = await error(jp_fetch, "workloads", method="POST", body=form)
    assert code == 400 and body["field"] == field and words in body["error"], body
    assert body["message"] == body["error"]
    assert len(hub.client("alice").get("/workloads").json()["workloads"]) == before


@pytest.mark.parametrize("form, status, field, words", [
    ({"time_limit": "soon"}, 400, "time_limit", "soon"),
    ({"team": "b"}, 403, "team", "not a member of team 'b'"),
    ({"pool": "tpu"}, 400, "pool", "tpu"),
    ({"gpus": 3}, 400, "gpus", "3"),
    # a share of one GPU reaches the service, which knows this pool does not share
    ({"gpu_share": "1/4"}, 400, "gpu_share", "pool 'default' does not share its GPUs"),
    # the submit dialog's datasets: the service says which it does not know
    ({"datasets": ["nosuch"]}, 404, "datasets", "no dataset nosuch"),
])
async def test_the_services_errors_come_through_with_its_message(jp_fetch, files, form, status,
                                                                 field, words):
    code, body = await error(jp_fetch, "workloads", method="POST",
                             body={"path": "project/train.py", **form})
    assert code == status, body
    assert body.get("field") == field and words in body["error"], body


async def test_the_form_reads_the_notebooks_parameters_cell(jp_fetch, files):
    r = await call(jp_fetch, "parameters", path="project/train.ipynb")
    found = {p["name"]: p for p in json.loads(r.body)["parameters"]}
    assert found["epochs"]["default"] == "1"
    assert found["name"]["default"] == "'base'"
    r = await call(jp_fetch, "parameters", path="project/train.py")
    assert json.loads(r.body)["parameters"] == []


async def test_quota_pools_and_identity_pass_through(jp_fetch, files):
    me = json.loads((await call(jp_fetch, "me")).body)
    assert me["name"] == "alice" and me["teams"] == ["a"]
    teams = json.loads((await call(jp_fetch, "teams")).body)["teams"]
    assert teams[0]["quotas"]["default"]["nominal"] == 2
    pools = json.loads((await call(jp_fetch, "pools")).body)["pools"]
    assert pools[0]["name"] == "default" and pools[0]["capacity"] == 4
    assert json.loads((await call(jp_fetch, "notices")).body) == {"notices": []}
    assert json.loads((await call(jp_fetch, "datasets")).body) == {"datasets": []}


@pytest.mark.parametrize("method, path", [
    ("GET", "me"), ("GET", "teams"), ("GET", "pools"), ("GET", "notices"),
    ("GET", "workloads"), ("POST", "workloads"), ("GET", "workloads/w1"),
    ("DELETE", "workloads/w1"), ("GET", "workloads/w1/logs"), ("GET", "workloads/w1/outputs"),
    ("GET", "parameters"),
])
async def test_every_verb_needs_the_servers_login(jp_fetch, jp_base_url, http_server_port,
                                                   method, path):
    url = f"http://127.0.0.1:{http_server_port[-1]}{jp_base_url}gpuhub/{path}"
    with pytest.raises(HTTPClientError) as e:
        await AsyncHTTPClient().fetch(url, method=method, body="{}" if method == "POST" else None)
    assert e.value.code == 403


async def test_an_unreachable_service_is_a_502_that_says_where(jp_fetch, jp_serverapp):
    service = jp_serverapp.web_app.settings["gpuhub_service"]
    service.api = "http://127.0.0.1:9/services/gpuhub/api/v1"  # discard port: nothing answers
    code, body = await error(jp_fetch, "teams")
    assert code == 502 and "cannot reach the GPU Hub service at http://127.0.0.1:9" in body["error"]
