"""GPU enforcement and limits of local jobs, with the real kernel.

Run as root on cgroup v1 (as CI does). The GPUs are fake: character devices
made with mknod, major 195 like the real ones, in a temporary directory.
With no driver behind them, an open() that the cgroup and the file mode let
through fails with ENXIO ("no such device or address"); one the device
cgroup refuses fails with EPERM, one the file mode refuses with EACCES.
That is what a job prints for every node, directly and from a child that
set CUDA_VISIBLE_DEVICES to every GPU first.
"""
from __future__ import annotations

import grp
import json
import os
import pathlib
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import requests

from gpuspawner.backends.base import EXITED, LaunchSpec
from gpuspawner.backends.local import CGROUP_FILE, LocalBackend
from gpuspawner.isolation.cgroups import GpuEnforcement, own_cgroups
from gpuspawner.isolation.gpu_rules import ADVISORY, CGROUP_V1, DEVICE_GROUPS, LIMITS_CGROUP_V1
from gpuspawner.serving.ports import ports_below_ephemeral

CGROUP_ROOT = "/sys/fs/cgroup"

if os.geteuid() != 0 or not os.access(os.path.join(CGROUP_ROOT, "devices", "devices.deny"),
                                      os.W_OK):
    pytest.skip("needs root and a writable cgroup v1 devices controller (CI has both)",
                allow_module_level=True)

# Tries every node given (argv); then a forked child that set
# CUDA_VISIBLE_DEVICES to every GPU, as a job that ignores the scheduler
# would, tries again. Drops to $PROBE_AS=UID:GID first (keeping its groups),
# as a job run as a user account would.
PROBE = r"""
import errno, json, os, sys
if os.environ.get("PROBE_AS"):
    uid, gid = map(int, os.environ["PROBE_AS"].split(":"))
    os.setgid(gid)
    os.setuid(uid)
def attempt(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return "opened"
    except OSError as e:
        return errno.errorcode[e.errno]
def probe(nodes):
    return {"uid": os.getuid(), "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
            "opens": {os.path.basename(p): attempt(p) for p in nodes}}
nodes = sys.argv[1:]
out = probe(nodes)
r, w = os.pipe()
if os.fork() == 0:
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(nodes)))
    os.write(w, json.dumps(probe(nodes)).encode())
    os._exit(0)
os.close(w)
os.wait()
out["reset"] = json.loads(os.read(r, 65536))
print(json.dumps(out), flush=True)
"""


@pytest.fixture
def fake_gpus():
    """/dev-like directory: nvidia0, nvidia1 (195:0, 195:1) and nvidiactl
    (195:255), where a dropped-privilege process reaches it."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="gpuhub-fake-dev-"))
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        os.mknod(d / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        os.chmod(d / name, 0o666)  # whatever the umask
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


@pytest.fixture
def cgroup_parent():
    """A cgroup parent of this test's own; it must be empty at the end, and is removed."""
    parent = f"gpuhub-test-{uuid.uuid4().hex[:8]}"
    yield parent
    mine = own_cgroups()
    leftovers = []
    for controller in ("devices", "memory", "cpu", "pids"):
        path = os.path.join(CGROUP_ROOT, controller, mine.get(controller, "/").lstrip("/"), parent)
        if os.path.isdir(path):
            children = [c for c in os.listdir(path) if os.path.isdir(os.path.join(path, c))]
            leftovers += [f"{controller}/{c}" for c in children]
            for c in children:
                os.rmdir(os.path.join(path, c))
            os.rmdir(path)
    assert leftovers == [], "cgroups left behind"


@pytest.fixture
def enforcement(cgroup_parent):
    """A factory of detected GpuEnforcement under the test's cgroup parent."""
    return lambda **traits: GpuEnforcement(cgroup_parent=cgroup_parent, **traits).detect()


def run_job(backend, tmp_path, argv, gpus, team="", pool="default", env=None, attempt=1):
    spec = LaunchSpec(f"job{uuid.uuid4().hex[:6]}", attempt, tuple(argv),
                      str(tmp_path / f"attempt-{uuid.uuid4().hex[:6]}"), str(tmp_path),
                      env=env or {}, devices=tuple(gpus), team=team, pool=pool)
    backend.start(spec)
    exits = wait_for(backend.poll, 20)
    assert len(exits) == 1
    with open(LocalBackend.log_path(spec.attempt_dir)) as f:
        return spec, exits[0], f.read()


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


@pytest.mark.parametrize("gpu, mine, other", [(0, "nvidia0", "nvidia1"),
                                              (1, "nvidia1", "nvidia0")])
def test_a_one_gpu_job_opens_its_gpu_and_gets_eperm_on_the_other_even_as_root(
        tmp_path, fake_gpus, enforcement, gpu, mine, other):
    e = enforcement()
    assert e.gpu_mode == CGROUP_V1
    backend = LocalBackend(enforcement=e)
    nodes = [str(fake_gpus / n) for n in ("nvidia0", "nvidia1", "nvidiactl")]
    spec, ended, log = run_job(backend, tmp_path, [sys.executable, "-c", PROBE, *nodes],
                               [gpu])
    assert (ended.reason, ended.returncode) == (EXITED, 0), log
    out = json.loads(log.strip().splitlines()[-1])
    assert out["uid"] == 0 and out["cuda"] == str(gpu)
    want = {mine: "ENXIO", other: "EPERM", "nvidiactl": "ENXIO"}
    assert out["opens"] == want
    # A child that names every GPU in CUDA_VISIBLE_DEVICES is held the same.
    assert out["reset"]["cuda"] == "0,1,2" and out["reset"]["opens"] == want
    # The attempt's cgroup is gone with it.
    assert not os.path.exists(os.path.join(spec.attempt_dir, CGROUP_FILE))


def test_the_service_itself_is_not_held(fake_gpus):
    """What the jobs get EPERM on, the host (here: the test) can open."""
    for n in ("nvidia0", "nvidia1"):
        with pytest.raises(OSError) as err:
            os.open(fake_gpus / n, os.O_RDWR)
        assert err.value.strerror == "No such device or address"


def test_a_zero_gpu_job_opens_no_gpu(tmp_path, fake_gpus, enforcement):
    backend = LocalBackend(enforcement=enforcement())
    nodes = [str(fake_gpus / n) for n in ("nvidia0", "nvidia1", "nvidiactl")]
    _, ended, log = run_job(backend, tmp_path, [sys.executable, "-c", PROBE, *nodes], [])
    out = json.loads(log.strip().splitlines()[-1])
    assert out["opens"] == {"nvidia0": "EPERM", "nvidia1": "EPERM", "nvidiactl": "ENXIO"}


@pytest.mark.parametrize("given", [[], [253], [0, 127]])
def test_every_gpu_not_given_is_refused_up_to_the_last_minor(tmp_path, enforcement, given):
    """A placement's device rules (one per minor not given, up to 254) go to
    the kernel through one open file: the last rule holds as the first does."""
    d = tmp_path / "dev"
    d.mkdir()
    minors = (0, 1, 127, 253)
    for minor in minors:
        os.mknod(d / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    backend = LocalBackend(enforcement=enforcement())
    _, ended, log = run_job(backend, tmp_path, [sys.executable, "-c", PROBE,
                                                *(str(d / f"nvidia{m}") for m in minors)], given)
    out = json.loads(log.strip().splitlines()[-1])
    assert out["opens"] == {f"nvidia{m}": "ENXIO" if m in given else "EPERM" for m in minors}


READ_LIMITS = r"""
import os
for line in open("/proc/self/cgroup"):
    _, names, path = line.strip().split(":", 2)
    for c, f in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us"),
                 ("cpu", "cpu.cfs_period_us"), ("pids", "pids.max")):
        if c in names.split(","):
            print(f, open(f"/sys/fs/cgroup/{c}{path}/{f}").read().strip())
"""


@pytest.mark.parametrize("team, pool, memory, quota", [
    ("ml", "default", 256 << 20, 150_000),    # the team's memory, the pool's CPUs
    ("cv", "default", 512 << 20, 150_000),    # the pool's
    ("cv", "other", 768 << 20, 50_000),       # the default
])
def test_limits_are_set_as_configured(tmp_path, enforcement, team, pool, memory, quota):
    e = enforcement(team_limits={"ml": {"memory": "256M"}},
                    pool_limits={"default": {"memory": "512M", "cpus": 1.5}},
                    default_limits={"memory": "768M", "cpus": 0.5})
    assert e.limits_mode == LIMITS_CGROUP_V1
    _, ended, log = run_job(LocalBackend(enforcement=e), tmp_path,
                            [sys.executable, "-c", READ_LIMITS], [0], team=team, pool=pool)
    assert ended.returncode == 0, log
    seen = dict(line.split() for line in log.strip().splitlines())
    assert seen == {"memory.limit_in_bytes": str(memory), "cpu.cfs_quota_us": str(quota),
                    "cpu.cfs_period_us": "100000", "pids.max": "1024"}


@pytest.mark.parametrize("traits, asked, memory, quota, pids", [
    # nothing configured, nothing asked: the job kind's default, never unlimited
    ({}, {}, 8 << 30, 100_000, "1024"),
    # the request is the limit
    ({}, {"cpus": 0.5, "memory": 300 << 20}, 300 << 20, 50_000, "1024"),
    # ... capped by the team's limit
    ({"team_limits": {"ml": {"memory": "256M", "cpus": 0.25}}},
     {"cpus": 0.5, "memory": 300 << 20}, 256 << 20, 25_000, "1024"),
    ({"config": {"WorkloadResources": {"pids_limit": 64, "job": {"cpus": 2, "memory": "1G"}}}},
     {}, 1 << 30, 200_000, "64"),
])
def test_every_job_gets_finite_memory_cpu_and_pids_limits(tmp_path, cgroup_parent, traits,
                                                          asked, memory, quota, pids):
    from traitlets.config import Config
    config = Config(traits.pop("config", {}))
    e = GpuEnforcement(cgroup_parent=cgroup_parent, config=config, **traits).detect()
    assert e.limits_mode == LIMITS_CGROUP_V1 == "cgroup-v1 memory, cpu, pids"
    backend = LocalBackend(enforcement=e)
    spec = LaunchSpec(f"job{uuid.uuid4().hex[:6]}", 1, (sys.executable, "-c", READ_LIMITS),
                      str(tmp_path / "attempt"), str(tmp_path), team="ml", pool="default",
                      cpus=asked.get("cpus"), memory=asked.get("memory"))
    backend.start(spec)
    ended = wait_for(backend.poll, 20)[0]
    log = open(LocalBackend.log_path(spec.attempt_dir)).read()
    assert ended.returncode == 0, log
    seen = dict(line.split() for line in log.strip().splitlines())
    assert seen == {"memory.limit_in_bytes": str(memory), "cpu.cfs_quota_us": str(quota),
                    "cpu.cfs_period_us": "100000", "pids.max": pids}


def test_a_cpu_only_job_is_limited_without_a_devices_controller(tmp_path, cgroup_parent,
                                                                monkeypatch):
    """The limits do not hang on GPU enforcement: a host whose GPUs are
    advisory still holds every job to its memory, CPUs and pids."""
    real = GpuEnforcement._usable
    monkeypatch.setattr(GpuEnforcement, "_usable",
                        lambda self, c, mine: None if c == "devices" else real(self, c, mine))
    e = GpuEnforcement(cgroup_parent=cgroup_parent, dev_dir=str(tmp_path)).detect()
    assert (e.gpu_mode, e.limits_mode) == (ADVISORY, "cgroup-v1 memory, cpu, pids")
    assert e.report()["limits"] == "cgroup-v1 memory, cpu, pids"
    _, ended, log = run_job(LocalBackend(enforcement=e), tmp_path,
                            [sys.executable, "-c", READ_LIMITS], [])
    assert ended.returncode == 0, log
    seen = dict(line.split() for line in log.strip().splitlines())
    assert seen == {"memory.limit_in_bytes": str(8 << 30), "cpu.cfs_quota_us": "100000",
                    "cpu.cfs_period_us": "100000", "pids.max": "1024"}


FORK_MANY = r"""
import os, time
made, refused = 0, 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(2); os._exit(0)
        made += 1
    except BlockingIOError:
        refused += 1
print("made", made, "refused", refused, flush=True)
"""


def test_a_fork_bomb_stops_at_the_pids_limit(tmp_path, cgroup_parent):
    from traitlets.config import Config
    e = GpuEnforcement(cgroup_parent=cgroup_parent,
                       config=Config({"WorkloadResources": {"pids_limit": 20}})).detect()
    _, ended, log = run_job(LocalBackend(enforcement=e), tmp_path,
                            [sys.executable, "-c", FORK_MANY], [])
    made, refused = int(log.split()[1]), int(log.split()[3])
    assert made < 20 and refused > 0, log


def test_a_job_over_its_memory_limit_is_killed(tmp_path, enforcement):
    e = enforcement(default_limits={"memory": "64M"})
    grow = ("import sys; chunks = []\n"
            "for i in range(64):\n"
            "    chunks.append(bytearray(16 << 20)); print(i * 16, 'MiB', flush=True)\n"
            "print('survived', flush=True)")
    _, ended, log = run_job(LocalBackend(enforcement=e), tmp_path, [sys.executable, "-c", grow],
                            [0])
    assert "survived" not in log
    assert (ended.reason, ended.returncode) == (EXITED, -9), log  # the OOM killer's SIGKILL


def test_a_restarted_service_removes_the_cgroup_of_an_attempt_that_ended(tmp_path, enforcement):
    e = enforcement()
    first = LocalBackend(enforcement=e)
    spec = LaunchSpec("jobr", 1, (sys.executable, "-c", "print('done')"),
                      str(tmp_path / "attempt-r"), str(tmp_path), devices=(0,))
    first.start(spec)
    with open(os.path.join(spec.attempt_dir, CGROUP_FILE)) as f:
        paths = json.load(f)["cgroups"]
    assert paths and all(os.path.isdir(p) for p in paths)
    wait_for(lambda: os.path.exists(os.path.join(spec.attempt_dir, "exit.json")), 10)
    # The service "restarts": a new backend finds the ended attempt (or adopts
    # its runner, still finishing, and sees it end at a poll).
    second = LocalBackend(enforcement=e)
    wait_for(lambda: second.recover([spec]) or second.poll(), 10)
    assert not any(os.path.exists(p) for p in paths)
    first.poll()  # reaps the runner


# ---- the fallback: per-GPU device groups -------------------------------------

@pytest.fixture
def account():
    """A throwaway system account, removed afterwards."""
    name = f"gpuhubt{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True, capture_output=True)


@pytest.fixture
def group_prefix():
    prefix = f"gpuhubt{uuid.uuid4().hex[:4]}-gpu"
    yield prefix
    for g in grp.getgrall():
        if g.gr_name.startswith(prefix):
            subprocess.run(["groupdel", g.gr_name], check=True, capture_output=True)


@pytest.mark.parametrize("gpu, mine, other", [(0, "nvidia0", "nvidia1"),
                                              (1, "nvidia1", "nvidia0")])
def test_device_groups_give_a_user_job_its_gpu_and_eacces_on_the_other(
        tmp_path, fake_gpus, enforcement, account, group_prefix, gpu, mine, other):
    e = enforcement(mode="groups", dev_dir=str(fake_gpus), group_prefix=group_prefix)
    assert e.gpu_mode == DEVICE_GROUPS
    state = str(tmp_path / "device-groups.json")
    e.setup_device_groups(state)
    try:
        for n in ("nvidia0", "nvidia1"):
            st = os.stat(fake_gpus / n)
            assert stat.S_IMODE(st.st_mode) == 0o660
            assert grp.getgrgid(st.st_gid).gr_name == f"{group_prefix}{n[-1]}"
        nodes = [str(fake_gpus / n) for n in ("nvidia0", "nvidia1", "nvidiactl")]
        argv = [sys.executable, "-c", PROBE, *nodes]
        backend = LocalBackend(enforcement=e)
        _, ended, log = run_job(backend, tmp_path, argv, [gpu],
                                env={"PROBE_AS": f"{account.pw_uid}:{account.pw_gid}"})
        assert ended.returncode == 0, log
        out = json.loads(log.strip().splitlines()[-1])
        want = {mine: "ENXIO", other: "EACCES", "nvidiactl": "ENXIO"}
        assert out["uid"] == account.pw_uid and out["opens"] == want
        assert out["reset"]["opens"] == want
        # Root is not bound by file modes: this mode says so (docs/service.md).
        _, _, log = run_job(backend, tmp_path, argv, [gpu])
        assert json.loads(log.strip().splitlines()[-1])["opens"][other] == "ENXIO"
    finally:
        GpuEnforcement.restore_device_groups(state)
    for n in ("nvidia0", "nvidia1", "nvidiactl"):
        st = os.stat(fake_gpus / n)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o666, 0, 0)
    assert not os.path.exists(state)


# ---- the service: what it reports, and device groups given back on a clean stop -----------

@pytest.fixture
def service(tmp_path, cgroup_parent):
    """Starts the real service (no hub) with extra config lines; stops it by PID."""
    procs = []

    def start(config: str):
        port = ports_below_ephemeral(1)
        cfg = tmp_path / "gpuhub_config.py"
        cfg.write_text("c = get_config()\n"
                       "c.GpuHubService.log_level = 'INFO'\n"
                       f"c.GpuEnforcement.cgroup_parent = {cgroup_parent!r}\n"
                       "c.Inventory.source = 'declared'\n"
                       "c.Inventory.declared = [{'model': 'Fake GPU', 'count': 2, "
                       "'memory_mib': 16384, 'pool': 'default'}]\n" + config)
        env = dict(os.environ, GPUHUB_DATA_DIR=str(tmp_path / "data"), GPUHUB_DB_URL="",
                   JUPYTERHUB_SERVICE_URL=f"http://127.0.0.1:{port}")
        log = open(tmp_path / "service.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "gpuspawner.service", "-f", str(cfg)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}/services/gpuhub/api/v1/health"

        def health():
            assert proc.poll() is None, (tmp_path / "service.log").read_text()
            try:
                return requests.get(url, timeout=2).json()
            except requests.RequestException:
                return None
        return proc, wait_for(health, 180)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_service_sets_up_device_groups_and_gives_the_nodes_back_on_a_clean_stop(
        fake_gpus, group_prefix, service, tmp_path):
    proc, health = service(f"c.GpuEnforcement.mode = 'groups'\n"
                           f"c.GpuEnforcement.dev_dir = {str(fake_gpus)!r}\n"
                           f"c.GpuEnforcement.group_prefix = {group_prefix!r}\n")
    # The limits do not hang on the GPU mode: memory, CPUs and pids are held anyway.
    assert (health["gpu_enforcement"], health["limits"]) == (DEVICE_GROUPS, LIMITS_CGROUP_V1)
    for n in ("nvidia0", "nvidia1"):
        st = os.stat(fake_gpus / n)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert grp.getgrgid(st.st_gid).gr_name == f"{group_prefix}{n[-1]}"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    for n in ("nvidia0", "nvidia1", "nvidiactl"):
        st = os.stat(fake_gpus / n)
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o666, 0)
    assert not (tmp_path / "data" / "device-groups.json").exists()
    log = (tmp_path / "service.log").read_text()
    assert f"GPU enforcement: device groups; limits: {LIMITS_CGROUP_V1}" in log


def test_a_service_told_not_to_enforce_says_advisory(service, tmp_path):
    _, health = service("c.GpuEnforcement.mode = 'off'\n"
                        "c.GpuEnforcement.default_limits = {'memory': '1G'}\n")
    assert (health["gpu_enforcement"], health["limits"]) == ("advisory", "not enforced")
    assert "memory/CPU limits are configured but cannot be enforced here" in health["notes"]


def test_a_bad_limit_stops_the_start_naming_the_field(tmp_path):
    cfg = tmp_path / "gpuhub_config.py"
    cfg.write_text("c = get_config()\nc.Inventory.source = 'declared'\n"
                   "c.GpuEnforcement.pool_limits = {'default': {'memory': 'lots'}}\n")
    r = subprocess.run([sys.executable, "-m", "gpuspawner.service", "-f", str(cfg)],
                       env=dict(os.environ, GPUHUB_DATA_DIR=str(tmp_path / "data"),
                                GPUHUB_DB_URL=""),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "GpuEnforcement.pool_limits['default'].memory: 'lots' is not a memory size" in r.stderr


# ---- device groups bind only processes that do not run as root ----------------------------

@pytest.mark.parametrize("processes_as_root, mode", [(False, DEVICE_GROUPS), (True, ADVISORY)],
                         ids=["users-accounts", "everything-as-root"])
def test_device_groups_where_everything_runs_as_root_are_advisory(tmp_path, fake_gpus,
                                                                   processes_as_root, mode):
    """No devices controller (cgroup_root without one), the GPU nodes there:
    device groups, unless user accounts are off, so every server and job
    runs as root, which file modes do not hold: then advisory, saying why."""
    e = GpuEnforcement(cgroup_root=str(tmp_path / "no-controllers"),
                       dev_dir=str(fake_gpus)).detect(processes_as_root=processes_as_root)
    assert e.gpu_mode == mode
    assert any("would bind nothing" in n for n in e.notes) == processes_as_root


def test_a_service_without_user_accounts_reports_device_groups_as_advisory(fake_gpus, service,
                                                                            tmp_path):
    _, health = service(f"c.GpuHubService.user_accounts = False\n"
                        f"c.GpuEnforcement.cgroup_root = {str(tmp_path / 'none')!r}\n"
                        f"c.GpuEnforcement.dev_dir = {str(fake_gpus)!r}\n")
    assert (health["gpu_enforcement"], health["users_isolated"]) == (ADVISORY, False)
    assert any("device groups would bind nothing" in n for n in health["notes"]), health
    assert stat.S_IMODE(os.stat(fake_gpus / "nvidia0").st_mode) == 0o666  # left as they were
    assert not any("GPU shares" in n for n in health["notes"])  # no pool shares its GPUs


def test_health_says_when_shares_cannot_be_held_to_their_memory(fake_gpus, service, tmp_path):
    """Without cgroups a notebook server's processes cannot be found, so a
    share of a GPU is not watched: /health says so."""
    _, health = service(f"c.GpuHubService.user_accounts = False\n"
                        f"c.GpuHubService.gpu_sharing = {{'default': 4}}\n"
                        f"c.GpuEnforcement.cgroup_root = {str(tmp_path / 'none')!r}\n"
                        f"c.GpuEnforcement.dev_dir = {str(fake_gpus)!r}\n")
    assert any("GPU shares (default) are watched only where their processes can be found" in n
               for n in health["notes"]), health
