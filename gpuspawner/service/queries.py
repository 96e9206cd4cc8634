"""Reads: what the API, the panel and the CLI show, from the database and
the scheduler core. Nothing here changes anything (not even the core's lazy
queue compaction: a cycle may be walking those queues)."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ..scheduler.shares import running_shares
from ..store import (Attempt, AuditEntry, EventRow, GpuRow, NodeRow, NoticeRow, QuotaRow, Store,
                     TeamRow, WorkloadRow)
from .errors import NotFound
from .identity import Identity
from .share_enforce import gpu_label, pool_label
from .share_specs import share_label
from .states import QUEUED
from .views import gpu_units


def visible(s: Session, who: Identity, wid: str) -> WorkloadRow:
    """The workload, if the caller may see it (else the same 404 as for none)."""
    row = s.get(WorkloadRow, wid)
    if row is None or not (who.sees_team(row.team) or row.user == who.name):
        raise NotFound(f"no workload {wid}")
    return row


def get(store: Store, who: Identity, wid: str) -> WorkloadRow:
    with store.session() as s:
        return visible(s, who, wid)


def queue_position(state, wid: str) -> Optional[int]:
    """1 for the next of its team's queue to be considered."""
    w = state.pending.get(wid)
    if w is None:
        return None
    pending = state.pending
    position = 0
    for q in state.queues.get(state.group_of(w), ()):
        if pending.get(q.id) is q:
            position += 1
            if q.id == wid:
                return position
    return None


def gpus_view(engine, sample: dict) -> list[dict]:
    """Every GPU with its utilisation (``sample``: device -> (util %, MiB))
    and the workload holding it."""
    state = engine.scheduler.state
    shares = running_shares(state)
    owners = set(state.owner.values()) | {wid for on in shares.values() for wid, _ in on}
    with engine.store.session() as s:
        rows = {r.id: r for r in s.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(owners)))}
    out = []
    for ln in engine.nodes.values():
        sharing = engine.pool_sharing(ln.node.pool) if ln.node.share_units else None
        for g, device in enumerate(ln.devices):
            util, mem = sample.get(device, (None, None))
            on = shares.get((ln.node.name, g), [])
            row = None if on else rows.get(state.owner.get((ln.node.name, g)))
            entry = {"node": ln.node.name, "gpu": g, "device": device, "pool": ln.node.pool,
                     "utilization_pct": util, "memory_used_mib": mem,
                     "workload": None if row is None else _holder(row)}
            if sharing is not None:
                entry["share_units"] = sharing.units
                entry["enforcement"] = gpu_label(rows, on)
                entry["shares"] = [
                    {"workload": _holder(rows[wid]), "share": share,
                     "label": share_label(share), "memory_limit_mib":
                         int(share * sharing.gpu_memory_mib),
                     "memory_used_mib": engine.share_memory.get(wid),
                     "utilization_pct": engine.share_activity.get(wid)}
                    for wid, share in on if wid in rows]
            out.append(entry)
    return out


def _holder(row: WorkloadRow) -> dict:
    return {"id": row.id, "kind": row.kind, "user": row.user, "team": row.team, "name": row.name}


def pools_view(engine, who: Identity) -> list[dict]:
    state = engine.scheduler.state
    held = state.held_gpus()
    queued: dict[str, list[int]] = {}
    for w in list(state.pending.values()):
        q = queued.setdefault(w.pool, [0, 0])
        q[0] += 1
        q[1] += w.gpu_units
    with engine.store.session() as s:
        nodes = s.scalars(select(NodeRow)).all()
        gpus = s.scalars(select(GpuRow)).all()
    out = []
    for pool in sorted(state.capacity):
        used = {team: gpu_units(n) for (team, p), n in held.items() if p == pool and n}
        pool_nodes = [n for n in nodes if n.pool == pool]
        out.append({
            "name": pool, "capacity": state.capacity[pool],
            "total": sum(n.gpus for n in pool_nodes),
            "used": gpu_units(sum(used.values())),
            "free": state.index.pool_free[pool],
            "queued_workloads": queued.get(pool, [0, 0])[0],
            "queued_gpus": gpu_units(queued.get(pool, [0, 0])[1]),
            "teams": used if who.admin else {t: n for t, n in used.items() if who.sees_team(t)},
            "sharing": sharing_view(engine.pool_sharing(pool)),
            "nodes": [{"name": n.name, "gpus": n.gpus, "drained": n.drained,
                       "source": n.source,
                       "devices": [{"index": g.index, "uuid": g.uuid, "model": g.model,
                                    "memory_mib": g.memory_mib, "healthy": g.healthy,
                                    "health_reason": g.health_reason,
                                    "admin_mark": g.admin_mark}
                                   for g in gpus if g.node == n.name]}
                      for n in pool_nodes],
        })
    return out


def sharing_view(sharing) -> Optional[dict]:
    """How a pool shares its GPUs, as the spawn form and the heat map say it."""
    if sharing is None:
        return None
    return {"share_units": sharing.units, "gpu_memory_mib": sharing.gpu_memory_mib,
            "share_memory_mib": sharing.gpu_memory_mib // sharing.units,
            "smallest_share": f"1/{sharing.units}", "enforcement": pool_label(sharing)}


def teams_view(engine, who: Identity) -> list[dict]:
    held = engine.scheduler.state.held_gpus()
    with engine.store.session() as s:
        teams = s.scalars(select(TeamRow).order_by(TeamRow.name)).all()
        quotas = s.scalars(select(QuotaRow)).all()
    out = []
    for t in teams:
        if not who.sees_team(t.name):
            continue
        limits = {pool: engine.teams.notebook_gpu_limit(t.name, pool)
                  for pool in engine.scheduler.state.capacity}
        out.append({"name": t.name, "group": t.group, "weight": t.weight,
                    "default": t.name == engine.teams.default_team,
                    "notebook_gpu_limits": {p: n for p, n in limits.items() if n is not None},
                    "quotas": {q.pool: {"nominal": q.nominal,
                                        "borrowing_limit": q.borrowing_limit,
                                        "lending_limit": q.lending_limit,
                                        "used": gpu_units(held.get((t.name, q.pool), 0))}
                               for q in quotas if q.team == t.name}})
    return out


# ---- workloads, their attempts and events ---------------------------------------
LIST_FILTERS = {"team": WorkloadRow.team, "user": WorkloadRow.user, "kind": WorkloadRow.kind,
                "pool": WorkloadRow.pool, "project": WorkloadRow.project,
                "state": WorkloadRow.state, "sweep_id": WorkloadRow.sweep_id,
                "schedule_id": WorkloadRow.schedule_id}
# Filters of a column that may be null: the value "none" matches null (no
# sweep; submitted by hand, no schedule).
NULL_VALUE = {"sweep_id": "none", "schedule_id": "none"}


def matching(name: str, values: list[str]):
    """The condition of a list filter: one of ``values`` (or null for the column's NULL_VALUE)."""
    column = LIST_FILTERS[name]
    named = [v for v in values if v != NULL_VALUE.get(name)]
    if len(named) == len(values):
        return column.in_(named)
    return or_(column.is_(None), column.in_(named)) if named else column.is_(None)


def workloads(store: Store, who: Identity, filters: dict[str, list[str]], limit: int,
              with_attempts: bool) -> tuple[list[WorkloadRow], dict[str, list[Attempt]]]:
    """The newest workloads the caller may see that match ``filters``
    (``LIST_FILTERS`` names -> values), and with ``with_attempts`` their
    attempts (one query for all of them, not one per workload)."""
    q = select(WorkloadRow)
    for name, values in filters.items():
        if values:
            q = q.where(matching(name, values))
    if not who.admin:
        q = q.where(WorkloadRow.team.in_(sorted(who.teams | who.leads)))
    q = q.order_by(WorkloadRow.submitted_at.desc(), WorkloadRow.id).limit(limit)
    attempts: dict[str, list[Attempt]] = {}
    with store.session() as s:
        rows = s.scalars(q).all()
        if with_attempts:
            for a in s.scalars(select(Attempt).where(Attempt.workload_id.in_([r.id for r in rows]))
                               .order_by(Attempt.workload_id, Attempt.number)):
                attempts.setdefault(a.workload_id, []).append(a)
    return rows, attempts


def attempts_of(store: Store, wid: str) -> list[Attempt]:
    with store.session() as s:
        return list(s.scalars(select(Attempt).where(Attempt.workload_id == wid)
                              .order_by(Attempt.number)))


def events_of(store: Store, wid: str) -> list[EventRow]:
    with store.session() as s:
        return list(s.scalars(select(EventRow).where(EventRow.workload_id == wid)
                              .order_by(EventRow.id)))


def attempt_state(store: Store, wid: str, attempt: int) -> str:
    """An attempt's state: "queued" while it waits to be admitted, "waiting"
    while it waits for its dependencies."""
    with store.session() as s:
        a = s.get(Attempt, (wid, attempt))
        if a is not None:
            return a.state
        row = s.get(WorkloadRow, wid)
        if row is None:
            return "none"
        return "queued" if row.state == QUEUED and row.attempt == attempt else row.state


# ---- notices and the audit log ------------------------------------------------------
def notices(store: Store, user: Optional[str], now: float) -> list[NoticeRow]:
    """Notices not cleared and not expired (of ``user``, or everyone's)."""
    q = select(NoticeRow).where(NoticeRow.cleared_at.is_(None)).order_by(NoticeRow.id)
    if user:
        q = q.where(NoticeRow.user == user)
    with store.session() as s:
        return [n for n in s.scalars(q) if n.expires_at is None or n.expires_at > now]


AUDIT_FILTERS = {"action": AuditEntry.action, "actor": AuditEntry.actor,
                 "target": AuditEntry.target}


def audit_entries(store: Store, limit: int, filters: dict[str, Optional[str]]) -> list[AuditEntry]:
    """The newest audit entries, matching ``filters`` (``AUDIT_FILTERS`` names)."""
    q = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    for key, value in filters.items():
        if value:
            q = q.where(AUDIT_FILTERS[key] == value)
    with store.session() as s:
        return list(s.scalars(q))


def database_answers(store: Store) -> None:
    """Raises when the database does not answer (the health check)."""
    with store.session() as s:
        s.execute(select(func.count()).select_from(WorkloadRow)).scalar()
