"""Admin operations on the cluster and the queue: change a team's quotas,
drain a node, take a GPU out of service, set a pool's price, change a
queued workload's priority, hold and release it.

Each one checks who asks, changes the database (with an audit entry) and
then tells the scheduler core (through ``facades.Steering``), like the engine's own
requests (submitting.py, withdrawals.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

from sqlalchemy import select

from typing import Optional

from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.store import (AuditEntry, GpuRow, NodeRow, NoticeRow, PoolRow, PriceRow, QuotaRow,
                     WorkloadRow)
from gpuspawner.service.loop import journal
from gpuspawner.service.workloads import queries
from gpuspawner.service.loop.facades import Steering
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.access.identity import Identity
from gpuspawner.scheduler.kinds import kind
from gpuspawner.service.loop.rebuild import to_team, to_workload
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import HELD, QUEUED
from gpuspawner.service.teams.registry import quota_rows


def _need_admin(who: Identity, what: str) -> None:
    if not who.admin:
        raise Forbidden(f"{what} needs the scope custom:gpuhub:admin")


def _reason(reason: str, required: bool) -> str:
    if not isinstance(reason, str) or len(reason) > 500:
        raise SpecError("reason", "must be a string of at most 500 characters")
    if required and not reason.strip():
        raise SpecError("reason", "is required: say why, for the audit log and the other admins")
    return reason.strip()


def admin_marks(steering: Steering, node: str) -> frozenset[int]:
    """GPU numbers of a node that are out of service, from the inventory's
    health checks or an admin's mark."""
    with steering.records.store.session() as s:
        rows = s.scalars(select(GpuRow).where(GpuRow.node == node)).all()
    return frozenset(r.index for r in rows if not r.healthy or r.admin_mark)


def set_team(steering: Steering, who: Identity, name: str, weight: Optional[float],
             quotas: Optional[dict[str, Quota]], audit_detail: Optional[dict] = None
             ) -> list[str]:
    """Change a team's weight and quotas; returns warnings (the change is
    made) and raises SpecError for a change that cannot work.
    ``audit_detail`` joins the audit entry (an applied preview's figures)."""
    if not who.admin:
        raise Forbidden("changing teams and quotas needs the scope custom:gpuhub:admin")
    now = steering.records.clock()
    capacity = steering.cluster.state.capacity
    sizes = steering.pool_sizes()
    if quotas and name == steering.teams.default_team:
        raise SpecError("quotas", f"team {name} is the default team: its nominal quota is "
                                  f"what the other teams do not own; change theirs instead",
                        status=409)
    for pool, q in (quotas or {}).items():
        if pool not in capacity:
            raise SpecError(f"quotas.{pool}", f"unknown pool {pool!r}; known pools: "
                            f"{', '.join(sorted(capacity))}")
        if q.nominal > sizes[pool]:
            raise SpecError(f"quotas.{pool}.nominal", f"{q.nominal} GPUs cannot be "
                            f"guaranteed: pool {pool} has {sizes[pool]} GPUs in all")
        if q.lending_limit is not None and q.lending_limit > q.nominal:
            raise SpecError(f"quotas.{pool}.lending_limit", f"{q.lending_limit} is more "
                            f"than the team's nominal quota ({q.nominal}): a team lends "
                            f"only from its own idle nominal quota")

    def described(team, rows) -> dict:
        return {"weight": team.weight, "quotas": {
            q.pool: [q.nominal, q.borrowing_limit, q.lending_limit, q.cpus, q.memory]
            for q in rows}}

    with steering.records.store.transaction() as s:
        team = steering.teams.ensure(name, now, s)
        before = described(team, quota_rows(s, name))
        if weight is not None:
            team.weight = weight
        for pool, q in (quotas or {}).items():
            row = s.get(QuotaRow, (name, pool)) or QuotaRow(team=name, pool=pool)
            row.nominal, row.borrowing_limit, row.lending_limit = (
                q.nominal, q.borrowing_limit, q.lending_limit)
            row.cpus, row.memory = q.cpus, q.memory
            s.add(row)
        s.flush()
        after_rows = quota_rows(s, name)
        journal.audit(s, now, who.name, "set-team", name,
                      {"before": before, "after": described(team, after_rows),
                       **(audit_detail or {})})
        core_team = to_team(team, after_rows)
        steering.submissions.change(lambda sched: sched.set_team(core_team))
        steering.teams.refresh_default(s)
        nominal: dict[str, int] = {}
        for q in s.scalars(select(QuotaRow)):
            nominal[q.pool] = nominal.get(q.pool, 0) + q.nominal
    warnings = [f"the nominal quotas of pool {pool} add up to {nominal[pool]} GPUs but it has "
                f"{capacity.get(pool, 0)} healthy: not every team can have its guarantee at once"
                for pool in sorted(quotas or {}) if nominal.get(pool, 0) > capacity.get(pool, 0)]
    steering.submissions.wake()
    return warnings


def set_drained(steering: Steering, who: Identity, name: str, drained: bool, reason: str = "") -> dict:
    """Drain: no new work goes to the node; what runs there runs to its end."""
    _need_admin(who, "draining a node")
    reason = _reason(reason, required=False)
    if name not in steering.cluster.nodes:
        raise NotFound(f"no node {name}; known: {', '.join(sorted(steering.cluster.nodes))}")
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = s.get(NodeRow, name)
        row.drained = drained
        journal.audit(s, now, who.name, "drain" if drained else "undrain", name,
                      {"reason": reason})
    steering.set_node(replace(steering.cluster.nodes[name].node, drained=drained))
    return {"name": name, "drained": drained}


def set_gpu_in_service(steering: Steering, who: Identity, node: str, index: int, in_service: bool,
                       reason: str = "") -> dict:
    """Take a GPU out of service (work on it is requeued by the next cycle)
    or put it back. The mark outlives restarts and inventory refreshes."""
    _need_admin(who, "marking a GPU unhealthy")
    reason = _reason(reason, required=not in_service)
    if node not in steering.cluster.nodes:
        raise NotFound(f"no node {node}; known: {', '.join(sorted(steering.cluster.nodes))}")
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = s.get(GpuRow, (node, index))
        if row is None:
            raise NotFound(f"node {node} has no GPU {index}")
        row.admin_mark = "" if in_service else f"by {who.name}: {reason}"
        journal.audit(s, now, who.name, "gpu-in-service" if in_service else "gpu-out-of-service",
                      f"{node}/{index}", {"reason": reason, "uuid": row.uuid})
    steering.set_node(replace(steering.cluster.nodes[node].node, unhealthy_gpus=admin_marks(steering, node)))
    return {"node": node, "index": index, "in_service": in_service}


def set_price(steering: Steering, who: Identity, pool: str, price: float) -> dict:
    _need_admin(who, "setting a price")
    if isinstance(price, bool) or not isinstance(price, (int, float)) \
            or not math.isfinite(price) or not 0 <= price <= 1_000_000:
        raise SpecError("price_per_gpu_hour", f"must be a number from 0 to 1000000, got {price!r}")
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = s.get(PoolRow, pool)
        if row is None:
            raise NotFound(f"no pool {pool}")
        before, row.price_per_gpu_hour = row.price_per_gpu_hour, float(price)
        s.add(PriceRow(pool=pool, since=now, price_per_gpu_hour=float(price)))
        journal.audit(s, now, who.name, "set-price", pool,
                      {"before": before, "after": float(price)})
    return {"pool": pool, "price_per_gpu_hour": float(price)}


def _queued_job(s, steering: Steering, who: Identity, wid: str, states: tuple[str, ...],
                what: str) -> WorkloadRow:
    row = queries.visible(s, who, wid)
    if row.state not in states:
        raise Conflict(f"workload {wid} is {row.state}: only a {' or '.join(states)} "
                       f"workload can be {what}")
    if row.nomination:
        raise Conflict(f"workload {wid} is about to start on GPUs being freed for it")
    return row


def set_priority(steering: Steering, who: Identity, wid: str, priority: str) -> WorkloadRow:
    """Admins and team leads reorder the queue; owners may not (they would
    all pick the highest)."""
    known = steering.cluster.policy.priority_classes
    if not isinstance(priority, str) or priority not in known:
        raise SpecError("priority", f"unknown priority class {priority!r}; known: "
                                    f"{', '.join(sorted(known))}")
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = _queued_job(s, steering, who, wid, (QUEUED, HELD), "reprioritised")
        if not (who.admin or row.team in who.leads):
            raise Forbidden(f"changing the priority of {wid} needs a lead of team {row.team} "
                            f"or an admin")
        before, row.priority = row.priority, priority
        journal.event(s, wid, "priority-changed", now, f"priority {before} → {priority} "
                      f"by {who.name}", attempt=row.attempt)
        journal.audit(s, now, who.name, "set-priority", wid, {"before": before, "after": priority})
    if row.state == QUEUED:
        w = to_workload(row)

        def requeue(sched) -> None:
            sched.state.remove_pending(wid)
            sched.state.add_pending(w)
        steering.submissions.change(requeue)
    steering.submissions.wake()
    return row


def hold(steering: Steering, who: Identity, wid: str) -> WorkloadRow:
    """A held job keeps its place in the order (its submit time) but is not
    considered until released."""
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = _queued_job(s, steering, who, wid, (QUEUED,), "held")
        _check_acts_on(who, row, "hold")
        row.state, row.reason = HELD, f"held by {who.name}"
        journal.event(s, wid, "held", now, row.reason, attempt=row.attempt)
        journal.audit(s, now, who.name, "hold", wid, {})
    steering.submissions.change(lambda sched: sched.cancel(wid, now))
    steering.submissions.forget_reason(wid)
    return row


def release_hold(steering: Steering, who: Identity, wid: str) -> WorkloadRow:
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = _queued_job(s, steering, who, wid, (HELD,), "released")
        _check_acts_on(who, row, "release")
        w = to_workload(row)
        why = steering.cluster.validate(w)
        if why is not None:
            raise Conflict(f"workload {wid} can no longer run: {why}")
        row.state, row.reason = QUEUED, f"released by {who.name}"
        journal.event(s, wid, "released", now, row.reason, attempt=row.attempt)
        journal.audit(s, now, who.name, "release-hold", wid, {})
    steering.submissions.change(lambda sched: sched.submit(w, now))
    steering.submissions.wake()
    return row


def _check_acts_on(who: Identity, row: WorkloadRow, verb: str) -> None:
    if not who.acts_on(row.user, row.team):
        raise Forbidden(f"workload {row.id} belongs to {row.user}; only they, a lead of team "
                        f"{row.team} or an admin may {verb} it")
    if not kind(row.kind).submitted_by_users:
        raise Conflict(f"workload {row.id} is a {row.kind}: only jobs can be held")


# ---- notices and the audit log ------------------------------------------------------
def post_notice(steering: Steering, who: Identity, user: str, server: str, kind_: str, message: str,
                expires_at: Optional[float], data: dict) -> NoticeRow:
    """A message for a user's server (the culler's warnings), audited."""
    _need_admin(who, "posting notices")
    now = steering.records.clock()
    with steering.records.store.transaction() as s:
        row = NoticeRow(user=user, server=server, kind=kind_, message=message, created_at=now,
                        expires_at=expires_at, data=data)
        s.add(row)
        s.flush()
        journal.audit(s, now, who.name, "notice", f"{row.user}/{row.server}"[:255],  # the column
                      {"kind": row.kind, "message": row.message, **row.data})
    return row


# The largest id an integer column holds (PostgreSQL's INTEGER).
MAX_ID = 2 ** 31 - 1


def clear_notice(steering: Steering, who: Identity, nid: int) -> NoticeRow:
    _need_admin(who, "clearing notices")
    with steering.records.store.transaction() as s:
        row = s.get(NoticeRow, nid) if nid <= MAX_ID else None
        if row is None:
            raise NotFound(f"no notice {nid}")
        row.cleared_at = row.cleared_at or steering.records.clock()
    return row


def record(steering: Steering, who: Identity, action: str, target: str, detail: dict) -> AuditEntry:
    """An audit entry of a hub-side service (a cull and its reasons, say)."""
    with steering.records.store.transaction() as s:
        row = AuditEntry(time=steering.records.clock(), actor=who.name, action=action, target=target,
                         detail=detail)
        s.add(row)
    if action == "cull":
        steering.count_cull()
    return row
