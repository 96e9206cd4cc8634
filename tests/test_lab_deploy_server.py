"""The lab extension's deployment handlers (gpuhub_lab) in a real Jupyter
server against a real JupyterHub + scheduler service: a model trained by a
job submitted through the server extension is deployed from the server's
files, answers inference requests, gets a canary that is promoted and rolled
back, is scaled and deleted; bad deploys are refused with the field at fault,
by this server (paths) or by the service (everything else)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from test_lab_server import call, error, hub, jp_root_dir, jp_server_config, wait_state  # noqa: F401

pytest_plugins = ["pytest_jupyter.jupyter_server"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "examples", "serving", "iris", "train.py")
# The job runs `python` from its PATH: this environment's, with scikit-learn,
# as a notebook image's would be.
VENV_PATH = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}
IRIS = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                    "data": [5.1, 3.5, 1.4, 0.2]}]}


async def body_of(jp_fetch, *path, **kw) -> dict:
    return json.loads((await call(jp_fetch, *path, **kw)).body)


async def wait_ready(jp_fetch, name: str, revisions: int = 1, timeout: float = 120) -> dict:
    for _ in range(int(timeout / 0.5)):
        d = await body_of(jp_fetch, "deployments", "a", name)
        serving = [r for r in d["revisions"]
                   if r["ready_replicas"] and d["traffic"].get(str(r["number"]))]
        if len(serving) >= revisions:
            return d
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name}: {revisions} revision(s) not ready: {d['message']}")


async def infer(hub, name: str) -> tuple[int, str]:
    """One inference request through the hub's proxy, as a client would send it."""
    r = await AsyncHTTPClient().fetch(
        f"{hub.url}/services/gpuhub/endpoints/a/{name}/v2/models/{name}/infer", method="POST",
        body=json.dumps(IRIS), headers={"Authorization": f"token {hub.token('alice')}",
                                        "Content-Type": "application/json"},
        request_timeout=60)
    return r.code, r.headers["X-GpuHub-Revision"]


@pytest.fixture
def trained(jp_fetch, jp_root_dir):
    """The example model trained by a job submitted through the server
    extension: the job writes it to its output directory."""
    async def train(output_dir: str) -> str:
        os.makedirs(jp_root_dir / "iris", exist_ok=True)
        shutil.copy(TRAIN, jp_root_dir / "iris" / "train.py")
        job = await body_of(jp_fetch, "workloads", method="POST", body={
            "path": "iris/train.py", "gpus": 0, "output_dir": output_dir, "env": VENV_PATH})
        done = await wait_state(jp_fetch, job["id"], ("succeeded", "failed"), timeout=120)
        assert done["state"] == "succeeded", done["reason"]
        # What "Deploy outputs…" of the Jobs panel deploys: the folder with the model.
        assert (done["output_dir_path"], done["working_dir_path"]) == (output_dir, "iris")
        assert done["model_path"] == output_dir
        listed = (await body_of(jp_fetch, "workloads"))["workloads"]
        assert [w["model_path"] for w in listed if w["id"] == job["id"]] == [output_dir]
        return output_dir
    return train


async def test_deploy_from_the_servers_files_call_it_canary_promote_rollback_scale_delete(
        jp_fetch, jp_root_dir, hub, trained):
    model_dir = await trained("runs/iris-v1")
    r = await call(jp_fetch, "deployments", method="POST",
                   body={"name": "iris", "model_dir": model_dir})
    assert r.code == 201
    created = json.loads(r.body)
    assert (created["team"], created["traffic"]) == ("a", {"1": 100})
    # The service got the directory as the replicas see it; the browser gets it back
    # relative to the server's files.
    assert created["revisions"][0]["model_dir"] == str(jp_root_dir / "runs" / "iris-v1")
    assert created["revisions"][0]["model_path"] == "runs/iris-v1"
    listed = (await body_of(jp_fetch, "deployments"))["deployments"]
    assert [(d["team"], d["name"]) for d in listed] == [("a", "iris")]

    await wait_ready(jp_fetch, "iris")
    assert [await infer(hub, "iris") for _ in range(3)] == [(200, "1")] * 3
    # The router's counts, per revision, in the view and in the metrics' 5 s buckets.
    d = await body_of(jp_fetch, "deployments", "a", "iris")
    assert d["revisions"][0]["requests"] == 3 and d["revisions"][0]["p99_ms"] > 0
    metrics = await body_of(jp_fetch, "deployments", "a", "iris", "metrics")
    points = metrics["revisions"]["1"]
    assert metrics["interval"] == 5 and sum(p["requests"] for p in points) == 3
    assert any(p["p99_ms"] is None for p in points)  # buckets without requests are gaps
    recent = await body_of(jp_fetch, "deployments", "a", "iris", "metrics", seconds="30")
    assert len(recent["revisions"]["1"]) == 6
    code, body = await error(jp_fetch, "deployments", "a", "iris", "metrics", seconds="a day")
    assert code == 400 and body["field"] == "seconds"

    # Revision 2 as a 25 % canary: one request in four goes to it.
    r = await call(jp_fetch, "deployments", method="POST",
                   body={"name": "iris", "model_dir": model_dir, "canary_percent": 25,
                         "rollback": {"error_rate": 0.5}})
    canary = json.loads(r.body)
    assert canary["traffic"] == {"1": 75, "2": 25} and canary["canary_revision"] == 2
    await wait_ready(jp_fetch, "iris", revisions=2)
    answered = [await infer(hub, "iris") for _ in range(8)]
    assert sorted(rev for _, rev in answered) == ["1"] * 6 + ["2"] * 2

    promoted = await body_of(jp_fetch, "deployments", "a", "iris", "promote", method="POST",
                             body={})
    assert promoted["traffic"] == {"2": 100} and promoted["stable_revision"] == 2
    rolled = await body_of(jp_fetch, "deployments", "a", "iris", "rollback", method="POST", body={})
    assert rolled["traffic"] == {"1": 100} and "rolled back to revision 1" in rolled["message"]
    split = await body_of(jp_fetch, "deployments", "a", "iris", "traffic", method="POST",
                          body={"traffic": {"1": 50, "2": 50}})
    assert split["traffic"] == {"1": 50, "2": 50}
    scaled = await body_of(jp_fetch, "deployments", "a", "iris", "scale", method="POST",
                           body={"min_replicas": 1, "max_replicas": 3})
    assert (scaled["min_replicas"], scaled["max_replicas"]) == (1, 3)
    # A refused action: the service's message and status come through.
    code, body = await error(jp_fetch, "deployments", "a", "iris", "traffic", method="POST",
                             body={"traffic": {"1": 60, "2": 60}})
    assert code == 400 and body["field"] == "traffic" and "add up to 100" in body["error"]

    r = await call(jp_fetch, "deployments", "a", "iris", method="DELETE")
    assert json.loads(r.body) == {"team": "a", "name": "iris", "deleted": True}
    assert (await body_of(jp_fetch, "deployments"))["deployments"] == []
    code, body = await error(jp_fetch, "deployments", "a", "iris")
    assert code == 404 and body["error"] == "no deployment a/iris"


@pytest.fixture
def model_files(jp_root_dir):
    """A folder with a (fake) sklearn model, an empty folder and a file."""
    os.makedirs(jp_root_dir / "models" / "m1")
    (jp_root_dir / "models" / "m1" / "model.joblib").write_bytes(b"not really a model")
    os.makedirs(jp_root_dir / "models" / "empty")
    (jp_root_dir / "notes.txt").write_text("not a model")
    return jp_root_dir


@pytest.mark.parametrize("form, status, field, words", [
    # this server's checks: the model directory in its files
    ({"model_dir": "../../elsewhere"}, 400, "model_dir", "outside this server's files"),
    ({"model_dir": "/etc"}, 400, "model_dir", "'/etc' is not a directory"),
    ({"model_dir": "notes.txt"}, 400, "model_dir", "is not a directory"),
    ({"model_dir": "models/empty"}, 400, "model_dir", "has no model.joblib"),
    ({"model_dir": "models/m1", "runtime": "predictor", "predictor": "serve.py:Model"}, 400,
     "predictor", "there is no serve.py in models/m1"),
    ({"model_dir": ""}, 400, "model_dir", "is required"),
    # the service's, passed through
    ({"name": "Iris_V1"}, 400, "name", "lowercase letters, digits and '-'"),
    ({"team": "b"}, 403, "team", "not a member of team 'b'"),
    ({"pool": "tpu"}, 400, "pool", "unknown pool 'tpu'"),
    ({"min_replicas": 3, "max_replicas": 2}, 400, "max_replicas", "at least min_replicas"),
    ({"runtime": "tensorrt"}, 400, "runtime", "unknown runtime 'tensorrt'"),
    ({"canary_percent": 0}, 400, "canary_percent", "from 1 to 99"),
    ({"canary_percent": 100}, 400, "canary_percent", "deploy without canary_percent"),
])
async def test_bad_deploys_are_refused_with_the_field_and_nothing_is_deployed(
        jp_fetch, model_files, form, status, field, words):
    body = {"name": "m1", "model_dir": "models/m1", **form}
    code, answer = await error(jp_fetch, "deployments", method="POST", body=body)
    assert (code, answer.get("field")) == (status, field), answer
    assert words in answer["error"] and answer["message"] == answer["error"], answer
    listed = (await body_of(jp_fetch, "deployments"))["deployments"]
    assert "m1" not in {d["name"] for d in listed}


async def test_actions_on_what_is_not_there_say_so(jp_fetch, model_files):
    code, body = await error(jp_fetch, "deployments", "a", "nothing", "promote", method="POST",
                             body={})
    assert code == 404 and body["error"] == "no deployment a/nothing"
    code, body = await error(jp_fetch, "deployments", "a", "nothing", "metrics")
    assert code == 404 and body["error"] == "no deployment a/nothing"
    code, body = await error(jp_fetch, "deployments", method="POST", body=["a list"])
    assert code == 400 and body["field"] == "body"


@pytest.mark.parametrize("method, path", [
    ("GET", "deployments"), ("POST", "deployments"), ("GET", "deployments/a/iris"),
    ("DELETE", "deployments/a/iris"), ("GET", "deployments/a/iris/metrics"),
    ("POST", "deployments/a/iris/promote"),
])
async def test_every_deployment_verb_needs_the_servers_login(jp_fetch, jp_base_url,
                                                             http_server_port, method, path):
    url = f"http://127.0.0.1:{http_server_port[-1]}{jp_base_url}gpuhub/{path}"
    with pytest.raises(HTTPClientError) as e:
        await AsyncHTTPClient().fetch(url, method=method, body="{}" if method == "POST" else None)
    assert e.value.code == 403
