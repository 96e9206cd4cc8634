"""Reads: what the API, the panel and the CLI show, from the database and
the scheduler core. Nothing here changes anything (not even the core's lazy
queue compaction: a cycle may be walking those queues)."""
from __future__ import annotations

import base64
import json
import math
import re
from types import SimpleNamespace
from typing import Optional

from sqlalchemy import bindparam, or_, select, tuple_
from sqlalchemy.orm import Session

from gpuspawner.scheduler.shares import running_shares
from gpuspawner.store import (Attempt, AuditEntry, EventRow, GpuRow, NodeRow, NoticeRow, QuotaRow, Store,
                     TeamRow, WorkloadRow)
from gpuspawner.service.errors import NotFound
from gpuspawner.service.loop.facades import ClusterView
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.sharing.enforce import gpu_label, pool_label
from gpuspawner.vocab.shares import share_label
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import QUEUED
from gpuspawner.service.workloads.views import gpu_units


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
    return None if w is None else state.waiting.position(w)


def queue_positions(state, wids: set[str]) -> dict[str, int]:
    """``queue_position`` of each of ``wids`` that is pending."""
    pending = state.pending
    return {wid: state.waiting.position(pending[wid]) for wid in wids if wid in pending}


def gpus_view(cluster: ClusterView, store: Store, sample: dict) -> list[dict]:
    """Every GPU with its utilisation (``sample``: device -> (util %, MiB))
    and the workload holding it."""
    state = cluster.state
    shares = running_shares(state)
    owners = set(state.owner.values()) | {wid for on in shares.values() for wid, _ in on}
    with store.session() as s:
        rows = {r.id: r for r in s.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(owners)))}
    out = []
    for ln in cluster.nodes.values():
        sharing = cluster.pool_sharing(ln.node.pool) if ln.node.share_units else None
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
                     "memory_used_mib": cluster.share_reading(wid)[0],
                     "utilization_pct": cluster.share_reading(wid)[1]}
                    for wid, share in on if wid in rows]
            out.append(entry)
    return out


def _holder(row: WorkloadRow) -> dict:
    return {"id": row.id, "kind": row.kind, "user": row.user, "team": row.team, "name": row.name}


def pools_view(cluster: ClusterView, store: Store, who: Identity) -> list[dict]:
    state = cluster.state
    held = state.held_gpus()
    queued: dict[str, list[int]] = {}
    for (_team, pool, _kind), (n, gpus) in list(state.pending_counts.items()):
        q = queued.setdefault(pool, [0, 0])
        q[0] += n
        q[1] += gpus
    with store.session() as s:
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
            "sharing": sharing_view(cluster.pool_sharing(pool)),
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


def teams_view(cluster: ClusterView, store: Store, who: Identity) -> list[dict]:
    held = cluster.state.held_gpus()
    # (team, pool) -> the CPUs and memory its running work asked for
    resources = cluster.state.ledger.resources
    with store.session() as s:
        teams = s.scalars(select(TeamRow).order_by(TeamRow.name)).all()
        quotas = s.scalars(select(QuotaRow)).all()
    out = []
    for t in teams:
        if not who.sees_team(t.name):
            continue
        limits = {pool: cluster.notebook_gpu_limit(t.name, pool)
                  for pool in cluster.state.capacity}
        out.append({"name": t.name, "group": t.group, "weight": t.weight,
                    "default": t.name == cluster.default_team,
                    "notebook_gpu_limits": {p: n for p, n in limits.items() if n is not None},
                    "storage": cluster.storage_view(t.name),
                    # the one an admin set (null: the configuration's holds)
                    "storage_quota": t.storage_quota,
                    "quotas": {q.pool: {"nominal": q.nominal,
                                        "borrowing_limit": q.borrowing_limit,
                                        "lending_limit": q.lending_limit,
                                        "used": gpu_units(held.get((t.name, q.pool), 0)),
                                        "cpus": q.cpus, "memory": q.memory,
                                        "used_cpus": round(resources.get(
                                            (t.name, q.pool), (0.0, 0))[0], 3),
                                        "used_memory": resources.get((t.name, q.pool),
                                                                     (0.0, 0))[1]}
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


def encode_cursor(row: WorkloadRow) -> str:
    """The opaque cursor of a listed row: where the next page starts (after it)."""
    raw = json.dumps([row.submitted_at, row.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """(submitted_at, id) of a cursor ``encode_cursor`` made; SpecError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, wid = json.loads(raw)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) \
                or not isinstance(wid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", wid):
            raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise SpecError("cursor", "is not a cursor this list gave (pass a response's "
                                  "next_cursor as it is)") from None
    return float(at), wid


# Columns of a workload only the scheduler reads: a listed row has no such attribute.
UNLISTED = frozenset({"preempted_by", "preempted_for", "kill_at", "nomination",
                      "estimated_start", "estimate_made_at"})


def workloads(store: Store, who: Identity, filters: dict[str, list[str]], limit: int,
              with_attempts: bool, cursor: Optional[str] = None
              ) -> tuple[list[SimpleNamespace], dict[str, list[SimpleNamespace]], Optional[str]]:
    """The newest workloads the caller may see that match ``filters``
    (``LIST_FILTERS`` names -> values), after ``cursor`` (a previous page's
    next cursor), and with ``with_attempts`` their attempts (one query for
    all of them, not one per workload), and the next page's cursor (None:
    this was the last page).

    Keyset pagination on (submitted_at, id), the order of the list's indexes
    (migration 0014): a page costs what it returns, however far down it is,
    and work submitted while a client pages (newer than its first page) never
    shifts the later pages, so each workload is listed once.

    The rows are read with SQLAlchemy's Core, each as a plain namespace of
    its columns (the model's attribute names; not the scheduler's own
    columns, ``UNLISTED``), not as ORM objects: a page is only viewed, and
    building 50 tracked objects and their attempts was half of its cost."""
    q = page_query(who, filters, limit, cursor)

    def read(db):
        attempts: dict[str, list[SimpleNamespace]] = {}
        rows = plain_rows(db.execute(q))
        more = len(rows) > limit
        rows = rows[:limit]
        if with_attempts:
            for a in plain_rows(db.execute(ATTEMPTS_OF, {"ids": [r.id for r in rows]})):
                attempts.setdefault(a.workload_id, []).append(a)
        return rows, attempts, encode_cursor(rows[-1]) if more else None
    return store.read(read)


def page_query(who: Identity, filters: dict[str, list[str]], limit: int,
               cursor: Optional[str] = None):
    """The statement of ``workloads``'s page: its rows and one more (which
    says whether a next page exists)."""
    q = select(*(c for c in WorkloadRow.__table__.c if c.name not in UNLISTED))
    for name, values in filters.items():
        if values:
            q = q.where(matching(name, values))
    if not who.admin:
        q = q.where(WorkloadRow.team.in_(sorted(who.teams | who.leads)))
    if cursor:
        q = q.where(tuple_(WorkloadRow.submitted_at, WorkloadRow.id) < tuple_(*decode_cursor(cursor)))
    return q.order_by(WorkloadRow.submitted_at.desc(), WorkloadRow.id.desc()).limit(limit + 1)


# The attempts of a page's workloads (``ids``), made once (building the
# statement, with its 50 ids, cost as much as running it).
ATTEMPTS_OF = (select(*Attempt.__table__.c)
               .where(Attempt.__table__.c.workload_id.in_(bindparam("ids", expanding=True)))
               .order_by(Attempt.__table__.c.workload_id, Attempt.__table__.c.number))


def plain_rows(result) -> list[SimpleNamespace]:
    """A query's rows as namespaces of their columns, fetched at once (a
    row's mapping, and a fetch per row, were a third of a page's read)."""
    keys = tuple(result.keys())
    return [SimpleNamespace(**dict(zip(keys, r))) for r in result.all()]


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
        s.execute(select(WorkloadRow.id).limit(1)).all()  # not a count: that reads every row
