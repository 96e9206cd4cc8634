"""The GPU-aware culler end to end: a real JupyterHub with LocalGPUSpawner,
the scheduler service, the culler as a hub-managed service, and fake GPUs
whose utilization the test sets."""
from __future__ import annotations

import datetime as dt
import json
import sys

import requests

from hub_harness import Hub, wait_for
from test_embedded_hub import login
from test_local_spawner import Servers


def test_idle_gpu_server_is_warned_then_culled_and_queued_work_starts(tmp_path):
    util_file = tmp_path / "gpu-util.json"
    # Both GPUs busy until both servers run (a slow start must not get the first one culled).
    util_file.write_text(json.dumps({"0": 85.0, "1": 85.0}))
    hub = Hub(str(tmp_path / "hub"), groups={"team-a": ["alice", "bob"]},
              teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}}, gpus=2,
              extra_service_config=f"c.Inventory.declared_utilization_file = {str(util_file)!r}\n",
              extra_hub_config="c.Spawner.poll_interval = 2\n")
    # Jupyter activity alone would keep both servers for hours; the GPUs decide.
    hub.env["GPUHUB_CULLER_ARGS"] = json.dumps(
        ["--timeout=8h", "--gpu-timeout=4", "--gpu-threshold=5", "--warn-before=8",
         "--cull-every=1", "--gpu-max-gap=5"])
    hub.start()
    try:
        alice, bob = Servers(hub, "alice"), Servers(hub, "bob")
        for s in (alice, bob):
            assert s.start(pool="default", gpus=1).status_code in (201, 202)
            s.wait_ready()
        busy = bob.server_env()["CUDA_VISIBLE_DEVICES"]
        idle = alice.server_env()["CUDA_VISIBLE_DEVICES"]
        util_file.write_text(json.dumps({busy: 85.0, idle: 0.0}))
        admin = {"Authorization": f"token {hub.token('root-admin')}"}
        # Every GPU is held: a job of the team waits.
        job = requests.post(f"{hub.api}/workloads", timeout=10,
                            headers={"Authorization": f"token {hub.token('bob')}"},
                            json={"command": [sys.executable, "-c", "print('trained')"],
                                  "gpus": 1}).json()
        assert job["state"] == "queued"

        # Warned first: a notice for alice, shown on the hub's pages.
        notice = wait_for(lambda: requests.get(f"{hub.api}/notices", headers={
            "Authorization": f"token {hub.token('alice')}"}, timeout=10).json()["notices"],
            "the warning")[0]
        assert notice["kind"] == "cull-warning" and "GPU" in notice["message"]
        # The hub's pages show it from their snapshot of notices, taken every 2 s.
        pages = login(hub.url, "alice", "test-password")
        wait_for(lambda: "below 5%" in pages.get(f"{hub.url}/hub/home", timeout=10).text,
                 "the warning on alice's home page", 6)
        assert "announcement" in pages.get(f"{hub.url}/hub/home", timeout=10).text

        # Then culled: the server stops, its GPU goes back, the job runs.
        wait_for(lambda: alice.server() is None, "alice's server culled")
        w = wait_for(lambda: (lambda j: j if j["state"] == "succeeded" else None)(
            requests.get(f"{hub.api}/workloads/{job['id']}", headers=admin, timeout=10).json()),
            "the queued job to run")
        assert w["attempts"][0]["placement"][0]["devices"] == [int(idle)]
        culls = requests.get(f"{hub.api}/audit", params={"action": "cull"}, headers=admin,
                             timeout=10).json()["entries"]
        assert [e["target"] for e in culls] == ["alice"]
        assert culls[0]["detail"]["rule"] == "gpu_idle" and culls[0]["detail"]["gpu_idle_s"] >= 4
        warned_at = dt.datetime.fromisoformat(notice["created_at"].replace("Z", "+00:00"))
        culled_at = dt.datetime.fromisoformat(culls[0]["time"].replace("Z", "+00:00"))
        assert (culled_at - warned_at).total_seconds() >= 8  # the warning period was honoured
        # The busy server stays.
        assert bob.server()["ready"]
        assert requests.get(f"{hub.api}/notices", headers=admin, params={"user": "alice"},
                            timeout=10).json()["notices"] == []
        bob.stop()
    finally:
        hub.stop()
