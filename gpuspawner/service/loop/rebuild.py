"""Convert between database rows and the scheduler core's plain data, and
rebuild the core's state from the database at start."""
from __future__ import annotations

from typing import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuspawner.scheduler import Scheduler
from gpuspawner.scheduler.fairshare import DecayedUsage, cpus_key, memory_key, usage_deltas
from gpuspawner.scheduler.model import NOT_PREEMPTED, TOPOLOGY_NONE, Node, Quota, Team, Workload
from gpuspawner.store import Attempt, QuotaRow, TeamRow, UsageRow, WorkloadRow

from gpuspawner.vocab.states import HOLDING_STATES, QUEUED, STOPPING

GIB = float(1 << 30)


def placement_to_json(placement) -> list:
    return [[node, list(gpus)] for node, gpus in placement]


def placement_from_json(data) -> tuple:
    return tuple((node, tuple(gpus)) for node, gpus in data or ())


def to_workload(row: WorkloadRow) -> Workload:
    """The scheduler's view of a row. Its ``submit_time`` is when it became
    eligible: a job released from ``waiting`` is ordered and aged from its
    release (``eligible_at``), not from its submit (Slurm's EligibleTime)."""
    eligible = row.submitted_at if row.eligible_at is None else row.eligible_at
    resources = (row.spec or {}).get("resources") or {}
    return Workload(id=row.id, team=row.team, pool=row.pool, gpus_per_node=row.gpus_per_node,
                    num_nodes=row.num_nodes, gpu_share=row.gpu_share or 0.0,
                    submit_time=eligible, user=row.user,
                    kind=row.kind, priority=row.priority, time_limit=row.time_limit,
                    attempt=row.attempt,
                    preempted_by=(frozenset(row.preempted_by) if row.preempted_by
                                  else NOT_PREEMPTED),
                    grace_period=row.grace_period, sweep_index=row.sweep_index,
                    topology=(row.spec or {}).get("topology", TOPOLOGY_NONE),
                    topology_key=(row.spec or {}).get("topology_key", "switch"),
                    # what it asked for besides GPUs (none before requests)
                    cpus=float(resources.get("cpus") or 0), memory=int(resources.get("memory") or 0),
                    # its datasets' node labels as they were at its submit (Submitting.make_row)
                    dataset_nodes=(row.spec or {}).get("dataset_nodes") or {})


def to_team(row: TeamRow, quotas: Iterable[QuotaRow]) -> Team:
    return Team(name=row.name, weight=row.weight,
                quotas={q.pool: Quota(q.nominal, q.borrowing_limit, q.lending_limit,
                                      q.cpus, q.memory)
                        for q in quotas})


def load_teams(session: Session) -> list[Team]:
    quotas: dict[str, list[QuotaRow]] = {}
    for q in session.scalars(select(QuotaRow)):
        quotas.setdefault(q.team, []).append(q)
    return [to_team(t, quotas.get(t.name, ())) for t in session.scalars(select(TeamRow))]


def rebuild(session: Session, nodes: Iterable[Node], policy) -> tuple[Scheduler, list[str]]:
    """The core as the database describes it. Returns the scheduler and the
    ids of holding workloads whose placement no longer fits the hardware
    (they must be treated as lost)."""
    sched = Scheduler(nodes, load_teams(session), policy)
    state = sched.state
    unplaceable: list[str] = []
    holding = session.scalars(select(WorkloadRow).where(WorkloadRow.state.in_(HOLDING_STATES))
                              .order_by(WorkloadRow.started_at)).all()
    for row in holding:
        attempt = session.get(Attempt, (row.id, row.attempt))
        state.add_pending(to_workload(row))
        try:
            state.start(row.id, placement_from_json(attempt.placement if attempt else None),
                        attempt.started_at if attempt else row.started_at)
        except (ValueError, KeyError):
            state.remove_pending(row.id)
            unplaceable.append(row.id)
            continue
        if row.state == STOPPING and row.kill_at is not None and not row.cancel_requested:
            state.preempt(row.id, row.preempted_for, row.kill_at)
    queued = session.scalars(select(WorkloadRow).where(WorkloadRow.state == QUEUED)
                             .order_by(WorkloadRow.submitted_at)).all()
    for row in queued:
        state.add_pending(to_workload(row))
    for row in queued:
        if row.nomination:
            victims = [r.id for r in holding if r.preempted_for == row.id]
            state.nominate(row.id, placement_from_json(row.nomination), victims)
    state.usage = replay_usage(session, state.half_life,
                               [(state.running[r.id].workload,
                                 session.get(Attempt, (r.id, r.attempt)))
                                for r in holding if r.id not in unplaceable])
    return sched, unplaceable


def replay_usage(session: Session, half_life: float, running) -> dict:
    """The fair-share history (decayed GPU-seconds per team and pool, and
    CPU- and memory-seconds where asked for: fairshare.usage_deltas) from
    the usage ledger, so a restart does not forgive a team's recent use.
    ``running``: (workload, attempt) of the work that holds GPUs now."""
    horizon = max((a.started_at for _w, a in running if a), default=0.0)
    changes: list[tuple[float, str, str, float]] = []
    latest = session.scalar(select(func.max(UsageRow.ended_at)))
    if latest is not None:
        horizon = max(horizon, latest)
        since = horizon - 10 * half_life  # older use has decayed below 0.1%
        for u in session.scalars(select(UsageRow).where(UsageRow.ended_at >= since)):
            length = max(u.ended_at - u.started_at, 1e-9)
            for key, held in ((u.pool, u.gpus),
                              (cpus_key(u.pool), (u.cpu_seconds or 0.0) / length),
                              (memory_key(u.pool), (u.memory_gib_seconds or 0.0) / length * GIB)):
                if held or key == u.pool:
                    changes += [(u.started_at, u.team, key, held),
                                (u.ended_at, u.team, key, -held)]
    for w, a in running:
        if a is not None:
            changes += [(a.started_at, w.team, key, delta) for key, delta in usage_deltas(w)
                        if key != w.pool] + [(a.started_at, w.team, w.pool, a.gpus)]
    usage: dict[tuple[str, str], DecayedUsage] = {}
    for t, team, pool, delta in sorted(changes, key=lambda c: (c[0], -c[3])):
        u = usage.setdefault((team, pool), DecayedUsage(updated_at=t))
        u.advance(t, half_life, u.rate + delta)
    return usage


def field_for_reason(reason: str) -> str:
    """Which request field a core validation message is about."""
    if reason.startswith("unknown priority"):
        return "priority"
    if "pool" in reason.split(";")[0] and ("unknown pool" in reason or "may not use" in reason):
        return "pool"
    if reason.startswith("dataset ") or "but dataset " in reason:
        return "datasets"
    if "labelled" in reason and "restricted" in reason:
        return "team"
    return "nodes" if "nodes" in reason else "gpus"
