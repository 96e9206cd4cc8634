"""A shared GPU's activity, share by share: what the culler judges a
notebook on when it holds a share of a GPU rather than the whole GPU.

On a shared GPU the whole GPU's utilisation is everyone's: a notebook
whose neighbour trains would never look idle, and one whose neighbour
idles would look idle while it computes. So a share's activity is its own
processes' SM utilisation (NVML's per-process samples, read by
gpuspawner/inventory/processes.py), summed over its processes (they take
turns on the SMs) and capped at 100%. A process with no sample in the
window had no SM activity. Unknown (no per-process figures, e.g. a MIG
device, or the share's processes not known) stays unknown: the culler
never culls on missing data (decide.py).

``held_samples`` turns the service's ``GET /gpus`` entries into samples
per workload: a whole GPU's ``utilization_pct`` goes to its
``workload``; a shared GPU lists ``shares``, each ``{"workload": {...},
"utilization_pct": its own (None: unknown)}``, and its whole-GPU figure
goes to no one.
"""
from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping, Optional

from .decide import GpuSample

__all__ = ["share_utilization", "held_samples"]


def share_utilization(pids: Optional[Iterable[int]],
                      sm_pct: Optional[Mapping[int, float]]) -> Optional[float]:
    """A share's SM activity (%) from its processes ``pids`` and the GPU's
    per-process SM utilisation ``sm_pct`` (pid -> %); None when either is
    unknown."""
    if pids is None or sm_pct is None:
        return None
    return float(min(100.0, sum(sm_pct.get(p, 0) for p in set(pids))))


def held_samples(gpus: Iterable[dict], now: datetime) -> dict[str, list[GpuSample]]:
    """workload id -> this pass's samples of what it holds (module docstring).
    Entries without a figure give no sample (unknown)."""
    out: dict[str, list[GpuSample]] = {}

    def add(workload: Optional[dict], device, util) -> None:
        if workload and workload.get("id") and util is not None:
            out.setdefault(workload["id"], []).append(GpuSample(now, device, float(util)))

    for g in gpus:
        if g.get("shares") is not None:
            for s in g["shares"]:
                add(s.get("workload"), g["device"], s.get("utilization_pct"))
        else:
            add(g.get("workload"), g["device"], g.get("utilization_pct"))
    return out
