"""JSON views of rows, as the REST API shows them."""
from __future__ import annotations

import os
from typing import Optional

from gpuspawner.store import Attempt, EventRow, WorkloadRow
from gpuspawner.times import iso
from gpuspawner.service.workloads.env_access import redact


def workload(row: WorkloadRow, attempt: Optional[Attempt] = None,
             env_values: bool = False) -> dict:
    """``env_values``: whether the env's values are shown (to its owner and
    admins, env_access.py); else its names only."""
    spec = row.spec or {}
    env = spec.get("env") or {}
    out = {
        "id": row.id, "name": row.name, "kind": row.kind, "team": row.team, "user": row.user,
        "project": row.project, "state": row.state, "reason": row.reason,
        # gpus: the older name of gpus_total, kept for one more release
        "pool": row.pool, "gpus": row.gpus_per_node * row.num_nodes,
        "gpus_total": row.gpus_per_node * row.num_nodes,
        "gpus_per_node": row.gpus_per_node, "nodes": row.num_nodes, "priority": row.priority,
        # Its share of one GPU in GPU units (0.25), null for whole GPUs.
        "gpu_share": row.gpu_share or None,
        # CPUs and memory (bytes) per node; null for one submitted before requests
        "cpus": (spec.get("resources") or {}).get("cpus"),
        "memory": (spec.get("resources") or {}).get("memory"),
        "time_limit": row.time_limit, "grace_period": row.grace_period,
        "command": spec.get("command"), "notebook": spec.get("notebook"),
        "parameters": spec.get("parameters") or {}, "working_dir": spec.get("working_dir"),
        "env": env if env_values else redact(env), "env_redacted": bool(env) and not env_values,
        "checkpoint_dir": spec.get("checkpoint_dir"),
        "attempt": row.attempt, "exit_code": row.exit_code,
        "cancel_requested": row.cancel_requested,
        "submitted_at": iso(row.submitted_at), "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at), "eligible_at": iso(row.eligible_at),
        "after": row.after or [], "sweep_id": row.sweep_id, "sweep_index": row.sweep_index,
        "schedule_id": row.schedule_id, "datasets": spec.get("datasets") or [],
    }
    if attempt is not None and attempt.number == row.attempt and attempt.state == "running":
        out["placement"] = placement_view(attempt.placement)
    if spec.get("notebook") and attempt is not None:
        out["output_notebook"] = output_notebook(spec, attempt.attempt_dir)
    return out


def output_notebook(spec: dict, attempt_dir: str) -> str:
    """Where papermill writes the executed notebook of an attempt."""
    if spec.get("output_notebook"):
        return os.path.join(spec.get("working_dir") or "", spec["output_notebook"])
    stem = os.path.splitext(os.path.basename(spec["notebook"]))[0]
    return os.path.join(attempt_dir, stem + ".output.ipynb")


def placement_view(placement) -> list[dict]:
    """Each node of a placement with its GPU numbers there (``devices``;
    ``gpus``, their older name, kept for one more release)."""
    return [{"node": n, "devices": list(g), "gpus": list(g)} for n, g in placement]


def gpu_units(n: float):
    """A count of GPU units as the API shows it: an integer when whole (the
    common case, as before shares), else the fraction (0.25)."""
    return int(n) if float(n).is_integer() else round(n, 6)


def attempt_view(a: Attempt) -> dict:
    return {"number": a.number, "state": a.state, "gpus": gpu_units(a.gpus),
            "borrowed": gpu_units(a.borrowed),
            "placement": placement_view(a.placement),
            "started_at": iso(a.started_at), "ended_at": iso(a.ended_at),
            "exit_code": a.exit_code, "reason": a.reason}


def event(e: EventRow) -> dict:
    return {"id": e.id, "type": e.type, "time": iso(e.time), "attempt": e.attempt,
            "message": e.message, "data": e.data or {}}


def notice(n) -> dict:
    return {"id": n.id, "user": n.user, "server": n.server, "kind": n.kind,
            "message": n.message, "created_at": iso(n.created_at),
            "expires_at": iso(n.expires_at), "cleared_at": iso(n.cleared_at), "data": n.data or {}}


def audit(a) -> dict:
    return {"id": a.id, "time": iso(a.time), "actor": a.actor, "action": a.action,
            "target": a.target, "detail": a.detail or {}}
