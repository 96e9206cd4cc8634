"""Which processes are one attempt's: what the memory watch of shared GPUs
counts against the attempt's share (NVML names processes by PID only).

With a cgroup v1 placement (gpuspawner/isolation/cgroups.py) the attempt's
command and everything it starts are in its cgroups, whatever they do
(a double fork, ``setsid``): their ``cgroup.procs`` is the answer. The
runner itself stays outside them (it uses no GPU). Without cgroups
(device groups, advisory) the runner is the subreaper of everything the
command starts (runner.py), so the runner's descendants are the answer.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional

__all__ = ["cgroup_pids", "descendants"]


def cgroup_pids(paths: Iterable[str]) -> Optional[frozenset]:
    """The processes in the cgroups ``paths`` (v1 directories); None when
    none of them can be read (removed, or not a cgroup)."""
    pids, read = set(), False
    for path in paths:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids.update(int(p) for p in f.read().split())
            read = True
        except (OSError, ValueError):
            continue
    return frozenset(pids) if read else None


def descendants(pid: int) -> list[int]:
    """The live (not zombie) processes under ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out
