"""Durability and concurrency through the real hub: the service is killed
with SIGKILL mid-run and restarted by JupyterHub; 50 submits race from 5
teams against SQLite and PostgreSQL."""
from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from hub_harness import Hub
from jobs import CHECKPOINTING, read_trace


def ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def train(steps: int, step_s: float = 0.1) -> list[str]:
    return [sys.executable, "-c", CHECKPOINTING, str(steps), str(step_s)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_service_killed_mid_run_loses_nothing(tmp_path):
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"]},
              teams={"a": {"quotas": {"default": {"nominal": 4}}}}, gpus=4).start()
    try:
        alice = hub.client("alice")
        long = alice.submit(command=train(900), gpus=1, name="long")["id"]
        short = [alice.submit(command=train(30), gpus=1, name=f"short{i}")["id"] for i in range(2)]
        waiting = alice.submit(command=train(5), gpus=2, name="waits")["id"]
        for wid in [long] + short:
            alice.wait(wid, "running", 30)
        # Running in the API is admitted and being started: the kill must come
        # after the processes started (one killed before its start is lost,
        # and rightly run again: test_engine_restart's NeverStarts).
        for wid in [long] + short:
            trace = os.path.join(alice.workload(wid)["checkpoint_dir"], "trace")
            deadline = time.monotonic() + 30
            while not os.path.exists(trace) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert os.path.exists(trace), f"{wid} did not start"
        assert alice.workload(waiting)["state"] == "queued"
        long_gpus = alice.workload(long)["placement"][0]["devices"]

        old = hub.service_pid()
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(old) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert requests.get(f"{hub.api}/health", timeout=5).status_code in (502, 503, 404)
        # JupyterHub notices (GPU Hub has it poll managed services every second) and restarts it.
        hub.wait_ready(timeout=60)
        assert hub.service_pid() != old

        # The short jobs ended while the service was down: recorded, not rerun.
        for wid in short:
            w = alice.wait(wid, "succeeded", 60)
            assert [a["state"] for a in w["attempts"]] == ["succeeded"]
        # The long one was found again, still on its GPU.
        w = alice.workload(long)
        assert (w["state"], w["attempt"], w["placement"][0]["devices"]) == ("running", 0, long_gpus)
        # The waiting job ran on other GPUs, never on the long job's.
        w = alice.wait(waiting, "succeeded", 60)
        assert not set(w["attempts"][0]["placement"][0]["devices"]) & set(long_gpus)
        assert len(w["attempts"]) == 1
        assert alice.request("DELETE", f"/workloads/{long}").status_code == 202
        alice.wait(long, "cancelled", 30)
        # Every job started once, and no attempt of one overlapped another.
        for wid in [long, waiting] + short:
            trace = read_trace(os.path.join(alice.workload(wid)["checkpoint_dir"], "trace"))
            assert [t[0] for t in trace if t[0] == "start"] == ["start"], (wid, trace)
        pool = alice.get("/pools").json()["pools"][0]
        assert (pool["used"], pool["free"]) == (0, 4)
    finally:
        hub.stop()


def max_overlap(intervals: list[tuple[float, float, int]]) -> int:
    points = sorted([(s, n) for s, e, n in intervals] + [(e, -n) for s, e, n in intervals],
                    key=lambda p: (p[0], p[1]))
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_concurrent_submits_never_exceed_quota(tmp_path, request, database):
    db_url = "" if database == "sqlite" else request.getfixturevalue("pg_url")
    teams = {f"t{i}": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 1}}}
             for i in range(5)}
    groups = {f"team-t{i}": [f"user{i}"] for i in range(5)}
    hub = Hub(str(tmp_path), groups=groups, teams=teams, gpus=8, db_url=db_url).start()
    try:
        clients = [hub.client(f"user{i}") for i in range(5)]
        job = [sys.executable, "-c", "import time; time.sleep(0.3)"]

        def submit(n: int) -> requests.Response:
            return clients[n % 5].post("/workloads", json={"command": job, "gpus": 1,
                                                           "name": f"j{n}"})
        with ThreadPoolExecutor(max_workers=50) as pool:
            responses = list(pool.map(submit, range(50)))
        assert [r.status_code for r in responses] == [201] * 50
        ids = [r.json()["id"] for r in responses]
        assert len(set(ids)) == 50
        admin = hub.client("root-admin")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = admin.get("/workloads", params={"limit": 1000}).json()["workloads"]
            if sum(w["state"] == "succeeded" for w in rows) == 50:
                break
            time.sleep(0.5)
        assert sorted(w["id"] for w in rows) == sorted(ids)
        assert all(w["state"] == "succeeded" for w in rows)
        spans = {}
        for wid in ids:
            for a in admin.workload(wid)["attempts"]:
                spans.setdefault(admin.workload(wid)["team"], []).append(
                    (ts(a["started_at"]), ts(a["ended_at"]), a["gpus"]))
        for team, intervals in spans.items():
            assert max_overlap(intervals) <= 2, team  # nominal 1 + borrowing limit 1
        assert max_overlap([i for v in spans.values() for i in v]) <= 8
    finally:
        hub.stop()


def test_deployments_serve_on_through_a_service_kill(tmp_path):
    """A deployment with a 25 % canary: the service is SIGKILLed and restarted
    by JupyterHub; the same replica processes serve on (adopted, not
    restarted), and the split is the same."""
    import test_serving_e2e as serving
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"]},
              teams={"a": {"quotas": {"default": {"nominal": 4}}}}, gpus=4).start()
    try:
        alice = hub.client("alice")
        serving.train(hub, "models/v1", 1.0)
        serving.train(hub, "models/v2", 0.05)
        assert alice.post("/deployments", json={"name": "iris",
                                                "model_dir": "models/v1"}).status_code == 201
        serving.ready(hub, "iris")
        assert alice.post("/deployments", json={"name": "iris", "model_dir": "models/v2",
                                                "canary_percent": 25}).status_code == 201
        before = serving.ready(hub, "iris", revisions=2)
        replicas = sorted(w for r in before["revisions"] for w in r["replicas"])

        old = hub.service_pid()
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(old) and time.monotonic() < deadline:
            time.sleep(0.1)
        hub.wait_ready(timeout=60)

        after = serving.ready(hub, "iris", revisions=2)
        assert after["traffic"] == {"1": 75, "2": 25}
        assert sorted(w for r in after["revisions"] for w in r["replicas"]) == replicas
        for wid in replicas:
            w = alice.workload(wid)
            assert (w["state"], w["attempt"]) == ("running", 0), w
        seen = [serving.call(hub, serving.endpoint(hub, "iris"), serving.infer_body())
                for _ in range(20)]
        assert all(r.status_code == 200 for r in seen)
        assert [r.headers["X-GpuHub-Revision"] for r in seen].count("2") == 5
    finally:
        hub.stop()
