"""What one process tree is put into (cgroup directories and device groups)
and how a process enters it: the runner and the spawner's preexec need only
this, not the enforcement that decides it (``cgroups.GpuEnforcement``), so a
job's runner starts without importing that or its configuration."""
from __future__ import annotations

import os
from typing import Optional


class Placement:
    """What one process tree is put into: cgroup directories and groups.

    A plain class, not a dataclass: the runner imports this module, and
    dataclasses (with inspect) was a fifth of what every start imported."""

    def __init__(self, cgroups: Optional[list[str]] = None, gids: Optional[list[int]] = None):
        self.cgroups: list[str] = [] if cgroups is None else cgroups
        self.gids: list[int] = [] if gids is None else gids

    def __eq__(self, other) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return (self.cgroups, self.gids) == (other.cgroups, other.gids)

    def __repr__(self) -> str:
        return f"Placement(cgroups={self.cgroups!r}, gids={self.gids!r})"

    def to_json(self) -> dict:
        return {"cgroups": self.cgroups, "gids": self.gids}

    @classmethod
    def from_json(cls, data: Optional[dict]) -> "Placement":
        data = data or {}
        return cls(list(data.get("cgroups", [])), list(data.get("gids", [])))

    def runner_args(self) -> list[str]:
        """The runner's options that make its command enter this placement."""
        args = []
        for path in self.cgroups:
            args += ["--cgroup", path]
        if self.gids:
            args += ["--groups", ",".join(map(str, self.gids))]
        return args


def enter(placement: Placement) -> None:
    """Join the placement's cgroups, then take its GPUs' groups (device
    groups only). Called in a child's preexec before any privilege drop: a
    privilege drop that sets groups itself must add ``placement.gids``."""
    pid = str(os.getpid())
    for path in placement.cgroups:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(pid)
    if placement.gids:
        os.setgroups(placement.gids)
