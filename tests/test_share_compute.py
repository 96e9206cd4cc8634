"""What holds a share of a GPU: MPS where a daemon runs and the GPU's shares are one user's,
time-sliced (and labelled so) otherwise; the environment its processes get."""
import os
import subprocess

import pytest

from gpuspawner.isolation.share_compute import (MPS_PID_FILE, gpu_enforcement,
                                                mps_daemon_running, share_enforcement)

PIPE = "/run/gpuhub-mps/GPU-0"


def enforce(**kw):
    args = dict(limit_mib=36096, compute_pct=25, account="alice", other_accounts=(),
                mps_pipe_directory=PIPE, mps_running=True, attempt_dir="/srv/attempts/nb-1/1")
    return share_enforcement(**{**args, **kw})


@pytest.mark.parametrize("kw, mps, env, note", [
    # a daemon, and the GPU's other shares are alice's too: MPS with both limits
    ({"other_accounts": ("alice",)}, True,
     {"CUDA_MPS_PIPE_DIRECTORY": PIPE, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=36096M",
      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}, None),
    # a fractional compute share is rounded up: the share never gets less than asked
    ({"compute_pct": 12.5}, True,
     {"CUDA_MPS_PIPE_DIRECTORY": PIPE, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=36096M",
      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "13"}, None),
    # no compute share asked: the memory limit only
    ({"compute_pct": None}, True,
     {"CUDA_MPS_PIPE_DIRECTORY": PIPE, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=36096M"}, None),
    # bob has a share of this GPU: alice's would wait for his MPS server to end, so no MPS,
    # and a pipe directory where no daemon listens
    ({"other_accounts": ("alice", "bob")}, False,
     {"CUDA_MPS_PIPE_DIRECTORY": "/srv/attempts/nb-1/1/no-mps"}, "another user's shares"),
    ({"mps_running": False}, False,
     {"CUDA_MPS_PIPE_DIRECTORY": "/srv/attempts/nb-1/1/no-mps"}, "no MPS daemon is running"),
    ({"mps_pipe_directory": None, "mps_running": False}, False, {}, "this pool runs no MPS"),
])
def test_mps_only_where_a_daemon_serves_one_user(kw, mps, env, note):
    e = enforce(**kw)
    assert (e.mps, e.advisory, e.env) == (mps, not mps, env)
    assert e.notes == [] if note is None else (len(e.notes) == 1 and note in e.notes[0])
    if not mps:
        assert e.labels["compute"].startswith("time-sliced (advisory)")


def test_labels_name_the_figures():
    e = enforce()
    assert e.labels == {
        "memory": "enforced: allocations past 35.2 GiB fail (MPS); watched every 5 s: warned "
                  "above 35.2 GiB, stopped 30 s later (at once above 38.8 GiB)",
        "compute": "MPS: at most 25% of the GPU's SMs"}
    assert enforce(mps_running=False).labels["memory"] == (
        "enforced by the watch: watched every 5 s: warned above 35.2 GiB, stopped 30 s later "
        "(at once above 38.8 GiB)")


@pytest.mark.parametrize("mps_flags, compute", [
    ((True, True), "MPS (enforced)"),
    ((True, False, False), "MPS for 1 of 3 shares, the others time-sliced (advisory)"),
    ((False,), "time-sliced (advisory)"),
])
def test_a_shared_gpus_label(mps_flags, compute):
    shares = [enforce(mps_running=m) for m in mps_flags]
    assert gpu_enforcement(s.mps for s in shares)["compute"] == compute


def test_the_daemon_is_found_by_its_pid_file(tmp_path):
    assert not mps_daemon_running(str(tmp_path))                  # no pid file
    (tmp_path / MPS_PID_FILE).write_text(f"{os.getpid()}\n")
    assert mps_daemon_running(str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / MPS_PID_FILE).write_text(f"{gone.pid}\n")         # a daemon that died
    assert not mps_daemon_running(str(tmp_path))
    (tmp_path / MPS_PID_FILE).write_text("")
    assert not mps_daemon_running(str(tmp_path))
