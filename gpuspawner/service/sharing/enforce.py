"""What holds each running share's compute, decided once and kept.

A share is an MPS client where its pool names a pipe directory for its
GPU's MPS control daemon (``gpu_sharing[pool]["mps_pipe_directory"]``),
that daemon runs, and every other share on the GPU is the same user's (one
MPS server serves one Linux user at a time: isolation/share_compute.py).
Otherwise it is time-sliced, and labelled so. The decision is made when the
share starts (a job's launch, a server's first look at its admission) and
kept on its row (``spec["share_enforcement"]``): the heat map then says
what holds, not what would hold were it to start now.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from gpuspawner.isolation.share_compute import (ShareEnforcement, gpu_enforcement, mps_daemon_running,
                                       share_enforcement)
from gpuspawner.scheduler.shares import running_shares
from gpuspawner.isolation.share_memory import MemoryWatch
from gpuspawner.service.loop.facades import ClusterView
from gpuspawner.store import Store, WorkloadRow

KEY = "share_enforcement"


@dataclass(frozen=True)
class ShareSettings:
    """How shares are held: the memory watch and its interval; ``isolated``:
    users have accounts of their own (else every share is one MPS user)."""
    watch: MemoryWatch
    interval_s: float
    isolated: bool


def _gpu_of(cluster: ClusterView, wid: str) -> Optional[tuple[str, int]]:
    r = cluster.state.running.get(wid)
    if r is None or not r.placement:
        return None
    node, gpus = r.placement[0]
    return node, gpus[0]


def decide(cluster: ClusterView, store: Store, settings: ShareSettings, row: WorkloadRow,
           attempt_dir: str) -> Optional[ShareEnforcement]:
    """The enforcement of the running share ``row`` (None: not a running
    share): the kept decision, or made now and kept."""
    gpu = _gpu_of(cluster, row.id) if row.gpu_share else None
    sharing = cluster.pool_sharing(row.pool) if gpu else None
    if sharing is None:
        return None
    uuid = cluster.nodes[gpu[0]].uuid(gpu[1]) if gpu[0] in cluster.nodes else ""
    pipe = sharing.mps_pipe_directory.format(uuid=uuid) if sharing.mps_pipe_directory else None
    kept = (row.spec or {}).get(KEY)
    common = dict(limit_mib=int(row.gpu_share * sharing.gpu_memory_mib),
                  compute_pct=100 * row.gpu_share, account=row.user,
                  mps_pipe_directory=pipe, attempt_dir=attempt_dir,
                  watch=settings.watch, interval_s=settings.interval_s)
    if kept is not None:
        e = share_enforcement(other_accounts=(), mps_running=kept["mps"], **common)
        return replace(e, notes=list(kept.get("notes", [])))
    # Where every process runs as the service's own account (no user
    # accounts), every share is the same MPS user.
    others = [cluster.state.running[wid].workload.user
              for wid, _ in running_shares(cluster.state).get(gpu, ())
              if wid != row.id] if settings.isolated else []
    e = share_enforcement(other_accounts=others,
                          mps_running=pipe is not None and mps_daemon_running(pipe), **common)
    with store.transaction() as s:
        stored = s.get(WorkloadRow, row.id)
        if stored is not None:
            stored.spec = {**(stored.spec or {}), KEY: {"mps": e.mps, "notes": e.notes}}
    return e


def gpu_label(rows: dict, on: list) -> dict:
    """The heat map's enforcement label of a shared GPU from its shares'
    kept decisions (one not decided yet counts as time-sliced)."""
    return gpu_enforcement(bool(((rows[wid].spec or {}).get(KEY) or {}).get("mps"))
                           for wid, _ in on if wid in rows)


def pool_label(sharing) -> dict:
    """What a sharing pool promises before anything runs (the spawn form)."""
    if sharing.mps_pipe_directory:
        compute = ("MPS where the GPU's other shares are the same user's (then at most the "
                   "share's part of its SMs), else time-sliced (advisory)")
    else:
        compute = "time-sliced (advisory): shares take turns on the whole GPU, not limited"
    return {"memory": "watched: a share above its memory is warned, then stopped",
            "compute": compute}
