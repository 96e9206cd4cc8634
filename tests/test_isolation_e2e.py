"""One machine, many users, end to end (run as root, as in CI): on a real
hub every notebook server, job and model replica runs as its user's own
system account, cannot reach another user's workspace or the hub's data
directory, cannot signal other users' jobs or the service, and carries no
credential but its own user's scoped token.

A probe script, run inside alice's job and in a terminal of alice's
JupyterLab server, tries each of those things and reports the errno.
"""
from __future__ import annotations

import asyncio
import glob
import html
import json
import os
import re
import shutil
import sys
import tempfile
import time

import pytest
import requests

import preload
from gpuspawner.isolation.accounts import isolating
from hub_harness import ADMIN_TOKEN, Hub, wait_for
from procs import environ_of, uid_of
from test_local_spawner import Servers

pytestmark = pytest.mark.skipif(not isolating(), reason="user accounts need root "
                                                        "(CI runs the tests as root)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "serving", "iris")
SECRETS = ["gpuhub.sqlite", "jupyterhub.sqlite", "initial-users.json", "spawner-token",
           "jupyterhub_cookie_secret", "cookie_secret"]

PROBE = r'''
import errno, json, os, signal, sys
t = json.load(open(sys.argv[1]))
out = {"uid": os.getuid()}
def attempt(what, f):
    try:
        f()
        out[what] = "ok"
    except OSError as e:
        out[what] = errno.errorcode[e.errno]
attempt("list the data directory", lambda: os.listdir(t["data_dir"]))
for name in t["secrets"]:
    attempt("read " + name, lambda: open(os.path.join(t["data_dir"], name), "rb").read(1))
attempt("list bob's workspace", lambda: os.listdir(t["bob_workspace"]))
attempt("read bob's file", lambda: open(t["bob_file"]).read())
attempt("list all workspaces", lambda: os.listdir(os.path.dirname(t["bob_workspace"])))
attempt("kill bob's job", lambda: os.kill(t["bob_job"], signal.SIGKILL))
attempt("kill bob's job's runner", lambda: os.kill(t["bob_runner"], signal.SIGKILL))
attempt("kill the runner server", lambda: os.kill(t["runner_server"], signal.SIGKILL))
attempt("kill own job's runner", lambda: os.kill(t["own_runner"], signal.SIGKILL))
attempt("signal the service", lambda: os.kill(t["service"], 0))
attempt("signal the hub", lambda: os.kill(t["hub"], 0))
attempt("write own workspace", lambda: open(os.path.join(t["own"], "mine.txt"), "w").write("x"))
print("RESULT" + json.dumps(out, sort_keys=True) + "END", flush=True)
'''

WAIT_THEN_PROBE = (
    "import os, subprocess, sys, time\n"
    "while not os.path.exists('targets.json'):\n"
    "    time.sleep(0.1)\n"
    "subprocess.run([sys.executable, 'probe.py', 'targets.json'])\n")


@pytest.fixture(scope="module")
def preload_markers():
    """A real LD_PRELOAD library in every notebook server's environment (as
    the hub's configuration may put anything there): the server's exec
    loads it only after the privilege drop, so only users' uids mark it."""
    directory = tempfile.mkdtemp(prefix="gpuhub-test-preload-")
    os.chmod(directory, 0o755)
    try:
        yield preload.build(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, preload_markers):
    library, _ = preload_markers
    h = Hub(str(tmp_path_factory.mktemp("isolation")),
            groups={"team-a": ["alice", "dave"], "team-b": ["bob"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}},
                   "b": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}},
            extra_hub_config=f"c.Spawner.environment = {{'LD_PRELOAD': {library!r}}}\n",
            # team b's space is small and measured often (the storage quota test)
            extra_service_config='c.GpuHubService.team_storage_quotas = {"b": "1M"}\n'
                                 'c.GpuHubService.team_space_measure_interval = 0.5\n'
                                 'c.GpuHubService.team_space_sync_interval = 0.5\n')
    # As `gpuhub up` leaves it (with the admin's password): and readable by
    # anyone, as a data directory from before this release may have it.
    path = os.path.join(h.data_dir, "initial-users.json")
    with open(path, "w") as f:
        json.dump({"users": {"admin": "the-admins-password"}}, f)
    os.chmod(path, 0o644)
    try:
        yield h.start()
    finally:
        h.stop()


# ---- helpers ---------------------------------------------------------------

def processes(hub: Hub, user: str) -> dict[str, list[int]]:
    """The hub's processes of ``user`` by kind (server, job, replica), from
    what /proc says of them."""
    kinds: dict[str, list[int]] = {"server": [], "job": [], "replica": []}
    for path in glob.glob("/proc/[0-9]*/environ"):
        pid = int(path.split("/")[2])
        try:
            env, cmdline = environ_of(pid), open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if uid_of(pid) == 0:
            continue  # the runners: root's, only their children are the user's
        if (env.get("JUPYTERHUB_USER") == user and b"jupyterhub.singleuser" in cmdline
                and env.get("JUPYTERHUB_API_URL", "").startswith(hub.hub_api)):
            kinds["server"].append(pid)
        elif (env.get("GPUHUB_USER") == user
              and env.get("GPUHUB_ATTEMPT_DIR", "").startswith(hub.data_dir)):
            kinds["replica" if b"mlserver" in cmdline else "job"].append(pid)
    return kinds


def runner_pid(hub: Hub, wid: str) -> int:
    pattern = os.path.join(hub.data_dir, "workloads", wid, "attempt-*", "runner.json")
    with open(wait_for(lambda: glob.glob(pattern), f"{wid}'s runner.json")[0]) as f:
        return json.load(f)["pid"]


def child_of(pid: int) -> int:
    def find():
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = open(stat).read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                return int(stat.split("/")[2])
        return None
    return wait_for(find, f"the command under runner {pid}", 30)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def result(text: str) -> dict:
    m = re.search(r"RESULT(\{.*?\})END", text, re.S)
    return json.loads(m.group(1).replace("\r\n", "")) if m else {}


def expected(hub: Hub, user: str) -> dict:
    out = {"uid": hub.account(user).pw_uid, "write own workspace": "ok",
           "list the data directory": "EACCES", "list bob's workspace": "EACCES",
           "read bob's file": "EACCES", "list all workspaces": "EACCES",
           "kill bob's job": "EPERM", "kill bob's job's runner": "EPERM",
           "kill the runner server": "EPERM", "kill own job's runner": "EPERM",
           "signal the service": "EPERM", "signal the hub": "EPERM"}
    out.update({f"read {name}": "EACCES" for name in SECRETS})
    return out


async def terminal_run(hub: Hub, user: str, command: str, until: str, timeout=60) -> str:
    """Run ``command`` in a new terminal of the user's JupyterLab server, as
    a user typing it; the terminal's output up to ``until``."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect
    headers = {"Authorization": f"token {hub.token(user)}"}
    r = requests.post(f"{hub.url}/user/{user}/api/terminals", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    ws = await websocket_connect(HTTPRequest(
        f"ws://127.0.0.1:{hub.port}/user/{user}/terminals/websocket/{name}", headers=headers))
    await ws.write_message(json.dumps(["stdin", command + "\r"]))
    seen = ""
    deadline = time.monotonic() + timeout
    while until not in seen:
        try:
            msg = await asyncio.wait_for(ws.read_message(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise AssertionError(f"no {until!r} from the terminal; it said: {seen!r}") from None
        assert msg is not None, f"terminal closed; so far: {seen!r}"
        kind, *data = json.loads(msg)
        if kind == "stdout":
            seen += data[0]
    ws.close()
    return seen


# ---- tests ---------------------------------------------------------------

def test_servers_jobs_and_replicas_run_as_their_accounts_out_of_each_others_reach(
        hub, preload_markers):
    alice, bob = hub.client("alice"), hub.client("bob")
    assert requests.get(f"{hub.api}/health", timeout=10).json()["users_isolated"] is True
    bob_job = bob.submit(command=[sys.executable, "-c", "import time; time.sleep(300)"],
                         gpus=1, name="bobs")
    folder = hub.workspace_folder("alice")
    with open(os.path.join(folder, "probe.py"), "w") as f:
        f.write(PROBE)
    hub.give("alice", folder)
    alice_job = alice.submit(command=[sys.executable, "-c", WAIT_THEN_PROBE], gpus=1,
                             working_dir=os.path.basename(folder), name="probe")
    servers = Servers(hub, "alice")
    assert servers.start(pool="default", gpus=0).status_code in (201, 202)
    servers.wait_ready()
    for w in (bob_job, alice_job):
        hub.client("root-admin").wait(w["id"], "running", 60)

    bob_workspace = os.path.join(hub.data_dir, "workspaces", "bob")
    with open(os.path.join(bob_workspace, "notes.txt"), "w") as f:
        f.write("bob's notes")
    bob_runner = runner_pid(hub, bob_job["id"])
    targets = {"data_dir": hub.data_dir, "secrets": SECRETS, "bob_workspace": bob_workspace,
               "bob_file": os.path.join(bob_workspace, "notes.txt"), "own": folder,
               "bob_job": child_of(bob_runner), "bob_runner": bob_runner,
               "service": hub.service_pid(), "hub": hub.proc.pid,
               # root's, and every job's runner is a fork of it (backends/runner_server.py)
               "runner_server": parent_of(bob_runner),
               "own_runner": runner_pid(hub, alice_job["id"])}
    with open(f"/proc/{targets['runner_server']}/cmdline", "rb") as f:
        assert b"runner_server import main" in f.read()
    assert uid_of(targets["bob_job"]) == hub.account("bob").pw_uid
    assert [uid_of(p) for p in processes(hub, "alice")["server"]] == [hub.account("alice").pw_uid]
    assert all(os.path.exists(os.path.join(hub.data_dir, name)) for name in SECRETS)

    # In alice's job.
    with open(os.path.join(folder, "targets.json"), "w") as f:
        json.dump(targets, f)
    done = alice.wait(alice_job["id"], ("succeeded", "failed"), 60)
    log = alice.get(f"/workloads/{alice_job['id']}/logs").text
    assert done["state"] == "succeeded", log
    assert result(log) == expected(hub, "alice")

    # In a terminal of alice's JupyterLab server, as she would type it.
    out = asyncio.run(terminal_run(
        hub, "alice", f"cd {folder} && {sys.executable} probe.py targets.json", until="END"))
    # (her job has ended by now, and its runner with it: tried from inside the job above)
    assert result(out) == {**expected(hub, "alice"), "kill own job's runner": "ESRCH"}, out
    # (the shell's arithmetic: the echoed command line does not say "ls-done-2")
    out = asyncio.run(terminal_run(hub, "alice", f"ls {bob_workspace}; echo ls-done-$((1+1))",
                                   until="ls-done-2"))
    assert "Permission denied" in out, out
    # The server's environment (LD_PRELOAD) reached its processes as alice only.
    assert preload.loaded_by(preload_markers[1]) == {hub.account("alice").pw_uid}

    assert bob.workload(bob_job["id"])["state"] == "running"  # the kill did nothing
    bob.post(f"/workloads/{bob_job['id']}/cancel")
    servers.stop()


def test_every_token_in_a_users_process_acts_as_that_user_only(hub):
    """/proc/PID/environ of alice's server, job and model replica: every
    token-like value in them is tried on the hub and the service."""
    alice = hub.client("alice")
    folder = os.path.basename(hub.workspace_folder("alice"))
    train = alice.submit(command=[sys.executable, os.path.join(EXAMPLE, "train.py"),
                                  f"{folder}/iris"], gpus=0, name="train")
    assert alice.wait(train["id"], ("succeeded", "failed"), 120)["state"] == "succeeded", \
        alice.get(f"/workloads/{train['id']}/logs").text
    assert alice.post("/deployments", json={"name": "iris", "model_dir": f"{folder}/iris"}
                      ).status_code == 201
    job = alice.submit(command=[sys.executable, "-c", "import time; time.sleep(300)"], gpus=1)
    servers = Servers(hub, "alice")
    assert servers.start(pool="default", gpus=0).status_code in (201, 202)
    servers.wait_ready()
    hub.client("root-admin").wait(job["id"], "running", 60)
    kinds = wait_for(lambda: (lambda k: k if all(k.values()) else None)(processes(hub, "alice")),
                     "a server, a job and a replica of alice", 120)
    account = hub.account("alice").pw_uid
    # What the hub and the service hold (the service's own hub token, the
    # spawner's token): in no process of alice's, under any name.
    theirs = {value for pid in (hub.proc.pid, hub.service_pid())
              for key, value in environ_of(pid).items()
              if ("TOKEN" in key or "SECRET" in key) and len(value) >= 16}
    assert theirs, "the hub's and the service's credentials were not found"
    with pytest.raises(AssertionError):  # would the check catch the service's own token?
        acts_as(hub, environ_of(hub.service_pid())["JUPYTERHUB_API_TOKEN"])
    tried = {}
    for kind, pids in kinds.items():
        for pid in pids:
            assert uid_of(pid) == account, (kind, pid)
            env = environ_of(pid)
            assert not theirs & set(env.values()), (kind, sorted(k for k, v in env.items()
                                                                if v in theirs))
            for key, value in env.items():
                if "TOKEN" in key or "SECRET" in key or re.fullmatch(r"[A-Za-z0-9_-]{32,}", value):
                    tried[(kind, key)] = acts_as(hub, value)
    assert ("job", "GPUHUB_TOKEN") in tried and ("server", "JUPYTERHUB_API_TOKEN") in tried
    for (kind, key), who in tried.items():
        assert set(who) <= {"alice", None}, (kind, key, who)
    # What a job's token is for: the CLI, as alice, on the service only (the
    # service made it; the hub does not know it); the server's: JupyterLab, as alice.
    assert tried[("job", "GPUHUB_TOKEN")] == (None, "alice")
    assert tried[("server", "JUPYTERHUB_API_TOKEN")] == ("alice", "alice")
    job_token = environ_of(kinds["job"][0])["GPUHUB_TOKEN"]
    alice.post(f"/workloads/{job['id']}/cancel")
    alice.wait(job["id"], ("cancelled",), 60)
    gone = requests.get(f"{hub.api}/me", timeout=10,
                        headers={"Authorization": f"token {job_token}"})
    assert gone.status_code == 401, "a job's token ends with its attempt"
    assert "ends with its attempt" in gone.json()["error"]
    alice.request("DELETE", "/deployments/a/iris")
    servers.stop()


def acts_as(hub: Hub, token: str) -> tuple:
    """Who ``token`` is on the hub and on the service (None: nobody there),
    having checked it can do nothing beyond its user: list no users or
    groups on the hub, and is no GPU Hub admin. The hub is always asked: a
    hub token the service refuses (the service's own) is still one."""
    h = {"Authorization": f"token {token}"}
    r = requests.get(f"{hub.url}/hub/api/user", headers=h, timeout=10)
    on_hub = None
    if r.status_code == 200:
        model = r.json()  # a service's token is kind "service"
        kind = model.get("kind")
        on_hub = model["name"] if kind == "user" else f"{kind}:{model['name']}"
    else:
        assert r.status_code in (401, 403), (r.status_code, r.text[:200])
    for path in ("users", "groups"):
        r = requests.get(f"{hub.url}/hub/api/{path}", headers=h, timeout=10)
        assert r.status_code == 403, (path, r.status_code, r.text[:200])
    me = requests.get(f"{hub.api}/me", headers=h, timeout=10)
    on_service = None
    if me.status_code == 200:
        assert me.json()["admin"] is False, me.json()
        assert requests.get(f"{hub.api}/audit", headers=h, timeout=10).status_code == 403
        on_service = me.json()["name"]
    else:
        assert me.status_code in (401, 403), me.text
    return on_hub, on_service


def test_a_workspace_from_before_accounts_is_handed_over_on_first_use(hub):
    """An upgraded data directory: carol's workspace was made by root (jobs
    ran as root before). Her first submission hands it to her account and
    her job can change her old files."""
    workspace = os.path.join(hub.data_dir, "workspaces", "carol")
    os.makedirs(os.path.join(workspace, "old-project"))
    with open(os.path.join(workspace, "old-project", "results.txt"), "w") as f:
        f.write("from before\n")
    os.chmod(workspace, 0o755)
    hub.token("carol")  # creates her on the hub
    requests.post(f"{hub.url}/hub/api/groups/team-a/users", json={"users": ["carol"]},
                  headers={"Authorization": "token test-admin-token-0123456789abcdef"},
                  timeout=10).raise_for_status()
    carol = hub.client("carol")
    job = carol.submit(command=["sh", "-c", "echo appended >> results.txt && id -un"],
                       working_dir="old-project", gpus=0)
    done = carol.wait(job["id"], ("succeeded", "failed"), 60)
    log = carol.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "succeeded", log
    account = hub.account("carol")
    assert log.split() == [account.pw_name]
    with open(os.path.join(workspace, "old-project", "results.txt")) as f:
        assert f.read() == "from before\nappended\n"
    st = os.stat(workspace)
    assert (st.st_uid, st.st_mode & 0o777) == (account.pw_uid, 0o700)


def test_a_service_started_without_root_says_users_are_not_isolated(tmp_path):
    """A personal workstation: the service runs as an ordinary account. It
    says so at start and in /health rather than pretending."""
    import secrets
    import signal
    import subprocess
    import tempfile
    from gpuspawner.isolation.accounts import ensure_account
    from gpuspawner.serving.ports import ports_below_ephemeral
    prefix = f"t{secrets.token_hex(3)}-"
    home = tempfile.mkdtemp(prefix="gpuhub-test-owner-")
    os.chmod(home, 0o755)
    owner = ensure_account("owner", home, prefix)
    port = ports_below_ephemeral(1)
    log = open(tmp_path / "service.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuspawner.service", "-f", os.devnull],
        env={"PATH": os.environ["PATH"], "GPUHUB_DATA_DIR": os.path.join(home, "data"),
             "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}"},
        cwd=home, user=owner.uid, group=owner.gid, extra_groups=[], stdout=log,
        stderr=subprocess.STDOUT)
    try:
        health = wait_for(lambda: _get(f"http://127.0.0.1:{port}/services/gpuhub/api/v1/health"),
                          "the service's /health", 150)
        assert (health["status"], health["users_isolated"]) == ("ok", False)
        assert health["gpu_enforcement"] == "advisory"  # no cgroups without root either
        said = (tmp_path / "service.log").read_text()
        assert f"users are not isolated: this process runs as uid {owner.uid}, not root" in said
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
        subprocess.run(["userdel", "-f", owner.name], capture_output=True)
        subprocess.run(["rm", "-rf", home])


def _get(url: str):
    try:
        r = requests.get(url, timeout=5)
    except requests.RequestException:
        return None
    return r.json() if r.status_code == 200 else None


NOTICE = "Users are not isolated"


def admin_page(hub: Hub) -> requests.Response:
    """The admin panel's cluster page as an admin sees it (token, as a browser's cookie would)."""
    return requests.get(f"{hub.url}/services/gpuhub/admin/cluster", timeout=30,
                        headers={"Authorization": f"token {hub.token('root-admin')}"})


def test_the_admin_panel_warns_when_users_are_not_isolated(hub, tmp_path):
    """Every page of the panel says so when every job runs as the service's
    own account (here: root with user accounts off, as a personal
    workstation's single account would be), and not when users are apart."""
    page = admin_page(hub)
    assert page.status_code == 200 and "GPU enforcement" in page.text and NOTICE not in page.text
    shared = Hub(str(tmp_path), groups={"team-a": ["alice"]},
                 teams={"a": {"quotas": {"default": {"nominal": 1}}}},
                 extra_service_config="c.GpuHubService.user_accounts = False\n",
                 extra_hub_config="c.LocalGPUSpawner.user_accounts = False\n")
    try:
        shared.start()
        page = admin_page(shared)
        assert page.status_code == 200, page.text[:300]
        assert (f"{NOTICE}: every job and model replica runs as the service's own account "
                f"(uid {os.geteuid()})") in html.unescape(page.text)
        assert requests.get(f"{shared.api}/health", timeout=10).json()["users_isolated"] is False
    finally:
        shared.stop()


LIST_PROBE = r'''
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        os.listdir(path)
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print("RESULT" + json.dumps(out) + "END", flush=True)
'''


def test_another_team_cannot_list_a_teams_deployments_or_replicas(hub):
    """deployments/<team>/ (issue 29, item 8): bob (team b), from his own
    job, cannot list team a's deployment names, revisions or replica ids;
    alice's replica reaches its own directory (it serves), and alice's job
    lists it."""
    alice, bob = hub.client("alice"), hub.client("bob")
    folder = os.path.basename(hub.workspace_folder("alice"))
    train = alice.submit(command=[sys.executable, os.path.join(EXAMPLE, "train.py"),
                                  f"{folder}/iris"], gpus=0, name="train")
    assert alice.wait(train["id"], ("succeeded", "failed"), 120)["state"] == "succeeded"
    assert alice.post("/deployments", json={"name": "hidden", "model_dir": f"{folder}/iris"}
                      ).status_code == 201
    try:
        team = os.path.join(hub.data_dir, "deployments", "a")
        account = hub.account("alice").pw_uid
        replica = wait_for(lambda: [d for d in glob.glob(os.path.join(team, "hidden", "r1", "w*"))
                                    if os.stat(d).st_uid == account],
                           "alice's replica directory, handed to her account", 120)[0]
        paths = [team, os.path.join(team, "hidden"), os.path.join(team, "hidden", "r1"), replica]
        probe = [sys.executable, "-c", LIST_PROBE, *paths]
        seen = {}
        for who, client in (("bob", bob), ("alice", alice)):
            job = client.submit(command=probe, gpus=0, name="list")
            assert client.wait(job["id"], ("succeeded", "failed"), 60)["state"] == "succeeded"
            seen[who] = result(client.get(f"/workloads/{job['id']}/logs").text)
        assert seen["bob"] == {p: "EACCES" for p in paths}, seen
        assert seen["alice"][replica] == "ok", seen
    finally:
        alice.request("DELETE", "/deployments/a/hidden")


# dave's job writes in his team's space, then keeps reading it back until it cannot.
WRITE_THEN_WATCH = r"""
import errno, os, time
path = os.path.join(os.environ["GPUHUB_TEAM_DIR"], "from-dave.txt")
open(path, "w").write("dave was here")
print("WROTE", flush=True)
while True:
    try:
        open(path).read()
    except OSError as e:
        print("LOST", errno.errorcode[e.errno], flush=True)
        break
    time.sleep(0.2)
"""
READ = r"""
import errno, os, sys
def attempt(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode[e.errno]
print("ENV", os.environ.get("GPUHUB_TEAM_DIR") == sys.argv[1])
print("SAW", attempt(lambda: open(os.path.join(sys.argv[1], "from-dave.txt")).read()))
print("LISTED", attempt(lambda: ",".join(os.listdir(sys.argv[1]))))
print("HOME", os.path.realpath(os.path.expanduser("~/team")) == os.path.realpath(sys.argv[1]))
"""


def test_a_team_shares_its_space_and_a_member_who_leaves_loses_it_within_seconds(hub):
    alice, bob, dave = hub.client("alice"), hub.client("bob"), hub.client("dave")
    space = os.path.join(hub.data_dir, "teams", "a")
    wait_for(lambda: os.path.isdir(space), "team a's space")
    writer = dave.submit(command=[sys.executable, "-c", WRITE_THEN_WATCH], gpus=0, name="w")
    wait_for(lambda: "WROTE" in dave.get(f"/workloads/{writer['id']}/logs").text,
             "dave's job to write", 60)

    def output_of(client, team):
        job = client.submit(command=[sys.executable, "-c", READ, space], gpus=0, team=team)
        done = client.wait(job["id"], ("succeeded", "failed"), 60)
        log = client.get(f"/workloads/{job['id']}/logs").text
        assert done["state"] == "succeeded", log
        return log
    teammate = output_of(alice, "a")
    assert "SAW dave was here" in teammate and "ENV True" in teammate and "HOME True" in teammate
    outsider = output_of(bob, "b")
    assert "SAW EACCES" in outsider and "LISTED EACCES" in outsider

    # dave leaves team a: his running job loses the way in within seconds
    r = requests.delete(f"{hub.hub_api}/groups/team-a/users", json={"users": ["dave"]},
                        headers={"Authorization": f"token {ADMIN_TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text
    left = time.monotonic()
    wait_for(lambda: "LOST EACCES" in dave.get(f"/workloads/{writer['id']}/logs").text,
             "dave's job to lose the team's space", 30)
    assert time.monotonic() - left < 15
    assert "SAW dave was here" in output_of(alice, "a")  # nothing is lost


FILL = r"""
import os
open(os.path.join(os.environ["GPUHUB_TEAM_DIR"], "big.bin"), "wb").write(os.urandom(2 << 20))
"""


def test_a_team_over_its_storage_quota_is_refused_new_jobs_and_loses_no_data(hub):
    bob = hub.client("bob")
    job = bob.submit(command=[sys.executable, "-c", FILL], gpus=0, name="fill")
    assert bob.wait(job["id"], ("succeeded", "failed"), 60)["state"] == "succeeded"
    big = os.path.join(hub.data_dir, "teams", "b", "big.bin")
    try:
        team = wait_for(lambda: (t := bob.get("/teams/b").json())["storage"]["state"] == "full"
                        and t, "team b's space to be measured full", 30)
        assert team["storage"]["used_bytes"] >= 2 << 20 and team["storage"]["quota_bytes"] == 1 << 20
        r = bob.post("/workloads", json={"command": ["true"], "gpus": 0})
        assert r.status_code == 403 and r.json()["field"] == "team"
        assert "team b's space holds" in r.json()["error"]
        assert "nothing was deleted" in r.json()["error"]
        assert os.path.getsize(big) == 2 << 20                 # nothing is lost
        page = requests.get(f"{hub.url}/services/gpuhub/admin/teams", timeout=30,
                            headers={"Authorization": f"token {hub.token('root-admin')}"})
        assert 'data-state="full"' in page.text and "new jobs are refused" in page.text
        # an admin's own quota for the team wins over the configuration's at once (no
        # restart); removed, the configuration's holds again
        admin = hub.client("root-admin")
        r = admin.request("PATCH", "/teams/b", json={"storage_quota": "10M"})
        assert r.status_code == 200 and r.json()["storage"]["state"] == "ok"
        assert bob.post("/workloads", json={"command": ["true"], "gpus": 0}).status_code == 201
        r = admin.request("PATCH", "/teams/b", json={"storage_quota": "none"})
        assert r.json()["storage"]["quota_bytes"] == 1 << 20
        assert bob.post("/workloads", json={"command": ["true"], "gpus": 0}).status_code == 403
        assert os.path.getsize(big) == 2 << 20
    finally:
        os.unlink(big)  # what bob would do from his notebook's terminal
    wait_for(lambda: bob.get("/teams/b").json()["storage"]["state"] == "ok",
             "team b's space to be measured again", 30)
    assert bob.post("/workloads", json={"command": ["true"], "gpus": 0}).status_code == 201
