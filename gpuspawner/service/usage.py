"""GPU-seconds over a time window, from the usage ledger plus the attempts
still running (counted up to now)."""
from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..store import Attempt, UsageRow, WorkloadRow
from .specs import SpecError
from .views import iso

GROUPS = ("team", "user", "project", "pool", "kind")


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def usage_report(s: Session, start: float, end: float, now: float, group_by: str,
                 teams: Optional[Sequence[str]]) -> dict:
    keys = group_by.split(",")
    bad = [k for k in keys if k not in GROUPS]
    if bad:
        raise SpecError("group_by", f"unknown key {bad[0]!r}; use any of {', '.join(GROUPS)}")
    totals: dict[tuple, list[float]] = {}

    def add(values: dict, gpus: int, borrowed: int, a0: float, a1: float) -> None:
        seconds = _overlap(a0, a1, start, end)
        if seconds <= 0:
            return
        key = tuple(values[k] for k in keys)
        t = totals.setdefault(key, [0.0, 0.0])
        t[0] += gpus * seconds
        t[1] += borrowed * seconds

    q = select(UsageRow).where(UsageRow.ended_at >= start, UsageRow.started_at <= end)
    if teams is not None:
        q = q.where(UsageRow.team.in_(teams))
    for u in s.scalars(q):
        borrowed = u.borrowed_gpu_seconds / max(u.ended_at - u.started_at, 1e-9) / max(u.gpus, 1)
        add({"team": u.team, "user": u.user, "project": u.project, "pool": u.pool,
             "kind": u.kind}, u.gpus, borrowed * u.gpus, u.started_at, u.ended_at)
    q = (select(Attempt, WorkloadRow).join(WorkloadRow, WorkloadRow.id == Attempt.workload_id)
         .where(Attempt.state == "running"))
    if teams is not None:
        q = q.where(WorkloadRow.team.in_(teams))
    for a, w in s.execute(q):
        add({"team": w.team, "user": w.user, "project": w.project, "pool": w.pool,
             "kind": w.kind}, a.gpus, a.borrowed, a.started_at, now)
    rows = [{**dict(zip(keys, key)), "gpu_seconds": round(v[0], 3),
             "gpu_hours": round(v[0] / 3600, 4), "borrowed_gpu_seconds": round(v[1], 3)}
            for key, v in sorted(totals.items())]
    return {"from": iso(start), "to": iso(end), "group_by": keys, "rows": rows,
            "total_gpu_seconds": round(sum(v[0] for v in totals.values()), 3)}
