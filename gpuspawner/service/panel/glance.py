"""What the glance (the overview page, embedded in the hub's home page)
shows besides the active work: the user's jobs that ended lately and their
teams' deployments. Pure: rows and numbers in, what the template prints out."""
from __future__ import annotations

import os
from typing import Callable, Iterable, Optional

from gpuspawner.store import DeploymentRow, WorkloadRow
from gpuspawner.service.workloads import views
from gpuspawner.service.serving.endpoints import endpoint_path

# Jobs that ended within this many seconds are shown, at most RECENT_JOBS of them.
RECENT_SECONDS = 24 * 3600.0
RECENT_JOBS = 5


def output_in_workspace(row: WorkloadRow, workspace: str) -> Optional[str]:
    """The job's executed notebook relative to the workspace (what JupyterLab
    opens), when the job named one there."""
    spec = row.spec or {}
    if not (spec.get("notebook") and spec.get("output_notebook")):
        return None
    path = os.path.normpath(views.output_notebook(spec, ""))
    rel = os.path.relpath(path, os.path.normpath(workspace))
    return None if rel == ".." or rel.startswith(".." + os.sep) else rel.replace(os.sep, "/")


def finished_jobs(rows: Iterable[WorkloadRow], workspace: str, now: float,
                  ago: Callable[[float], str]) -> list[dict]:
    """The jobs ``rows`` (ended, newest first) as the glance lists them."""
    return [{"id": r.id, "name": r.name or r.id, "state": r.state, "reason": r.reason,
             "gpus": r.gpus_per_node * r.num_nodes, "gpu_share": r.gpu_share, "pool": r.pool,
             "ended": ago(now - r.finished_at), "output": output_in_workspace(r, workspace)}
            for r in rows]


def deployments(rows: Iterable[DeploymentRow], replicas: Callable[[int], tuple[int, int]],
                service_prefix: str) -> list[dict]:
    """Deployments with their endpoint (under the hub's base URL) and
    ``replicas(id)``: (ready, all)."""
    out = []
    for d in rows:
        ready, total = replicas(d.id)
        out.append({"team": d.team, "name": d.name, "ready": ready, "replicas": total,
                    "endpoint": endpoint_path(service_prefix, d.team, d.name)})
    return out
