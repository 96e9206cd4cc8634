"""Workloads that wait (``waiting``): for their dependencies, or for a
slot of their sweep's ``max_running``. They are not in the scheduler core,
so they hold no reservation and no quota; ``release_step`` queues the ones
whose wait is over and cancels the ones whose dependency can no longer be
met. It reads everything from the database, so a restart loses nothing: the
engine runs it at start and after anything ended.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpuspawner.store import SweepRow, SweepTaskRow, WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.scheduler.workflow.dependencies import MET, NEVER, describe_cycle, find_cycle, resolve, sweep_outcome
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import CANCELLED, FINAL_STATES, QUEUED, STARTED_STATES, WAITING

RUNNING_SWEEP = "running"
# Cancellations can cascade (a dependent of a dependent); each round
# settles one level.
MAX_ROUNDS = 32


def slot_reason(sweep_id: str, max_running: Optional[int]) -> str:
    """Why a task of a sweep waits once the sweep's dependencies are met."""
    if max_running is None:
        return f"waiting to be released by sweep {sweep_id}"
    return f"waiting for a slot of sweep {sweep_id} (at most {max_running} at once)"


def check_after(s: Session, who: Identity, new_id: str, after: list[dict]) -> None:
    """Every target exists and the caller may see it; no cycle through the new one."""
    states = target_states(s, [d["id"] for d in after], who)
    for i, dep in enumerate(after):
        if dep["id"] not in states:
            raise SpecError(f"after[{i}].id", f"no workload or sweep {dep['id']} that you can see")
    edges = {new_id: [d["id"] for d in after]}
    frontier = set(edges[new_id])
    while frontier:  # what the targets themselves wait for, level by level
        found = _edges(s, frontier)
        edges.update(found)
        frontier = {t for ts in found.values() for t in ts} - set(edges)
    cycle = find_cycle(new_id, edges)
    if cycle is not None:
        raise SpecError("after", describe_cycle(cycle))


def _edges(s: Session, ids: Iterable[str]) -> dict[str, list[str]]:
    ids = list(ids)
    out = {i: [] for i in ids}
    for wid, after in s.execute(select(WorkloadRow.id, WorkloadRow.after)
                                .where(WorkloadRow.id.in_(ids))):
        out[wid] = [d["id"] for d in after or ()]
    for sid, after in s.execute(select(SweepRow.id, SweepRow.after).where(SweepRow.id.in_(ids))):
        out[sid] = [d["id"] for d in after or ()]
    return out


def target_states(s: Session, ids: Iterable[str], who: Optional[Identity] = None
                  ) -> dict[str, Optional[str]]:
    """id -> its end state, None while it has not ended (for ``resolve``);
    ids that do not exist (or ``who`` may not see) are left out."""
    ids = set(ids)
    out: dict[str, Optional[str]] = {}
    for model in (WorkloadRow, SweepRow):
        wanted = [i for i in ids if i.startswith("w" if model is WorkloadRow else "s")]
        if not wanted:
            continue
        for tid, state, team, user in s.execute(select(model.id, model.state, model.team,
                                                       model.user).where(model.id.in_(wanted))):
            if who is not None and not (who.sees_team(team) or user == who.name):
                continue
            out[tid] = state if state in FINAL_STATES else None
    return out


def sweep_counts(s: Session, sweep_id: str) -> dict[str, int]:
    """state -> how many of the sweep's tasks (their current workloads) are in it."""
    q = (select(WorkloadRow.state, func.count()).join(
        SweepTaskRow, SweepTaskRow.workload_id == WorkloadRow.id)
        .where(SweepTaskRow.sweep_id == sweep_id).group_by(WorkloadRow.state))
    return {state: n for state, n in s.execute(q)}


class Release:
    """What one release step decided, for the engine to tell the core."""

    def __init__(self) -> None:
        self.queued: list[WorkloadRow] = []
        self.ended = 0


def release_step(s: Session, now: float, can_run: Callable[[WorkloadRow], Optional[str]]
                 ) -> Release:
    """Queue what may go, cancel what never can, end the sweeps that
    ended. ``can_run(row)``: why a row can no longer run (the core's
    validation), or None."""
    out = Release()
    for _ in range(MAX_ROUNDS):
        ended = out.ended
        _round(s, now, can_run, out)
        if out.ended == ended:
            break
    return out


def _round(s: Session, now: float, can_run, out: Release) -> None:
    sweeps = s.scalars(select(SweepRow).where(SweepRow.state == RUNNING_SWEEP)).all()
    counts = {}
    for sw in sweeps:
        counts[sw.id] = sweep_counts(s, sw.id)
        outcome = sweep_outcome(counts[sw.id], sw.cancel_requested)
        if outcome is not None:
            sw.state, sw.finished_at = outcome, now
            journal.audit(s, now, "gpuhub", "sweep-ended", sw.id, {"state": outcome})
            out.ended += 1
    sweeps = [sw for sw in sweeps if sw.state == RUNNING_SWEEP]
    rows = s.scalars(select(WorkloadRow).where(WorkloadRow.state == WAITING,
                                               WorkloadRow.sweep_id.is_(None))).all()
    states = target_states(s, {d["id"] for r in [*rows, *sweeps] for d in r.after or ()})
    for row in rows:
        verdict, why = resolve(row.after, states)
        if verdict == NEVER:
            _cancel(s, row, now, why, out)
        elif verdict == MET:
            _queue(s, row, now, "its dependencies are met", can_run, out,
                   eligible_at=_met_at(s, row.after, now))
        elif why != row.reason:
            row.reason = why
    for sw in sweeps:
        verdict, why = resolve(sw.after or (), states)
        if verdict == NEVER:
            for row in s.scalars(select(WorkloadRow).where(WorkloadRow.sweep_id == sw.id,
                                                           WorkloadRow.state == WAITING)):
                _cancel(s, row, now, why, out)
        elif verdict == MET:
            if sw.after:  # what its tasks wait for now (one statement, whatever their number)
                why = slot_reason(sw.id, sw.max_running)
                s.execute(update(WorkloadRow).where(
                    WorkloadRow.sweep_id == sw.id, WorkloadRow.state == WAITING,
                    WorkloadRow.reason != why).values(reason=why))
            _release_tasks(s, sw, counts[sw.id], now, can_run, out)


def _release_tasks(s: Session, sw: SweepRow, counts: dict[str, int], now: float, can_run,
                   out: Release) -> None:
    """The next waiting tasks of a sweep, up to its max_running."""
    if not counts.get(WAITING):
        return
    q = (select(WorkloadRow).where(WorkloadRow.sweep_id == sw.id, WorkloadRow.state == WAITING)
         .order_by(WorkloadRow.sweep_index))
    if sw.max_running is not None:
        free = sw.max_running - sum(counts.get(state, 0) for state in STARTED_STATES)
        if free <= 0:
            return
        q = q.limit(free)
    # A sweep that waited for others is eligible from when they ended, the
    # same for all its tasks (they keep their places: sweep_task_spacing);
    # a slot of max_running does not make a task later.
    eligible = _met_at(s, sw.after, now) if sw.after else None
    for row in s.scalars(q):
        _queue(s, row, now, f"released by sweep {sw.id}", can_run, out, eligible_at=eligible)


def _met_at(s: Session, after: list[dict], now: float) -> float:
    """When the last of ``after``'s targets ended (now if none says)."""
    ends = []
    for model in (WorkloadRow, SweepRow):
        ids = [d["id"] for d in after if d["id"].startswith("w" if model is WorkloadRow else "s")]
        if ids:
            ends += [t for t in s.scalars(select(model.finished_at).where(model.id.in_(ids)))
                     if t is not None]
    return min(max(ends), now) if ends else now


def _queue(s: Session, row: WorkloadRow, now: float, why: str, can_run, out: Release,
           eligible_at: Optional[float] = None) -> None:
    refusal = can_run(row)
    if refusal is not None:
        _cancel(s, row, now, f"can no longer run: {refusal}", out)
        return
    row.state, row.reason = QUEUED, "queued"
    if eligible_at is not None:
        row.eligible_at = max(eligible_at, row.submitted_at)
    journal.event(s, row.id, "released", now, why, attempt=row.attempt)
    out.queued.append(row)


def _cancel(s: Session, row: WorkloadRow, now: float, why: str, out: Release) -> None:
    row.state, row.finished_at, row.reason = CANCELLED, now, why
    journal.event(s, row.id, "cancelled", now, why, attempt=row.attempt)
    out.ended += 1
