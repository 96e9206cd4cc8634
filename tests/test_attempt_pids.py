"""An attempt's processes, as the memory watch of shared GPUs counts them:
its command and everything that started, also what left the process group,
and nothing of the service's. With a real cgroup (root, cgroup v1) and
without one (the runner's descendants)."""
from __future__ import annotations

import os
import sys
import time
import uuid

import pytest

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.backends.local import LocalBackend
from gpuspawner.isolation.attempt_pids import cgroup_pids
from gpuspawner.isolation.cgroups import GpuEnforcement, own_cgroups
from gpuspawner.isolation.gpu_rules import CGROUP_V1

CGROUP_ROOT = "/sys/fs/cgroup"

# The command starts a child, one in a session of its own and an orphan
# (its parent shell has exited: a daemon's double fork), writes their PIDs
# and its own, and waits.
FAMILY = r"""
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
detached = subprocess.Popen(["sleep", "60"], start_new_session=True)
orphan = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True,
                        text=True).stdout.strip()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid} {detached.pid} {orphan}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def _can_make_cgroups() -> str:
    """Why real cgroups cannot be made here, or ''."""
    if os.geteuid() != 0:
        return "not root: cannot create cgroups"
    if not os.access(os.path.join(CGROUP_ROOT, "devices", "devices.deny"), os.W_OK):
        return "no writable cgroup v1 devices controller at /sys/fs/cgroup/devices"
    return ""


@pytest.fixture
def cgroup_enforcement():
    why = _can_make_cgroups()
    if why:
        print(f"skipping: {why}")
        pytest.skip(why)
    parent = f"gpuhub-test-pids-{uuid.uuid4().hex[:8]}"
    e = GpuEnforcement(cgroup_parent=parent).detect()
    assert e.gpu_mode == CGROUP_V1, e.notes
    yield e
    for controller in ("devices", "memory", "cpu"):
        path = os.path.join(CGROUP_ROOT, controller,
                            own_cgroups().get(controller, "/").lstrip("/"), parent)
        if os.path.isdir(path):
            os.rmdir(path)  # fails (the test with it) if the attempt's cgroup was left


def _start_family(backend, tmp_path):
    out = tmp_path / "pids"
    spec = LaunchSpec(f"nb{uuid.uuid4().hex[:6]}", 1, (sys.executable, "-c", FAMILY, str(out)),
                      str(tmp_path / "attempt"), str(tmp_path), devices=(0,))
    backend.start(spec)
    return spec, out


def _family(out):
    deadline = time.monotonic() + 20
    while not out.exists():
        assert time.monotonic() < deadline, "the job never wrote its PIDs"
        time.sleep(0.02)
    return frozenset(int(p) for p in out.read_text().split())


def _end(backend, spec):
    backend.kill(spec.workload_id, spec.attempt)
    deadline = time.monotonic() + 20
    while not backend.poll():
        assert time.monotonic() < deadline, "the attempt did not end"
        time.sleep(0.02)


@pytest.mark.parametrize("with_cgroup", [True, False])
def test_an_attempts_pids_are_its_command_and_all_it_started(tmp_path, request, with_cgroup):
    enforcement = request.getfixturevalue("cgroup_enforcement") if with_cgroup else None
    backend = LocalBackend(enforcement=enforcement)
    spec, out = _start_family(backend, tmp_path)
    try:
        family = _family(out)
        pids = backend.attempt_pids(spec.workload_id, spec.attempt)
        assert pids == family
        assert os.getpid() not in pids
        runner = backend._attempts[(spec.workload_id, spec.attempt)].pid
        assert runner not in pids        # the supervisor uses no GPU
    finally:
        _end(backend, spec)
    assert backend.attempt_pids(spec.workload_id, spec.attempt) is None


def test_a_cgroup_that_is_gone_is_unknown_not_empty(tmp_path):
    assert cgroup_pids([str(tmp_path / "no-such-cgroup")]) is None
