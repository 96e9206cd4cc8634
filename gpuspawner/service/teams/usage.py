"""Usage reports from the database: the usage ledger plus the attempts still
running (counted up to now), priced per pool. The arithmetic is in
``accounting``; this module only reads rows."""
from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuspawner.isolation.resources import held
from gpuspawner.store import (Attempt, AuditEntry, PoolRow, PriceRow, StoragePriceRow, StorageRow,
                              UsageRow, WorkloadRow)
from gpuspawner.service.teams import accounting
from gpuspawner.service.teams.accounting import GROUPS, Interval  # noqa: F401  (GROUPS: the API's choices)
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.workloads.views import iso

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
                            u.ended_at, u.borrowed_gpu_seconds / length,
                            (u.cpu_seconds or 0.0) / length,
                            (u.memory_gib_seconds or 0.0) / length))
    q = (select(Attempt, WorkloadRow).join(WorkloadRow, WorkloadRow.id == Attempt.workload_id)
         .where(Attempt.state == "running", Attempt.started_at <= end))
    if teams is not None:
        q = q.where(WorkloadRow.team.in_(teams))
    for a, w in s.execute(q):
        cpus, memory_gib = held(w.spec, w.num_nodes)
        out.append(Interval(w.team, w.user, w.project, w.pool, w.kind, a.gpus, a.started_at,
                            now, a.borrowed, cpus, memory_gib))
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


def storage_measurements(s: Session, start: float, end: float,
                         teams: Optional[Sequence[str]]) -> list[accounting.Measurement]:
    """The measurements that held storage in [start, end]: each item's rows
    taken inside it and the last one taken before it. A row not charged (a
    dataset inside its team's space) holds 0 bytes."""
    before = (select(func.max(StorageRow.id)).where(StorageRow.since < start)
              .group_by(StorageRow.kind, StorageRow.name))
    q = select(StorageRow).where(StorageRow.since < end,
                                 (StorageRow.since >= start) | StorageRow.id.in_(before))
    if teams is not None:
        q = q.where(StorageRow.team.in_(teams))
    return [accounting.Measurement(r.team, f"{r.kind}:{r.name}", r.since,
                                   r.bytes if r.charged else 0) for r in s.scalars(q)]


def storage_price_history(s: Session) -> list[tuple[float, float]]:
    """The price per GB-month, oldest first."""
    return [(p.since, p.price_per_gb_month) for p in
            s.scalars(select(StoragePriceRow).order_by(StoragePriceRow.since, StoragePriceRow.id))]


def usage_report(s: Session, start: float, end: float, now: float, group_by: str,
                 teams: Optional[Sequence[str]], series_by: str = "",
                 resource_prices: accounting.ResourcePrices = accounting.ResourcePrices()
                 ) -> dict:
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
    table = accounting.totals(intervals, keys, start, end, price_history(s), resource_prices)
    storage_prices = storage_price_history(s)
    # storage is charged up to now, as running attempts are
    storage = accounting.storage_totals(storage_measurements(s, start, min(end, now), teams),
                                        start, min(end, now), storage_prices)
    storage_cost = sum(t.cost for t in storage.values())
    report = {"from": iso(start), "to": iso(end), "group_by": keys,
              "rows": accounting.rows(table, keys, storage),
              "total_gpu_seconds": round(sum(t.gpu_seconds for t in table.values()), 3),
              "total_cpu_hours": round(sum(t.cpu_seconds for t in table.values())
                                       / accounting.HOUR, 4),
              "total_memory_gib_hours": round(sum(t.memory_gib_seconds for t in table.values())
                                              / accounting.HOUR, 4),
              "total_cost": round(sum(t.cost for t in table.values()) + storage_cost, 2),
              "prices": price, "cpu_hour_price": resource_prices.cpu_hour,
              "memory_gib_hour_price": resource_prices.memory_gib_hour,
              "storage": {"rows": accounting.storage_rows(storage),
                          "total_gb_months": round(sum(t.gb_months for t in storage.values()), 4),
                          "total_cost": round(storage_cost, 2),
                          "price_per_gb_month": storage_prices[-1][1] if storage_prices else 0.0}}
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
