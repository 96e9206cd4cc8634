"""A real JupyterHub + configurable-http-proxy + GPU Hub service for tests.

The hub runs the project's embedded config (hub_config/) with the few test
overrides: DummyAuthenticator, declared fake GPUs, fast cycles, and a test
admin service whose token mints user tokens. Everything is started in its
own process group and stopped by PID; jobs the service started (which
outlive the service by design) are killed through their runner records.
"""
from __future__ import annotations

import atexit
import glob
import json
import os
import grp
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Optional

import requests

from gpuspawner.isolation.cgroups import own_cgroups, remove
from gpuspawner.isolation.placement import Placement
from gpuspawner.isolation.identity import hub_tag
from gpuspawner.isolation.team_spaces import group_prefix
from gpuspawner.isolation.accounts import isolating, unreachable
from gpuspawner.serving.ports import ports_below_ephemeral

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN_TOKEN = "test-admin-token-0123456789abcdef"
# On a machine busy with other work the hub and its service may need longer
# to start than the defaults allow (seconds).
SLOW_START = float(os.environ.get("GPUHUB_TEST_HUB_START_TIMEOUT", 0))


def free_port_block(n: int = 4) -> int:
    """A port p with p..p+n-1 free (the hub uses four consecutive ports),
    below the kernel's ephemeral range: a port the kernel hands out as the
    source of some outgoing connection between this check and the hub's
    bind would make the hub fail with "Address already in use"."""
    return ports_below_ephemeral(n)


class Hub:
    def __init__(self, workdir: str, *, groups: dict[str, list[str]], teams: dict,
                 gpus: int = 4, db_url: str = "", admins: tuple[str, ...] = ("root-admin",),
                 extra_service_config: str = "", extra_hub_config: str = "",
                 gpu_uuids: bool = False):
        self.workdir = workdir
        # Run as root (as in CI), users get system accounts: this hub's own
        # prefix, so parallel runs never share one, and stop() deletes them.
        self.account_prefix = f"t{secrets.token_hex(3)}-"
        self.data_dir = data_dir_in(workdir)
        self.port = free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/services/gpuhub/api/v1"
        # What the hub's notebook servers have as JUPYTERHUB_API_URL.
        self.hub_api = f"http://127.0.0.1:{self.port + 1}/hub/api"
        self.groups = groups
        self.admins = admins
        self.db_url = db_url
        self.proc: Optional[subprocess.Popen] = None
        self.tokens: dict[str, str] = {}
        # This hub's servers and jobs get their cgroups here (removed by stop()).
        self.cgroup_parent = f"gpuhub-test-{self.port}"
        enforcement = f"c.GpuEnforcement.cgroup_parent = {self.cgroup_parent!r}\n"
        hub_cfg = os.path.join(workdir, "jupyterhub_config.py")
        svc_cfg = os.path.join(workdir, "gpuhub_config.py")
        # The fake GPUs' CUDA UUIDs, as NVML would give real ones (fake_uuid).
        uuids = f', "uuids": {[fake_uuid(i) for i in range(gpus)]!r}' if gpu_uuids else ""
        with open(hub_cfg, "w") as f:
            f.write(textwrap.dedent(f"""
                c = get_config()
                load_subconfig({os.path.join(ROOT, 'hub_config', 'jupyterhub_config.py')!r})
                c.JupyterHub.authenticator_class = "dummy"
                c.DummyAuthenticator.password = "test-password"
                c.Authenticator.admin_users = {set(admins)!r}
                c.JupyterHub.load_groups = {{g: {{"users": u}} for g, u in {groups!r}.items()}}
                c.JupyterHub.load_groups["gpuhub-admins"] = {{"users": {list(admins)!r}}}
                c.JupyterHub.services.append({{"name": "test-admin", "api_token": {ADMIN_TOKEN!r}}})
                c.JupyterHub.load_roles.append({{"name": "test-admin", "services": ["test-admin"],
                    "scopes": ["admin:users", "tokens", "admin:groups", "list:users"]}})
                c.JupyterHub.log_level = {os.environ.get("GPUHUB_TEST_HUB_LOG", "WARN")!r}
                # A loaded CI machine may need more than JupyterHub's 30 s to
                # import and start the service.
                for service in c.JupyterHub.services:
                    if service.get("command"):
                        service["timeout"] = max(150, int({SLOW_START!r} or 0))
                c.Spawner.http_timeout = 120  # the same for a notebook server
            """) + enforcement + textwrap.dedent(extra_hub_config))
        with open(svc_cfg, "w") as f:
            f.write(textwrap.dedent(f"""
                c = get_config()
                c.Inventory.source = "declared"
                c.Inventory.declared = [{{"model": "Fake GPU", "count": {gpus}, "memory_mib": 16384,
                                          "pool": "default"{uuids}}}]
                c.GpuHubService.teams = {teams!r}
                c.GpuHubService.cycle_interval = 0.2
                c.GpuHubService.default_grace_period = 3
                c.GpuHubService.group_cache_seconds = 0
                c.GpuHubService.preemption_delay = 0.5
                # The fake node declares room for the tests' concurrent work (the CI
                # host has 2 cores); a test of CPU admission declares its own.
                c.GpuHubService.node_resources = {{"cpus": 64, "memory": "512G"}}
            """) + enforcement + extra_service_config)
        self.env = dict(os.environ, GPUHUB_DATA_DIR=self.data_dir, GPUHUB_PORT=str(self.port),
                        GPUHUB_CONFIG=svc_cfg, GPUHUB_DB_URL=db_url,
                        GPUHUB_ACCOUNT_PREFIX=self.account_prefix)
        self.hub_cfg = hub_cfg

    # ---- lifecycle ---------------------------------------------------------
    def start(self, timeout: float = 180) -> "Hub":
        timeout = SLOW_START or timeout
        self.log = open(os.path.join(self.workdir, "hub.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", self.hub_cfg],
                                     cwd=self.workdir, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hub exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(f"{self.api}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"service not ready after {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        with open(os.path.join(self.workdir, "hub.log"), "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")

    def service_pid(self) -> int:
        with open(os.path.join(self.data_dir, "service.pid")) as f:
            return int(f.read())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.proc:
            # A hub that died by itself (say, on a port it could not bind)
            # leaves its proxy in the hub's own process group.
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.kill_jobs()
        self.kill_servers()
        self.remove_cgroups()
        self.delete_accounts()
        if getattr(self, "log", None):
            self.log.close()

    def account(self, user: str) -> pwd.struct_passwd:
        """The system account a hub user's processes run as."""
        from gpuspawner.isolation.accounts import account_name
        return pwd.getpwnam(account_name(user, self.account_prefix))

    def delete_accounts(self) -> None:
        for entry in pwd.getpwall():
            if entry.pw_name.startswith(self.account_prefix):
                # -f: a process of it may still be exiting after its SIGKILL.
                subprocess.run(["userdel", "-f", entry.pw_name], capture_output=True)
        teams = group_prefix(hub_tag(self.data_dir))  # the team spaces' groups
        for group in grp.getgrall():
            if group.gr_name.startswith(teams):
                subprocess.run(["groupdel", group.gr_name], capture_output=True)

    def workspace_folder(self, user: str) -> str:
        """A new folder in the user's workspace, where a spawned server's
        files are (the service runs jobs only inside a user's workspace);
        the user's, as if they had made it."""
        workspace = os.path.join(self.data_dir, "workspaces", user)
        os.makedirs(workspace, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="files-", dir=workspace)
        if isolating():
            os.chmod(folder, 0o755)
            self.give(user, folder)
        return folder

    def give(self, user: str, path: str) -> None:
        """Make a file the test wrote in a workspace the user's (their
        account's, once it exists: the hand-over at the first spawn or
        submission takes what is there already)."""
        try:
            account = self.account(user)
        except KeyError:
            return
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), account.pw_uid, account.pw_gid)
        os.lchown(path, account.pw_uid, account.pw_gid)

    def kill_jobs(self) -> None:
        """Jobs outlive the service on purpose; the test ends them."""
        for path in glob.glob(os.path.join(self.data_dir, "workloads", "*", "*", "runner.json")):
            try:
                with open(path) as f:
                    pgid = json.load(f)["pgid"]
                os.killpg(pgid, signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass

    def kill_servers(self) -> None:
        """Notebook servers and services of this hub that outlived it (a test
        failed before stopping them), and its proxy when the hub was killed
        and not started again (the proxy runs in a session of its own)."""
        needle = f"JUPYTERHUB_API_URL={self.hub_api}".encode()
        proxy = [b"--port", str(self.port).encode()]
        for pid in (int(p.split("/")[2]) for p in glob.glob("/proc/[0-9]*/environ")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    ours = needle in f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if ours or (any(b"configurable-http-proxy" in a for a in argv)
                            and any(argv[i:i + 2] == proxy for i in range(len(argv)))):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def cgroup_parents(self) -> list[str]:
        """Where this hub's servers and jobs get their cgroups (the hub and
        the service are in this process's cgroups)."""
        mine = own_cgroups()
        paths = [os.path.join("/sys/fs/cgroup", c, mine.get(c, "/").lstrip("/"),
                              self.cgroup_parent) for c in ("devices", "memory", "cpu", "pids")]
        return [p for p in paths if os.path.isdir(p)]

    def cgroups(self) -> list[str]:
        """The cgroup directories of this hub's servers and jobs."""
        return sorted(os.path.join(parent, c) for parent in self.cgroup_parents()
                      for c in os.listdir(parent) if os.path.isdir(os.path.join(parent, c)))

    def remove_cgroups(self) -> None:
        """What the service and spawner did not remove (a test failed first),
        then the parents."""
        for path in self.cgroups():
            remove(Placement([path]))
        for parent in self.cgroup_parents():
            os.rmdir(parent)

    # ---- clients -------------------------------------------------------------
    def token(self, user: str) -> str:
        if user not in self.tokens:
            headers = {"Authorization": f"token {ADMIN_TOKEN}"}
            r = requests.post(f"{self.url}/hub/api/users/{user}", headers=headers, timeout=10)
            assert r.status_code in (201, 409), r.text
            r = requests.post(f"{self.url}/hub/api/users/{user}/tokens", headers=headers,
                              json={"note": "test", "expires_in": 3600}, timeout=10)
            assert r.status_code == 201, r.text
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]

    def client(self, user: str) -> "Client":
        return Client(self.api, self.token(user))


def fake_uuid(index: int) -> str:
    """The CUDA UUID of fake GPU ``index`` of a Hub(gpu_uuids=True)."""
    return f"GPU-00000000-0000-4000-8000-{index:012x}"


def data_dir_in(workdir: str) -> str:
    """``workdir/data``, the same one for a hub started again there. Run as
    root, it is a link to a directory outside pytest's 0700 temporary
    directories (which every new pytest run makes 0700 again), so users'
    accounts can reach their workspaces in it; removed when the tests end."""
    link = os.path.join(workdir, "data")
    if not isolating():
        os.makedirs(link, exist_ok=True)
        return link
    if not os.path.exists(link):
        os.makedirs(workdir, exist_ok=True)
        target = tempfile.mkdtemp(prefix="gpuhub-test-data-")
        os.chmod(target, 0o711)
        atexit.register(shutil.rmtree, target, ignore_errors=True)
        os.symlink(target, link)
    return os.path.realpath(link)


def traversable(path: str) -> None:
    """Let other accounts pass through (not list) the directories above
    ``path``: pytest's temporary directories are 0700."""
    while (blocked := unreachable(path)) is not None:
        os.chmod(blocked, os.stat(blocked).st_mode | 0o001)


def wait_for(predicate, what: str = "condition", timeout: float = 60):
    """Poll until ``predicate()`` is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


class Client:
    def __init__(self, api: str, token: str):
        self.api = api
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {token}"

    def request(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return self.session.request(method, self.api + path, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def submit(self, **spec) -> dict:
        r = self.post("/workloads", json=spec)
        assert r.status_code == 201, r.text
        return r.json()

    def workload(self, wid: str) -> dict:
        r = self.get(f"/workloads/{wid}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, wid: str, states, timeout: float = 60) -> dict:
        states = (states,) if isinstance(states, str) else tuple(states)
        deadline = time.monotonic() + timeout
        while True:
            w = self.workload(wid)
            if w["state"] in states:
                return w
            if time.monotonic() > deadline:
                raise AssertionError(f"{wid} is {w['state']} ({w['reason']}), not {states}")
            time.sleep(0.2)
