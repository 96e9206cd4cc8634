"""What holds a share of a GPU, and the environment its processes get.

Memory is always watched (share_memory.py). Compute is time-sliced by the
driver unless an NVIDIA MPS control daemon runs for that GPU: then the
share's processes are MPS clients with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
(their share of the SMs) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (their
share of the memory: an allocation past it fails), see docs/gpus.md,
"Sharing a GPU: what is enforced".

One MPS control daemon runs one MPS server per Linux user at a time: a
client of another user is held at its CUDA start until every client of
the running server has ended. A notebook can hold its server for hours,
so the service never lets that happen: a share uses MPS only when every
other share on that GPU runs as the same account (one user's workloads,
or all of them where user accounts are off). Otherwise its processes get
a pipe directory where no daemon listens (CUDA then runs without MPS, as
NVIDIA documents) and its compute is labelled time-sliced. The scheduler
packs shares of different users onto one GPU freely; the label says what
holds for each.

``share_enforcement`` is pure; ``mps_daemon_running`` is the one look at
the host (the daemon's pid file in its pipe directory).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .share_memory import MemoryWatch, gib

__all__ = ["ShareEnforcement", "share_enforcement", "gpu_enforcement", "mps_daemon_running",
           "MPS_PID_FILE", "NO_MPS_DIR"]

MPS_PID_FILE = "nvidia-cuda-mps-control.pid"   # the control daemon writes it in its pipe directory
NO_MPS_DIR = "no-mps"                           # under the attempt directory: never a daemon's


@dataclass(frozen=True)
class ShareEnforcement:
    """What holds one share, for the spawn form, the heat map and its log."""
    mps: bool                   # its processes are MPS clients
    labels: dict                # {"memory": ..., "compute": ...}: what the UI shows
    advisory: bool              # compute is not limited (time-sliced)
    env: dict                   # for the share's processes (CUDA reads it at its start)
    notes: list = field(default_factory=list)   # why MPS is not used, where it is not


def _memory_label(limit_mib: int, mps: bool, watch: MemoryWatch, interval_s: float) -> str:
    watched = (f"watched every {interval_s:g} s: warned above {gib(limit_mib)}, stopped "
               f"{watch.grace_s:g} s later (at once above {gib(limit_mib * watch.hard_factor)})")
    if mps:
        return f"enforced: allocations past {gib(limit_mib)} fail (MPS); {watched}"
    return f"enforced by the watch: {watched}"


def share_enforcement(*, limit_mib: int, compute_pct: Optional[float], account: str,
                      other_accounts: Iterable[str], mps_pipe_directory: Optional[str],
                      mps_running: bool, attempt_dir: str, watch: MemoryWatch = MemoryWatch(),
                      interval_s: float = 5.0) -> ShareEnforcement:
    """What holds a share of ``limit_mib`` MiB (and ``compute_pct`` % of the
    SMs, None: no compute share asked) whose processes run as ``account``,
    on a GPU whose other shares run as ``other_accounts``.

    ``mps_pipe_directory``: the pipe directory of the GPU's MPS control
    daemon as the pool configures it (None: the pool uses no MPS);
    ``mps_running``: what ``mps_daemon_running`` found there;
    ``attempt_dir``: where the no-daemon pipe directory goes.
    """
    notes = []
    strangers = sorted(set(other_accounts) - {account})
    if mps_pipe_directory is None:
        notes.append("this pool runs no MPS daemon")
    elif not mps_running:
        notes.append(f"no MPS daemon is running for this GPU (none in {mps_pipe_directory})")
    elif strangers:
        notes.append("another user's shares are on this GPU and one MPS server serves one "
                     "user at a time: this share runs without MPS")
    mps = not notes
    env = {}
    if mps:
        # The ordinal is CUDA's: the share's process sees its one GPU as device 0.
        env["CUDA_MPS_PIPE_DIRECTORY"] = mps_pipe_directory
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={int(limit_mib)}M"
        if compute_pct is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(100, math.ceil(compute_pct))))
    elif mps_pipe_directory is not None:
        # A daemon may listen at the default directory: this share must not reach it.
        env["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(attempt_dir, NO_MPS_DIR)
    if mps and compute_pct is not None:
        compute = f"MPS: at most {env['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE']}% of the GPU's SMs"
    elif mps:
        compute = "MPS: runs alongside the other shares, no compute limit asked"
    else:
        compute = "time-sliced (advisory): shares take turns on the whole GPU, not limited"
    return ShareEnforcement(mps, {"memory": _memory_label(limit_mib, mps, watch, interval_s),
                                  "compute": compute}, not mps, env, notes)


def gpu_enforcement(mps: Iterable[bool]) -> dict:
    """The heat map's label of a shared GPU whose shares are (True) or are
    not MPS clients: MPS only where every share is one; a mix is
    time-sliced for some, and says so."""
    shares = list(mps)
    clients = sum(shares)
    if shares and clients == len(shares):
        compute = "MPS (enforced)"
    elif clients:
        compute = f"MPS for {clients} of {len(shares)} shares, the others time-sliced (advisory)"
    else:
        compute = "time-sliced (advisory)"
    return {"memory": "enforced (watched, stopped above its share)", "compute": compute}


def mps_daemon_running(pipe_directory: str) -> bool:
    """Whether an MPS control daemon serves ``pipe_directory``: its pid file
    is there and names a live process."""
    try:
        with open(os.path.join(pipe_directory, MPS_PID_FILE)) as f:
            pid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True                      # alive, someone else's
    return True
