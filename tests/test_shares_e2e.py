"""Shares of a GPU end to end, with a real hub, service and notebook
servers on two fake 16 GiB GPUs split in quarters: four users' quarter
notebooks share one GPU while a whole-GPU job of another team has the other;
a fifth quarter waits, its spawn progress saying why; the team's quota and
usage count the four as 1.0 GPU; a server whose processes use more than
its 4 GiB (fake NVML per-process figures: Inventory.declared_processes_file)
is warned on its notice, then stopped with the reason, and the fifth gets
its place. From inside a share's cgroups only the shared GPU opens."""
from __future__ import annotations

import json
import os
import stat
import sys

import pytest
import requests

from hub_harness import Hub, wait_for
from test_local_spawner import cgroups_of, opens_from
from test_spawn_browser import kill_leftover_servers, server_pids, server_state, stop_servers

QUARTERS = ["u1", "u2", "u3", "u4"]
USERS = QUARTERS + ["u5"]
GROUPS = {"team-a": USERS, "team-b": ["trainer"]}
TEAMS = {"a": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 1}}},
         "b": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 0}}}}


def config(processes: str) -> tuple[str, str]:
    service = f"""
c.GpuHubService.gpu_sharing = {{"default": {{"share_units": 4}}}}
c.GpuHubService.share_watch_interval = 0.5
c.GpuHubService.share_memory_grace = 4
c.Inventory.declared_processes_file = {processes!r}
"""
    hub = "c.Spawner.poll_interval = 1\n"  # a server whose GPUs went back stops within a second
    return service, hub


def spawn(hub: Hub, user: str, **options) -> requests.Response:
    return requests.post(f"{hub.url}/hub/api/users/{user}/server", json=options,
                         headers={"Authorization": f"token {hub.token(user)}"}, timeout=30)


def notebook(hub: Hub, user: str, state: str = "running") -> dict | None:
    admin = hub.client("root-admin")
    ws = admin.get("/workloads", params={"user": user, "kind": "notebook",
                                         "state": state}).json()["workloads"]
    return admin.workload(ws[0]["id"]) if ws else None  # with its devices


def server_env(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(kv.decode().split("=", 1) for kv in f.read().split(b"\0") if b"=" in kv)


def server_cgroup_pids(hub: Hub, wid: str) -> list[int]:
    root = f"/sys/fs/cgroup/devices/{hub.cgroup_parent}"
    [name] = [d for d in os.listdir(root) if d.endswith(wid)]
    with open(os.path.join(root, name, "cgroup.procs")) as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: servers run as their users' "
                                              "accounts in their own cgroups")
def test_four_quarter_notebooks_share_a_gpu_and_one_above_its_memory_is_stopped(tmp_path):
    processes = str(tmp_path / "gpu-processes.json")
    with open(processes, "w") as f:
        json.dump({}, f)
    fake_nodes = []
    for i in range(2):  # like the real nodes: major 195, mode 0666
        fake_nodes.append(str(tmp_path / f"nvidia{i}"))
        os.mknod(fake_nodes[-1], 0o666 | stat.S_IFCHR, os.makedev(195, i))
    service_cfg, hub_cfg = config(processes)
    hub = Hub(str(tmp_path), groups=GROUPS, teams=TEAMS, gpus=2,
              extra_service_config=service_cfg, extra_hub_config=hub_cfg)
    pids: set[int] = set()
    try:
        hub.start()
        for user in USERS + ["trainer"]:
            hub.token(user)
        job = hub.client("trainer").submit(command=[sys.executable, "-c",
                                                    "import time; time.sleep(600)"],
                                           pool="default", gpus=1)
        hub.client("trainer").wait(job["id"], ("running",))
        for user in QUARTERS:
            assert spawn(hub, user, pool="default", gpu_share="1/4").status_code in (201, 202)
        for user in QUARTERS:
            wait_for(lambda: (server_state(hub, user) or {}).get("ready"), f"{user}'s server",
                     timeout=120)
        pids |= server_pids(hub)
        shares = {u: notebook(hub, u) for u in QUARTERS}
        assert {w["gpu_share"] for w in shares.values()} == {0.25}
        [shared_uuid] = {w["device_uuids"][0] for w in shares.values()}
        job_uuid = hub.client("trainer").workload(job["id"])["device_uuids"][0]
        assert job_uuid != shared_uuid

        # The fifth quarter waits, and its spawn says why.
        assert spawn(hub, "u5", pool="default", gpu_share="1/4").status_code == 202
        wait_for(lambda: notebook(hub, "u5", "queued") is not None, "u5's request to queue")
        waiting = notebook(hub, "u5", "queued")
        wait_for(lambda: notebook(hub, "u5", "queued")["reason"] not in ("", "queued"),
                 "a reason for u5's wait")
        print("u5 waits:", notebook(hub, "u5", "queued")["reason"])
        progress = requests.get(f"{hub.url}/hub/api/users/u5/server/progress", stream=True,
                                headers={"Authorization": f"token {hub.token('u5')}"}, timeout=30)
        said = ""
        for line in progress.iter_lines():
            if line.startswith(b"data:"):
                said = json.loads(line[5:])["message"]
                if "waiting for" in said:
                    break
        progress.close()
        assert "waiting for 1/4 of one default GPU" in said, said

        # Quota: the four quarters are 1.0 GPU of team a; the job 1 of team b.
        [pool] = hub.client("root-admin").get("/pools").json()["pools"]
        assert pool["teams"] == {"a": 1, "b": 1}
        teams = {t["name"]: t for t in hub.client("root-admin").get("/teams").json()["teams"]}
        assert teams["a"]["quotas"]["default"]["used"] == 1

        # From inside a share's cgroups (as root, CUDA_VISIBLE_DEVICES ignored)
        # the shared GPU opens and the whole-GPU job's GPU does not.
        opens = {u: opens_from(list(cgroups_of(server_cgroup_pids(hub, shares[u]["id"])[0])
                                    .values()), fake_nodes) for u in ("u2", "u3")}
        mine = int(server_env(server_cgroup_pids(hub, shares["u2"]["id"])[0])
                   ["CUDA_VISIBLE_DEVICES"])
        assert opens["u2"] == opens["u3"] == {f"nvidia{i}": "ENXIO" if i == mine else "EPERM"
                                              for i in range(2)}, opens

        # u1's server uses 4.2 GiB of its 4.0: warned on its notice, then stopped.
        greedy = shares["u1"]
        over = {str(p): {"memory_mib": 4300, "sm_pct": 50} for p in server_cgroup_pids(hub, greedy["id"])[:1]}
        with open(processes + ".tmp", "w") as f:
            json.dump({shared_uuid: over}, f)
        os.replace(processes + ".tmp", processes)
        wait_for(lambda: any(n["kind"] == "gpu-memory" and n["user"] == "u1" for n in
                             hub.client("root-admin").get("/notices").json()["notices"]),
                 "u1's warning notice", timeout=30)
        [notice] = [n for n in hub.client("root-admin").get("/notices").json()["notices"]
                    if n["kind"] == "gpu-memory"]
        assert "GPU memory 4.2 GiB above this share's 4.0 GiB" in notice["message"]
        assert server_state(hub, "u1") is not None            # warned, not yet stopped
        wait_for(lambda: server_state(hub, "u1") is None, "u1's server to be stopped", timeout=60)
        ended = hub.client("root-admin").workload(greedy["id"])
        assert ended["state"] == "stopped" and "past the 4 s grace" in ended["reason"]
        audit = hub.client("root-admin").get("/audit", params={"target": greedy["id"]}).json()
        assert {"gpu-memory-warn", "gpu-memory-stop"} <= {a["action"] for a in audit["entries"]}

        # The fifth quarter takes the freed slot, on the same GPU.
        wait_for(lambda: (server_state(hub, "u5") or {}).get("ready"), "u5's server", timeout=120)
        pids |= server_pids(hub)
        assert notebook(hub, "u5")["device_uuids"] == [shared_uuid]
        assert notebook(hub, "u5")["id"] == waiting["id"]
    finally:
        stop_servers(hub, USERS)
        hub.stop()
        kill_leftover_servers(hub, pids)
