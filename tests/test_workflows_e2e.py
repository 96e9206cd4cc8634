"""Sweeps and dependencies end to end, with a real hub and service on fake
GPUs (one hub for the module): a 6-task notebook sweep with at most 2
running, submitted with the CLI; an "evaluate" notebook after-ok the sweep
that reads all six output notebooks (through the API, with the job's own
token) and writes the best parameters; a job after-ok the evaluation that
trains and saves the best model; a deployment after-ok that job, submitted
before the model exists, that rolls out once it does and answers a request;
then cancel-all and retry-failed on a second sweep through the REST API."""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import pytest
import requests

from gpuspawner.cli import main
from gpuspawner.times import from_iso

from notebooks import write_notebook
from hub_harness import Hub, wait_for

LRS = [1.0, 0.3, 0.1, 0.03, 0.01, 0.003]

TRAIN = '''
import math, time
from IPython.display import display
time.sleep(1)
acc = round(1 - abs(math.log10(lr) + 2) / 10, 4)   # best at lr = 0.01
# What scrapbook's sb.glue("acc", acc) writes:
display({"application/scrapbook.scrap.json+json":
         {"name": "acc", "data": acc, "encoder": "json", "version": 1}},
        metadata={"scrapbook": {"name": "acc", "data": True, "display": False}}, raw=True)
'''

EVALUATE = '''
import json
from gpuspawner.client import GpuHubClient
from gpuspawner.service.sweeps.scraps import notebook_scraps
sweep = GpuHubClient.from_env().get_sweep(sweep_id)
results = []
for task in sweep["tasks"]:
    with open(task["output_notebook"]) as f:
        results.append((notebook_scraps(json.load(f))["acc"], task["parameters"]))
acc, best = max(results, key=lambda r: r[0])
with open("best.json", "w") as f:
    json.dump({"parameters": best, "acc": acc, "read": len(results)}, f)
'''

IRIS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                    "serving", "iris", "train.py")
# The example iris classifier, its regularisation from the best learning rate.
TRAIN_BEST = ("import json, subprocess, sys; best = json.load(open('best.json')); "
              "json.dump({'lr': best['parameters']['lr']}, open('chosen.json', 'w')); "
              f"subprocess.run([sys.executable, {IRIS!r}, 'model', '--C', "
              "str(100 * best['parameters']['lr'])], check=True)")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("workflowhub")), groups={"team-a": ["alice"]},
            teams={"a": {"quotas": {"default": {"nominal": 4, "borrowing_limit": 0}}}}, gpus=4)
    try:
        yield h.start()
    finally:
        h.stop()


@pytest.fixture
def folder(hub):
    return pathlib.Path(hub.workspace_folder("alice"))


def cli(capsys, hub, *argv):
    rc = main([argv[0], "--url", f"{hub.url}/services/gpuhub", "--token", hub.token("alice"),
               *argv[1:]])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def most_at_once(attempts: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one time."""
    edges = sorted([(s, 1) for s, _e in attempts] + [(e, -1) for _s, e in attempts])
    now = top = 0
    for _t, step in edges:
        now += step
        top = max(top, now)
    return top


def test_sweep_then_evaluate_then_train_the_best(hub, folder, capsys):
    write_notebook(folder / "train.ipynb", "lr = 0.1", TRAIN)
    write_notebook(folder / "evaluate.ipynb", "sweep_id = ''", EVALUATE)
    (folder / "grid.yaml").write_text(f"grid:\n  lr: {LRS}\n")
    hub.give("alice", str(folder))
    workdir = os.path.basename(folder)
    t0 = time.monotonic()
    sid = cli(capsys, hub, "submit", "--sweep", str(folder / "grid.yaml"), "--max-running", "2",
              "--metric", "acc:max", "--name", "lrs", "--gpus", "1", "--workdir", workdir,
              "--notebook", "train.ipynb").strip()
    evaluate = cli(capsys, hub, "submit", "--after", f"{sid}:ok", "--name", "evaluate",
                   "--gpus", "0", "--workdir", workdir, "--notebook", "evaluate.ipynb",
                   "-p", "sweep_id", sid).strip()
    final = cli(capsys, hub, "submit", "--after", evaluate, "--name", "train-best", "--gpus", "1",
                "--workdir", workdir, "--", sys.executable, "-c", TRAIN_BEST).strip()
    # The deploy waits for the training: its model directory does not exist yet.
    out = cli(capsys, hub, "deploy", "best", f"{workdir}/model", "--after", f"{final}:ok")
    assert "waiting" in out and f"best: revision 1 is waiting for {final} (ok)" in out
    alice = hub.client("alice")
    assert alice.workload(evaluate)["state"] == "waiting"
    assert alice.workload(final)["reason"] == f"waiting for {evaluate} (ok)"
    (rev,) = alice.get("/deployments/a/best").json()["revisions"]
    assert (rev["state"], rev["replicas"]) == ("waiting", [])

    sweep = wait_for(lambda: (s := alice.get(f"/sweeps/{sid}").json())["state"] != "running"
                     and s, "the sweep to end", timeout=240)
    sweep_s = time.monotonic() - t0
    assert sweep["state"] == "succeeded", sweep
    assert [t["parameters"]["lr"] for t in sweep["tasks"]] == LRS
    assert [t["metric"] for t in sweep["tasks"]] == [0.8, 0.8523, 0.9, 0.9523, 1.0, 0.9477]
    assert sweep["best"]["index"] == 4 and sweep["best"]["parameters"] == {"lr": 0.01}
    spans = []
    for t in sweep["tasks"]:
        (attempt,) = alice.workload(t["workload_id"])["attempts"]
        spans.append((from_iso(attempt["started_at"]), from_iso(attempt["ended_at"])))
    assert most_at_once(spans) <= 2, spans
    assert most_at_once(spans) == 2, "two tasks of the sweep should have run side by side"

    out = cli(capsys, hub, "sweep", "show", sid)
    best_row = [line for line in out.splitlines() if line.startswith("*")]
    assert len(best_row) == 1 and best_row[0].split()[1:5] == ["4", "0.01", "succeeded", "1"]
    assert sid in cli(capsys, hub, "sweep", "ls")

    assert alice.wait(evaluate, "succeeded", timeout=120)["state"] == "succeeded"
    best = json.loads((folder / "best.json").read_text())
    assert best == {"parameters": {"lr": 0.01}, "acc": 1.0, "read": 6}
    assert alice.wait(final, ("succeeded", "failed"), timeout=60)["state"] == "succeeded"
    assert json.loads((folder / "chosen.json").read_text()) == {"lr": 0.01}
    assert (folder / "model" / "model.joblib").exists()

    def serving():
        d = alice.get("/deployments/a/best").json()
        return d if d["revisions"][0]["ready_replicas"] else None
    d = wait_for(serving, "the deployment of the best model to serve", timeout=120)
    assert d["traffic"] == {"1": 100} and d["revisions"][0]["state"] == "ready"
    r = requests.post(f"{hub.url}/services/gpuhub/endpoints/a/best/v2/models/best/infer",
                      headers={"Authorization": f"token {hub.token('alice')}"}, timeout=60,
                      json={"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                                        "data": [5.1, 3.5, 1.4, 0.2]}]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [0]  # setosa
    with capsys.disabled():
        print(f"\n6-task notebook sweep (2 at once) ended {sweep_s:.1f}s after its submit; "
              f"pipeline done {time.monotonic() - t0:.1f}s after")


# A task by its parameter x: 0 succeeds; 1 fails the first time; 2 runs until
# cancelled the first time. Their second runs succeed.
FLAKY = ("import os, sys, time; x = os.environ['GPUHUB_PARAM_X']; mark = f'ran-{x}'; "
         "first = not os.path.exists(mark); open(mark, 'w').close(); "
         "sys.exit(3) if x == '1' and first else time.sleep(120 if x == '2' and first else 0)")


def test_cancel_all_and_retry_failed(hub, folder):
    alice = hub.client("alice")
    hub.give("alice", str(folder))
    r = alice.post("/sweeps", json={
        "name": "flaky", "tasks": [{"x": 0}, {"x": 1}, {"x": 2}],
        "template": {"command": ["python", "-c", FLAKY], "gpus": 1,
                     "working_dir": os.path.basename(folder)}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert r.json()["total"] == 3 and r.json()["max_running"] is None

    def states():
        return [t["state"] for t in alice.get(f"/sweeps/{sid}").json()["tasks"]]
    wait_for(lambda: states() == ["succeeded", "failed", "running"], "two ends and a runner",
             timeout=120)
    r = alice.post(f"/sweeps/{sid}/cancel")
    assert r.status_code == 202
    sweep = wait_for(lambda: (s := alice.get(f"/sweeps/{sid}").json())["state"] != "running"
                     and s, "the cancel", timeout=60)
    assert sweep["state"] == "cancelled"
    assert sweep["counts"]["succeeded"] == 1 and sweep["counts"]["failed"] == 1 \
        and sweep["counts"]["cancelled"] == 1
    before = [t["workload_id"] for t in sweep["tasks"]]

    r = alice.post(f"/sweeps/{sid}/retry")
    assert r.status_code == 202, r.text
    after = [t["workload_id"] for t in r.json()["tasks"]]
    assert after[0] == before[0] and after[1] != before[1] and after[2] != before[2]
    sweep = wait_for(lambda: (s := alice.get(f"/sweeps/{sid}").json())["state"] != "running"
                     and s, "the retried tasks", timeout=120)
    assert sweep["state"] == "succeeded" and states() == ["succeeded"] * 3
    assert alice.post(f"/sweeps/{sid}/retry").status_code == 409
    listed = alice.get("/sweeps", params={"state": "succeeded"}).json()["sweeps"]
    assert sid in [s["id"] for s in listed] and "tasks" not in listed[0]


def test_a_bad_sweep_or_dependency_is_refused_naming_it(hub):
    alice = hub.client("alice")
    r = alice.post("/sweeps", json={"template": {"command": ["true"]}, "grid": {"x": []}})
    assert (r.status_code, r.json()["field"]) == (400, "grid.x")
    r = alice.post("/workloads", json={"command": ["true"], "gpus": 0,
                                       "after": [{"id": "w0123456789ab"}]})
    assert (r.status_code, r.json()["field"]) == (400, "after[0].id")
    assert "w0123456789ab" in r.json()["error"]
    assert alice.get("/sweeps/s0123456789ab").status_code == 404
    assert alice.get("/workloads", params={"state": "waiting"}).status_code == 200
