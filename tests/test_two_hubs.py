"""Two hubs on one host (issue 29, item 6): each hub's cgroups and accounts
carry its own tag (isolation/identity.py), so stopping one hub never
kills the other's servers or jobs, and neither adopts the other's
accounts. Run as root with a writable cgroup v1, as in CI: real hubs,
real accounts, real cgroups."""
from __future__ import annotations

import glob
import json
import logging
import os
import pwd
import secrets
import subprocess
import sys

import pytest

from gpuspawner.isolation import cgroups, identity
from gpuspawner.isolation.placement import enter
from gpuspawner.isolation.accounts import AccountError, Accounts, isolating, marker
from hub_harness import Hub, wait_for
from procs import uid_of
from test_local_spawner import Servers

CGROUP_ROOT = "/sys/fs/cgroup"


def _why_not() -> str:
    if not isolating():
        return "user accounts and cgroups need root (CI runs the tests as root)"
    if not os.access(os.path.join(CGROUP_ROOT, "devices", "devices.deny"), os.W_OK):
        return f"no writable cgroup v1 devices controller at {CGROUP_ROOT}/devices"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")
TEAMS = {"vision": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}}


class OwnHub(Hub):
    """A harness hub with the product's own identity: no test cgroup parent
    and no test account prefix, so both come from its data directory's tag,
    as for a hub someone started with `gpuhub up`."""

    def __init__(self, workdir: str, **kw):
        super().__init__(workdir, **kw)
        line = f"c.GpuEnforcement.cgroup_parent = {self.cgroup_parent!r}\n"
        for path in (self.hub_cfg, os.path.join(workdir, "gpuhub_config.py")):
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text.replace(line, ""))
        del self.env["GPUHUB_ACCOUNT_PREFIX"]
        self.tag = identity.hub_tag(self.data_dir)
        self.cgroup_parent = identity.cgroup_parent(self.tag)
        self.account_prefix = identity.account_prefix(self.tag)


@pytest.fixture(scope="module")
def hubs(tmp_path_factory):
    started = []
    try:
        for name in ("a", "b"):
            h = OwnHub(str(tmp_path_factory.mktemp(f"hub-{name}")),
                       groups={"team-vision": ["alice"]}, teams=TEAMS)
            started.append(h)
            h.start()
        yield started
    finally:
        for h in started:
            h.stop()


def job_pid(hub: Hub, wid: str) -> int:
    """The pid of a running job's command (the runner's only child)."""
    pattern = os.path.join(hub.data_dir, "workloads", wid, "attempt-*", "runner.json")
    with open(wait_for(lambda: glob.glob(pattern), f"{wid}'s runner.json")[0]) as f:
        runner = json.load(f)["pid"]
    return int(wait_for(lambda: open(f"/proc/{runner}/task/{runner}/children").read().split(),
                        f"{wid}'s command")[0])


def cgroup_of(pid: int, controller: str = "devices") -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stopping_hub_b_leaves_hub_a_s_server_and_job_running(hubs):
    a, b = hubs
    assert a.tag != b.tag
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    jobs = {}
    for h in (a, b):
        wid = h.client("alice").submit(command=sleep, gpus=1)["id"]
        h.client("alice").wait(wid, "running", timeout=90)
        jobs[h.tag] = (wid, job_pid(h, wid))
    server = Servers(a, "alice")
    r = server.start()
    assert r.status_code in (201, 202), r.text
    server.wait_ready()
    server_pid = server.server_process()[0]

    # Each hub's alice is its own account, marked with its hub's tag, and
    # each hub's processes are in its own cgroup parent.
    (a_wid, a_job), (b_wid, b_job) = jobs[a.tag], jobs[b.tag]
    a_account, b_account = pwd.getpwuid(uid_of(a_job)), pwd.getpwuid(uid_of(b_job))
    assert a_account.pw_uid != b_account.pw_uid
    assert (a_account.pw_name, b_account.pw_name) == (f"gpuhub-{a.tag}-alice",
                                                      f"gpuhub-{b.tag}-alice")
    assert a_account.pw_gecos == marker("alice", a.tag)
    assert b_account.pw_gecos == marker("alice", b.tag)
    assert uid_of(server_pid) == a_account.pw_uid
    assert f"/{a.cgroup_parent}/" in cgroup_of(a_job)
    assert f"/{a.cgroup_parent}/" in cgroup_of(server_pid)
    assert f"/{b.cgroup_parent}/" in cgroup_of(b_job)

    b.stop()  # the hub, then what the harness cleans after it: its jobs, cgroups, accounts

    assert not alive(b_job)
    assert b.cgroup_parents() == []  # its own parent went, hub A's stays
    assert a.cgroup_parents()
    # Hub A's work is untouched: the same processes, in their cgroups, as alice.
    assert alive(a_job) and alive(server_pid)
    assert uid_of(a_job) == uid_of(server_pid) == a_account.pw_uid
    assert f"/{a.cgroup_parent}/" in cgroup_of(a_job)
    assert a.client("alice").workload(a_wid)["state"] == "running"
    assert server.server()["ready"]
    assert pwd.getpwnam(a_account.pw_name).pw_gecos == marker("alice", a.tag)
    server.stop()


# ---- accounts: what a second hub does with the first hub's ------------------

@pytest.fixture
def prefix(account_prefix):
    return account_prefix


def two_hubs(tmp_path, prefix: str, same_prefix: bool):
    """Hubs A and B on data directories of their own: (tag, Accounts) each."""
    out = []
    for name in ("a", "b"):
        data = tmp_path / name
        data.mkdir()
        tag = identity.hub_tag(str(data))
        own = prefix if same_prefix else f"{prefix}{tag[:4]}-"
        out.append((tag, Accounts(own, lambda user, d=data: str(d / "workspaces" / user),
                                  tag=tag, legacy_prefix=f"{prefix}old-")))
    return out


@pytest.mark.parametrize("same_prefix", [True, False])
def test_hub_b_never_adopts_hub_a_s_account(tmp_path, prefix, same_prefix):
    (a_tag, a), (b_tag, b) = two_hubs(tmp_path, prefix, same_prefix)
    alice = a.ensure("alice")
    if same_prefix:
        # The same name, marked by hub A: hub B refuses to run as it.
        with pytest.raises(AccountError, match="is not hub user alice's on this hub"):
            b.ensure("alice")
    else:
        assert b.ensure("alice").uid != alice.uid
    entry = pwd.getpwnam(alice.name)
    assert (entry.pw_gecos, entry.pw_dir) == (marker("alice", a_tag), alice.home)


def test_an_upgraded_hub_keeps_its_accounts_from_before_tags_and_another_hub_does_not(
        tmp_path, prefix):
    """An account made by a hub from before tags (its name with the old
    prefix, its mark the user's hash alone) is the hub's whose data
    directory holds its home; that hub re-marks it with its tag."""
    (a_tag, a), (b_tag, b) = two_hubs(tmp_path, prefix, same_prefix=False)
    old_name, home = f"{prefix}old-alice", a.home_for("alice")
    subprocess.run(["useradd", "--user-group", "--no-create-home", "--home-dir", home,
                    "--comment", marker("alice"), old_name], check=True)
    old_uid = pwd.getpwnam(old_name).pw_uid

    assert b.ensure("alice").uid != old_uid  # its home is in A's data directory
    assert pwd.getpwnam(old_name).pw_gecos == marker("alice")
    kept = a.ensure("alice")
    assert (kept.name, kept.uid) == (old_name, old_uid)
    assert pwd.getpwnam(old_name).pw_gecos == marker("alice", a_tag)
    assert os.stat(home).st_uid == old_uid


# ---- a kill says who and why --------------------------------------------------

def test_removing_a_cgroup_with_a_process_in_it_logs_who_is_killed_and_why(tmp_path, caplog):
    e = cgroups.GpuEnforcement(hub_tag=f"t{secrets.token_hex(3)}").detect()
    placement = e.create("kill-log", [0])
    proc = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: enter(placement))
    try:
        with caplog.at_level(logging.WARNING):
            assert cgroups.remove(placement, reason="a test stops it") == []
        assert proc.wait(10) == -9
        text = caplog.text
        assert f"SIGKILL to sleep (pids {proc.pid})" in text and "a test stops it" in text
    finally:
        if proc.poll() is None:
            proc.kill()
        for parent in e._parents.values():
            os.rmdir(parent)
