"""Usage reports from the database: the usage ledger plus the attempts still
running (counted up to now), priced per pool. The arithmetic is in
``accounting``; this module only reads rows."""
from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..store import Attempt, AuditEntry, PoolRow, PriceRow, UsageRow, WorkloadRow
from . import accounting
from .accounting import GROUPS, Interval  # noqa: F401  (GROUPS: the API's choices)
from .specs import SpecError
from .views import iso

# The longest window of a usage series (weekly buckets: about 520 points).
MAX_SERIES_SPAN = 3650 * 86400.0


def usage_intervals(s: Session, start: float, end: float, now: float,
                    teams: Optional[Sequence[str]]) -> list[Interval]:
    out = []
    q = select(UsageRow).where(UsageRow.ended_at >= start, UsageRow.started_at <= end)
    if teams is not None:
        q = q.where(UsageRow.team.in_(teams))
    for u in s.scalars(q):
        length = max(u.ended_at - u.started_at, 1e-9)
        out.append(Interval(u.team, u.user, u.project, u.pool, u.kind, u.gpus, u.started_at,
                            u.ended_at, u.borrowed_gpu_seconds / length))
    q = (select(Attempt, WorkloadRow).join(WorkloadRow, WorkloadRow.id == Attempt.workload_id)
         .where(Attempt.state == "running", Attempt.started_at <= end))
    if teams is not None:
        q = q.where(WorkloadRow.team.in_(teams))
    for a, w in s.execute(q):
        out.append(Interval(w.team, w.user, w.project, w.pool, w.kind, a.gpus, a.started_at,
                            now, a.borrowed))
    return out


def prices(s: Session) -> dict[str, float]:
    """Each pool's price now."""
    return {p.name: p.price_per_gpu_hour for p in s.scalars(select(PoolRow))}


def price_history(s: Session) -> dict[str, list[tuple[float, float]]]:
    """Each pool's prices, oldest first (``accounting.cost`` applies them)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for p in s.scalars(select(PriceRow).order_by(PriceRow.pool, PriceRow.since, PriceRow.id)):
        out.setdefault(p.pool, []).append((p.since, p.price_per_gpu_hour))
    return out


def usage_report(s: Session, start: float, end: float, now: float, group_by: str,
                 teams: Optional[Sequence[str]], series_by: str = "") -> dict:
    keys = group_by.split(",")
    try:
        accounting.check_group_by(keys)
        if series_by:
            accounting.check_group_by([series_by])
    except ValueError as e:
        raise SpecError("series_by" if series_by and all(k in GROUPS for k in keys)
                        else "group_by", str(e))
    if series_by and end - start > MAX_SERIES_SPAN:
        raise SpecError("series_by", f"a series covers at most {MAX_SERIES_SPAN // 86400:.0f} "
                                     f"days; narrow 'from' and 'to'")
    intervals = usage_intervals(s, start, end, now, teams)
    price = prices(s)
    table = accounting.totals(intervals, keys, start, end, price_history(s))
    report = {"from": iso(start), "to": iso(end), "group_by": keys,
              "rows": accounting.rows(table, keys),
              "total_gpu_seconds": round(sum(t.gpu_seconds for t in table.values()), 3),
              "total_cost": round(sum(t.cost for t in table.values()), 2),
              "prices": price}
    if series_by:
        bucket = accounting.bucket_for(end - start)
        starts, values = accounting.series(intervals, series_by, start, end, bucket)
        report["series"] = {"by": series_by, "bucket_seconds": bucket,
                            "starts": [iso(t) for t in starts],
                            "gpu_hours": {k: [round(v, 4) for v in vs] for k, vs in values.items()}}
    return report


def culls(s: Session, start: float, end: float) -> dict:
    entries = s.scalars(select(AuditEntry).where(AuditEntry.action == "cull",
                                                 AuditEntry.time >= start,
                                                 AuditEntry.time <= end)).all()
    count, hours = accounting.culled_idle_gpu_hours(e.detail or {} for e in entries)
    return {"culls": len(entries), "gpu_servers_culled": count, "idle_gpu_hours_ended": hours}
