"""LocalGPUSpawner end to end: a real JupyterHub, real notebook servers, the
scheduler service and four fake GPUs."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from hub_harness import Hub, wait_for


# Team a's servers and jobs: 1 GiB and 2 CPUs (read by the hub's spawner
# and by the service).
LIMITS = 'c.GpuEnforcement.team_limits = {"a": {"memory": "1G", "cpus": 2}}\n'
# A server on a busy machine may take more than JupyterHub's 30 s to answer.
SLOW = "c.Spawner.http_timeout = 120\n"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("spawnhub")),
            groups={"team-a": ["alice", "amy"], "team-b": ["bob"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}},
                   "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}},
            extra_service_config='c.GpuHubService.notebook_gpu_limits = {"b": {"default": 1}}\n'
                                 "c.GpuHubService.reconcile_interval = 1\n"
                                 "c.GpuHubService.reconcile_grace = 3\n" + LIMITS,
            extra_hub_config="c.Spawner.poll_interval = 2\n" + LIMITS + SLOW)
    try:
        yield h.start()
    finally:
        h.stop()


class Servers:
    def __init__(self, hub: Hub, user: str):
        self.hub, self.user = hub, user
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"token {hub.token(user)}"
        self.base = f"{hub.url}/hub/api/users/{user}"

    def start(self, **options) -> requests.Response:
        return self.s.post(f"{self.base}/server", json=options, timeout=60)

    def stop(self) -> None:
        r = self.s.delete(f"{self.base}/server", timeout=60)
        assert r.status_code in (202, 204), r.text
        self.wait(lambda srv: srv is None, "stopped")

    def server(self):
        return self.s.get(self.base, timeout=10).json()["servers"].get("")

    def wait(self, done, what, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            srv = self.server()
            if done(srv):
                return srv
            time.sleep(0.5)
        raise AssertionError(f"{self.user}'s server not {what}: {self.server()}")

    def wait_ready(self):
        return self.wait(lambda srv: srv is not None and srv["ready"], "ready")

    def workloads(self):
        return [w for w in requests.get(f"{self.hub.api}/workloads",
                                        params={"user": self.user, "kind": "notebook"},
                                        headers={"Authorization": f"token {self.hub.token('root-admin')}"},
                                        timeout=10).json()["workloads"]]

    def server_env(self) -> dict:
        """The environment of the user's single-user server process."""
        return self.server_process()[1]

    def server_process(self) -> tuple[int, dict]:
        """The pid and environment of the user's single-user server process."""
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                with open(path, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            except OSError:
                continue
            if (env.get(b"JUPYTERHUB_USER") == self.user.encode()
                    and env.get(b"JUPYTERHUB_API_URL", b"").startswith(self.hub.hub_api.encode())):
                return (int(path.split("/")[2]),
                        {k.decode(): v.decode() for k, v in env.items()})
        raise AssertionError(f"no server process of {self.user}")


def workload_in_state(hub: Hub, wid: str, state: str, timeout: float) -> dict:
    admin = {"Authorization": f"token {hub.token('root-admin')}"}

    def get():
        w = requests.get(f"{hub.api}/workloads/{wid}", headers=admin, timeout=10).json()
        return w if w["state"] == state else None
    return wait_for(get, f"workload {wid} {state}", timeout)


def progress_messages(servers: Servers, want: str, timeout=30) -> list[str]:
    import json
    seen = []
    with servers.s.get(f"{servers.base}/server/progress", stream=True, timeout=timeout) as r:
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]).get("message", ""))
                if want in seen[-1]:
                    break
    return seen


def test_second_server_queues_until_the_first_stops(hub):
    alice, amy = Servers(hub, "alice"), Servers(hub, "amy")
    assert alice.start(pool="default", gpus=2).status_code in (201, 202)
    alice.wait_ready()
    alice_gpus = alice.server_env()["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(alice_gpus) == 2
    assert alice.server_env()["GPUHUB_URL"].endswith("/services/gpuhub")
    # Her file browser lists her home through gpuhub_lab's contents manager
    # (a file renamed mid-listing does not fail the folder: test_lab_contents.py).
    pid, _ = alice.server_process()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"gpuhub_lab.contents.ListingContentsManager" in f.read()
    home = alice.s.get(f"{hub.url}/user/alice/api/contents", timeout=30)
    assert home.status_code == 200 and home.json()["type"] == "directory", home.text

    assert amy.start(pool="default", gpus=2).status_code == 202
    seen = progress_messages(amy, "position 1 in team a's queue")
    assert any("waiting for 2 × default GPUs" in m for m in seen), seen
    assert amy.server() is not None and not amy.server()["ready"]

    alice.stop()
    assert [w["state"] for w in alice.workloads()] == ["stopped"]
    amy.wait_ready()
    amy_gpus = amy.server_env()["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(amy_gpus) == 2 and all(g in "0123" for g in amy_gpus)
    amy.stop()
    states = [w["state"] for w in amy.workloads()]
    assert states == ["stopped"]
    pool = requests.get(f"{hub.api}/pools", headers={"Authorization": f"token {hub.token('amy')}"},
                        timeout=10).json()["pools"][0]
    assert pool["used"] == 0


def test_named_servers_are_each_admitted_and_counted(hub):
    """JupyterHub's named servers (the embedded hub allows them): each one is
    a workload of its own, against the same team quota."""
    amy = Servers(hub, "amy")
    named = f"{hub.url}/hub/api/users/amy/servers"
    assert amy.start(pool="default", gpus=1).status_code in (201, 202)
    r = amy.s.post(f"{named}/train", json={"pool": "default", "gpus": 1}, timeout=60)
    assert r.status_code in (201, 202), r.text
    amy.wait_ready()
    wait_for(lambda: (amy.s.get(amy.base, timeout=10).json()["servers"].get("train") or {})
             .get("ready"), "amy's server 'train' ready", 120)
    running = sorted((w["name"], w["gpus"]) for w in amy.workloads() if w["state"] == "running")
    assert running == [("", 1), ("train", 1)]
    # The team's quota (2) is full: a third server waits for one of them.
    assert amy.s.post(f"{named}/more", json={"pool": "default", "gpus": 1},
                      timeout=60).status_code == 202
    waiting = wait_for(lambda: [w for w in amy.workloads() if w["name"] == "more"
                                and w["state"] == "queued"
                                and "team a holds 2 default GPUs" in w["reason"]],
                       "the third server queued behind the team's quota", 30)
    r = amy.s.delete(f"{named}/train", timeout=60)
    assert r.status_code in (202, 204), r.text
    workload_in_state(hub, waiting[0]["id"], "running", 120)
    amy.s.delete(f"{named}/more", timeout=60)
    amy.stop()
    wait_for(lambda: not [w for w in amy.workloads() if w["state"] in ("running", "queued")],
             "amy's servers stopped", 120)


@pytest.mark.parametrize("user, options, words", [
    ("alice", {"pool": "default", "gpus": 3}, "team a may hold at most 2 default GPUs"),
    ("bob", {"pool": "default", "gpus": 2}, "notebook server of team b may hold at most 1"),
    ("alice", {"pool": "tpu", "gpus": 1}, "unknown pool 'tpu'"),
    ("alice", {"pool": "default", "gpus": "many"}, "whole number"),
])
def test_over_limit_requests_are_refused_before_anything_starts(hub, user, options, words):
    servers = Servers(hub, user)
    before = len(servers.workloads())
    r = servers.start(**options)
    assert r.status_code == 400, r.text
    assert words in r.json()["message"]
    assert servers.server() is None
    assert len(servers.workloads()) == before


def test_a_failed_gpu_spawn_does_not_poison_the_next_cpu_spawn(hub):
    bob = Servers(hub, "bob")
    assert bob.start(pool="default", gpus=5).status_code == 400
    assert bob.start(gpus=0).status_code in (201, 202)
    bob.wait_ready()
    env = bob.server_env()
    # No GPU, but a workload of 0 GPUs: its CPUs and memory are counted.
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["GPUHUB_WORKLOAD_ID"]
    bob.stop()
    workload_in_state(hub, env["GPUHUB_WORKLOAD_ID"], "stopped", 30)


def test_a_crashed_server_gives_its_gpus_back_once(hub):
    alice = Servers(hub, "alice")
    assert alice.start(pool="default", gpus=1).status_code in (201, 202)
    alice.wait_ready()
    env = alice.server_env()
    wid = env["GPUHUB_WORKLOAD_ID"]
    pids = [int(p.split("/")[2]) for p in glob.glob("/proc/[0-9]*/environ")
            if _env_has(p, b"GPUHUB_WORKLOAD_ID=" + wid.encode())]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    alice.wait(lambda srv: srv is None, "noticed dead", timeout=60)
    admin = {"Authorization": f"token {hub.token('root-admin')}"}
    workload_in_state(hub, wid, "stopped", 30)
    events = requests.get(f"{hub.api}/workloads/{wid}/events", headers=admin, timeout=10).json()["events"]
    assert [e["type"] for e in events].count("finished") == 1
    # Releasing again (a late stop) changes nothing.
    r = requests.post(f"{hub.api}/workloads/{wid}/release", headers=admin, json={"reason": "again"},
                      timeout=10)
    assert r.status_code == 200 and r.json()["state"] == "stopped"
    events = requests.get(f"{hub.api}/workloads/{wid}/events", headers=admin, timeout=10).json()["events"]
    assert [e["type"] for e in events].count("finished") == 1


def _env_has(path: str, needle: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def test_users_cannot_release_or_cancel_a_notebook(hub):
    amy = Servers(hub, "amy")
    assert amy.start(pool="default", gpus=1).status_code in (201, 202)
    amy.wait_ready()
    wid = amy.server_env()["GPUHUB_WORKLOAD_ID"]
    h = {"Authorization": f"token {hub.token('amy')}"}
    assert requests.post(f"{hub.api}/workloads/{wid}/release", headers=h, timeout=10).status_code == 403
    r = requests.delete(f"{hub.api}/workloads/{wid}", headers=h, timeout=10)
    assert r.status_code == 409 and "hub" in r.json()["error"]
    assert requests.get(f"{hub.api}/workloads/{wid}", headers=h, timeout=10).json()["state"] == "running"
    amy.stop()


def test_gpus_of_a_server_the_hub_no_longer_has_are_released(hub):
    """A server that stopped while the service was down could not release
    its GPUs; the service finds it by asking the hub (reconcile_interval)."""
    admin = {"Authorization": f"token {hub.token('root-admin')}"}
    r = requests.post(f"{hub.api}/workloads", headers=admin, timeout=10,
                      json={"kind": "notebook", "user": "bob", "team": "b", "pool": "default",
                            "gpus": 1, "name": "ghost"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    w = workload_in_state(hub, wid, "stopped", 30)
    assert "reconciled" in w["reason"]


def test_hub_restart_releases_the_gpus_exactly_once(hub):
    """On shutdown the hub stops its services before the servers, so the
    spawner cannot report the stop; after the restart the service finds the
    server gone and releases its GPUs, once."""
    amy = Servers(hub, "amy")
    assert amy.start(pool="default", gpus=2).status_code in (201, 202)
    amy.wait_ready()
    wid = amy.server_env()["GPUHUB_WORKLOAD_ID"]
    hub.stop()
    hub.start()
    admin = {"Authorization": f"token {hub.token('root-admin')}"}
    workload_in_state(hub, wid, "stopped", 60)
    events = requests.get(f"{hub.api}/workloads/{wid}/events", headers=admin, timeout=10).json()
    assert [e["type"] for e in events["events"]].count("finished") == 1
    pool = requests.get(f"{hub.api}/pools", headers=admin, timeout=10).json()["pools"][0]
    assert pool["used"] == 0
    # And the team can use its GPUs again.
    assert amy.start(pool="default", gpus=2).status_code in (201, 202)
    amy.wait_ready()
    amy.stop()


# ---- GPU enforcement and limits (cgroup v1; CI runs as root) ----------------------------------

needs_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/sys/fs/cgroup/devices/devices.deny", os.W_OK),
    reason="needs root and a writable cgroup v1 devices controller (CI has both)")


@pytest.fixture
def fake_gpus():
    """nvidia0..3 (major 195 and mode 0666 like the real ones) in a temporary
    /dev-like directory that users' accounts can reach."""
    d = tempfile.mkdtemp(prefix="gpuhub-fake-dev-")
    for i in range(4):
        node = os.path.join(d, f"nvidia{i}")
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, i))
        os.chmod(node, 0o666)  # whatever the umask
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


# What opening each node gives: ENXIO (no driver behind the fake node, but
# allowed), EPERM (refused by the device cgroup).
ATTEMPT = ("import errno, json, os, sys\n"
           "def attempt(p):\n"
           "    try:\n"
           "        os.close(os.open(p, os.O_RDWR)); return 'opened'\n"
           "    except OSError as e:\n"
           "        return errno.errorcode[e.errno]\n")


def opens_from(cgroups: list[str], nodes: list[str]) -> dict[str, str]:
    """What a process in exactly these cgroups gets opening each node."""
    def enter():
        for path in cgroups:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    code = ATTEMPT + "print(json.dumps({os.path.basename(p): attempt(p) for p in sys.argv[1:]}))"
    return json.loads(subprocess.check_output([sys.executable, "-c", code, *nodes],
                                              preexec_fn=enter))


def cgroups_of(pid: int) -> dict[str, str]:
    """controller -> cgroup directory of a process."""
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, names, path = line.strip().split(":", 2)
            for c in ("devices", "memory", "cpu", "pids"):
                if c in names.split(","):
                    out[c] = f"/sys/fs/cgroup/{c}{path}"
    return out


def read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


@needs_cgroups
def test_a_notebook_server_can_open_only_its_gpu_and_has_its_teams_limits(hub, fake_gpus):
    alice = Servers(hub, "alice")
    assert alice.start(pool="default", gpus=1).status_code in (201, 202)
    alice.wait_ready()
    pid, env = alice.server_process()
    mine = int(env["CUDA_VISIBLE_DEVICES"])
    cgroups = cgroups_of(pid)
    assert all(path in hub.cgroups() for path in cgroups.values()), (cgroups, hub.cgroups())
    assert read(cgroups["memory"] + "/memory.limit_in_bytes") == str(1 << 30)
    assert read(cgroups["cpu"] + "/cpu.cfs_quota_us") == "200000"
    assert read(cgroups["pids"] + "/pids.max") == "1024"  # a fork bomb stops there
    # A process in the server's cgroups, as root, even with CUDA_VISIBLE_DEVICES reset.
    nodes = [os.path.join(fake_gpus, f"nvidia{i}") for i in range(4)]
    opens = opens_from(list(cgroups.values()), nodes)
    assert opens == {f"nvidia{i}": "ENXIO" if i == mine else "EPERM" for i in range(4)}
    alice.stop()
    assert not any(os.path.exists(p) for p in cgroups.values())


@needs_cgroups
def test_a_job_through_the_hub_can_open_only_its_gpu(hub, fake_gpus):
    alice = hub.client("alice")
    folder = hub.workspace_folder("alice")
    nodes = [os.path.join(fake_gpus, f"nvidia{i}") for i in range(4)]
    code = (ATTEMPT + "gpu = os.environ['CUDA_VISIBLE_DEVICES']  # as the backend set it\n"
            "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1,2,3'  # ignoring the scheduler\n"
            f"print(json.dumps({{'gpu': gpu, "
            f"'opens': {{os.path.basename(p): attempt(p) for p in {nodes!r}}}}}))")
    job = alice.submit(command=[sys.executable, "-c", code], gpus=1, pool="default", team="a",
                       working_dir=folder)
    done = alice.wait(job["id"], ("succeeded", "failed"), timeout=60)
    log = alice.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "succeeded", log
    out = json.loads(log.strip().splitlines()[-1])
    mine = int(out["gpu"])
    assert out["opens"] == {f"nvidia{i}": "ENXIO" if i == mine else "EPERM" for i in range(4)}
    assert hub.cgroups() == []  # the job's cgroups went with it


def test_health_and_the_heat_map_say_how_gpus_and_limits_are_enforced(hub):
    root = os.geteuid() == 0 and os.access("/sys/fs/cgroup/devices/devices.deny", os.W_OK)
    gpu, limits = (("cgroup-v1 devices", "cgroup-v1 memory, cpu, pids") if root
                   else ("advisory", "not enforced"))
    health = requests.get(f"{hub.api}/health", timeout=10).json()
    assert (health["status"], health["gpu_enforcement"], health["limits"]) == ("ok", gpu, limits)
    r = requests.get(f"{hub.url}/services/gpuhub/admin/cluster", params={"fragment": 1},
                     headers={"Authorization": f"token {hub.token('root-admin')}"}, timeout=10)
    assert r.status_code == 200, r.text
    assert f"GPU enforcement: {gpu}" in r.text and f"Limits: {limits}" in r.text
