"""How much a team space holds, and what its storage quota says of it.

``measure`` walks a folder as ``du`` does: the disk blocks of every file and
folder once (hard links counted once), symbolic links not followed, nothing
opened or read. ``state`` is the pure verdict: under 90 % of the quota is
fine, from 90 % a warning, at 100 % new work of the team is refused (nothing
is ever deleted). Where the filesystem has project quotas (XFS, ext4 with
``prjquota``) an admin can make the quota hard; this module only counts.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

from .resources import human_memory

WARN_AT = 0.9
OK, WARN, FULL = "ok", "warn", "full"


@dataclass(frozen=True)
class Usage:
    bytes: int         # on disk (blocks), as du counts
    files: int         # files and folders, the top folder excluded
    seconds: float     # how long the walk took
    measured_at: float


def measure(path: str, clock=time.time) -> Usage:
    started, t0 = clock(), time.perf_counter()
    seen: set[tuple[int, int]] = set()
    total = files = 0
    stack = [path]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:  # removed meanwhile, or not ours to read
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                files += 1
                if st.st_nlink > 1:
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return Usage(total, files, time.perf_counter() - t0, started)


def state(used: int, quota: Optional[int]) -> str:
    if not quota:
        return OK
    if used >= quota:
        return FULL
    return WARN if used >= WARN_AT * quota else OK


def refusal(team: str, used: int, quota: int, datasets: int = 0) -> str:
    """``datasets``: of ``used``, what the team's datasets outside its space hold."""
    held = (f"team {team}'s space and datasets hold {human_memory(used)} "
            f"({human_memory(datasets)} in datasets)" if datasets
            else f"team {team}'s space holds {human_memory(used)}")
    return (f"{held} of its {human_memory(quota)} storage quota: new "
            f"work is refused until files are removed from it (nothing was deleted; ~/team, "
            f"or ask an admin to raise the quota)")
