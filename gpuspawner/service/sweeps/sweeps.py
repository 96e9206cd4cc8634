"""Sweeps: one job over a parameter grid, as one workload per task.

Every task is an ordinary job of the sweep's team (admitted against its
quota like any other) that starts ``waiting``: the release step
(waiting.py) queues at most ``max_running`` of them at once, so the rest
hold no reservation and no quota. The sweep row keeps what is the sweep's
own (its cap, its metric, what it waits for, its end); ``sweep_tasks`` says
which workload is each index's current one (a retry makes a new one) and
the metric it reported.
"""
from __future__ import annotations

import os
import secrets

from sqlalchemy import select

from gpuspawner.scheduler.workflow import dependencies
from gpuspawner.store import Attempt, SweepRow, SweepTaskRow, WorkloadRow
from gpuspawner.times import iso
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.facades import Facades
from gpuspawner.service.workloads import waiting
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.rebuild import field_for_reason, to_workload
from gpuspawner.service.sweeps.scraps import read_metric
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import (CANCELLED, FAILED, FINAL_STATES, HELD, QUEUED, STATES, SUCCEEDED,
                     WAITING)
from gpuspawner.vocab.sweeps import SweepSpec, best_index, task_spec
from gpuspawner.service.workloads.views import output_notebook

SWEEP_STATES = (waiting.RUNNING_SWEEP, SUCCEEDED, FAILED, CANCELLED)
# Tasks a cancel-all ends at once (not in the core, or only queued there).
NOT_STARTED = (WAITING, QUEUED, HELD)
RETRIED = (FAILED, CANCELLED)


def submit(facades: Facades, who: Identity, sweep: SweepSpec) -> SweepRow:
    """Make the sweep and all its tasks (waiting) in one transaction."""
    template = sweep.template
    team, user, now = facades.submissions.accept(who, template)
    sid = "s" + secrets.token_hex(6)
    after = list(sweep.after)
    if after:
        with facades.records.store.session() as s:
            waiting.check_after(s, who, sid, after)
    reason = (dependencies.resolve(after, {})[1] if after
              else waiting.slot_reason(sid, sweep.max_running))
    rows = []
    for i, params in enumerate(sweep.tasks):
        row = facades.submissions.make_row("w" + secrets.token_hex(6), task_spec(template, params, sid, i),
                              team, user, now, after, reason)
        row.sweep_id, row.sweep_index = sid, i
        rows.append(row)
    why = facades.cluster.validate(to_workload(rows[0]))
    if why is not None:
        raise SpecError(f"template.{field_for_reason(why)}", why)
    with facades.records.store.transaction() as s:
        sw = SweepRow(id=sid, name=sweep.name, team=team, user=user,
                      max_running=sweep.max_running, metric=sweep.metric, after=after,
                      state=waiting.RUNNING_SWEEP, cancel_requested=False, submitted_at=now)
        s.add(sw)
        s.add_all(rows)
        s.flush()
        s.add_all(SweepTaskRow(sweep_id=sid, index=i, parameters=params, workload_id=r.id)
                  for i, (params, r) in enumerate(zip(sweep.tasks, rows)))
        for r in rows:
            journal.event(s, r.id, "submitted", now, f"task {r.sweep_index} of sweep {sid} "
                          f"submitted by {who.name} for {user} to team {team}", attempt=0)
        journal.audit(s, now, who.name, "submit-sweep", sid,
                      {"team": team, "pool": template.pool, "tasks": len(rows),
                       "max_running": sweep.max_running})
    for r in rows:
        facades.submissions.track(r)
    facades.submissions.dependencies_changed()
    facades.submissions.wake()
    return sw


def _visible(s, who: Identity, sid: str) -> SweepRow:
    sw = s.get(SweepRow, sid)
    if sw is None or not (who.sees_team(sw.team) or sw.user == who.name):
        raise NotFound(f"no sweep {sid}")
    return sw


def _acts_on(who: Identity, sw: SweepRow, verb: str) -> None:
    if not who.acts_on(sw.user, sw.team):
        raise Forbidden(f"sweep {sw.id} belongs to {sw.user}; only they, a lead of team "
                        f"{sw.team} or an admin may {verb} it")


def cancel(facades: Facades, who: Identity, sid: str) -> SweepRow:
    """Cancel every task not ended: those not started here, at once, in one
    transaction (a sweep may have thousands); the running ones as a cancel
    of each (they are stopped)."""
    now = facades.records.clock()
    with facades.records.store.transaction() as s:
        sw = _visible(s, who, sid)
        _acts_on(who, sw, "cancel")
        sw.cancel_requested = True
        why = f"cancelled by {who.name} with sweep {sid}"
        rows = s.scalars(select(WorkloadRow).join(
            SweepTaskRow, SweepTaskRow.workload_id == WorkloadRow.id).where(
            SweepTaskRow.sweep_id == sid, WorkloadRow.state.not_in(FINAL_STATES))).all()
        queued, running = [], []
        for row in rows:
            if row.state in NOT_STARTED:
                if row.state == QUEUED:
                    queued.append(row.id)
                row.state, row.finished_at, row.reason = CANCELLED, now, why
                row.nomination = None
                journal.event(s, row.id, "cancelled", now, why, attempt=row.attempt)
            else:
                running.append(row.id)
        journal.audit(s, now, who.name, "cancel-sweep", sid,
                      {"cancelled": len(rows) - len(running), "stopping": len(running)})

    def withdraw(sched) -> None:
        for wid in queued:
            if wid in sched.state.pending:
                sched.cancel(wid, now)
    facades.submissions.change(withdraw)
    for wid in queued:
        facades.submissions.forget_reason(wid)
    for wid in running:
        try:
            facades.submissions.cancel(who, wid)
        except Conflict:
            pass  # it ended meanwhile
    facades.submissions.dependencies_changed()
    facades.submissions.wake()
    return sw


def retry(facades: Facades, who: Identity, sid: str) -> SweepRow:
    """Each failed or cancelled task again, as a new workload (same index,
    same parameters), waiting for a slot like the first time."""
    now = facades.records.clock()
    with facades.records.store.transaction() as s:
        sw = _visible(s, who, sid)
        _acts_on(who, sw, "retry")
        tasks = s.execute(select(SweepTaskRow, WorkloadRow).join(
            WorkloadRow, SweepTaskRow.workload_id == WorkloadRow.id).where(
            SweepTaskRow.sweep_id == sid, WorkloadRow.state.in_(RETRIED))).all()
        if not tasks:
            raise Conflict(f"sweep {sid} has no failed or cancelled task to retry")
        for task, old in tasks:
            new = _copy(facades, old, waiting.slot_reason(sid, sw.max_running))
            s.add(new)
            task.workload_id, task.metric, task.output_notebook = new.id, None, None
            journal.event(s, new.id, "submitted", now, f"retry of {old.id} (task {task.index} "
                          f"of sweep {sid}) by {who.name}", attempt=0)
        sw.state, sw.finished_at, sw.cancel_requested = waiting.RUNNING_SWEEP, None, False
        journal.audit(s, now, who.name, "retry-sweep", sid, {"tasks": len(tasks)})
    facades.submissions.dependencies_changed()
    facades.submissions.wake()
    return sw


def _copy(facades, old: WorkloadRow, reason: str) -> WorkloadRow:
    wid = "w" + secrets.token_hex(6)
    spec = dict(old.spec)
    own = os.path.join(facades.records.data_dir, "workloads", old.id, "checkpoints")
    if spec.get("checkpoint_dir") == own:  # the default: the new workload's own
        spec["checkpoint_dir"] = os.path.join(facades.records.data_dir, "workloads", wid,
                                              "checkpoints")
    return WorkloadRow(
        id=wid, name=old.name, kind=old.kind, team=old.team, user=old.user,
        project=old.project, pool=old.pool, gpus_per_node=old.gpus_per_node,
        num_nodes=old.num_nodes, priority=old.priority, time_limit=old.time_limit,
        grace_period=old.grace_period, spec=spec, state=WAITING, reason=reason, attempt=0,
        preempted_by=[], submitted_at=facades.records.clock(), after=[], sweep_id=old.sweep_id,
        sweep_index=old.sweep_index)


def record_result(s, row: WorkloadRow) -> None:
    """A task ended: where its output notebook is, and (if it succeeded)
    the sweep's metric as it reported it."""
    task = s.scalar(select(SweepTaskRow).where(SweepTaskRow.sweep_id == row.sweep_id,
                                               SweepTaskRow.workload_id == row.id))
    sw = s.get(SweepRow, row.sweep_id)
    attempt = s.get(Attempt, (row.id, row.attempt))
    if task is None or sw is None or attempt is None:
        return
    spec = row.spec or {}
    notebook = output_notebook(spec, attempt.attempt_dir) if spec.get("notebook") else None
    task.output_notebook = notebook
    if sw.metric and row.state == SUCCEEDED:
        task.metric = read_metric(sw.metric["name"], notebook,
                                  [attempt.attempt_dir, spec.get("working_dir") or ""])


# ---- reads ---------------------------------------------------------------------------
def _tasks(s, sweep_ids: list[str]):
    """(SweepTaskRow, state, reason) of these sweeps' tasks, by sweep and index."""
    return s.execute(select(SweepTaskRow, WorkloadRow.state, WorkloadRow.reason).join(
        WorkloadRow, SweepTaskRow.workload_id == WorkloadRow.id).where(
        SweepTaskRow.sweep_id.in_(sweep_ids)).order_by(SweepTaskRow.sweep_id,
                                                        SweepTaskRow.index)).all()


def get(facades: Facades, who: Identity, sid: str) -> dict:
    with facades.records.store.session() as s:
        sw = _visible(s, who, sid)
        return view(sw, _tasks(s, [sid]), with_tasks=True)


def listed(facades: Facades, who: Identity, teams: list[str], states: list[str], limit: int
           ) -> list[dict]:
    """The newest sweeps the caller may see (without their tasks)."""
    q = select(SweepRow).order_by(SweepRow.submitted_at.desc(), SweepRow.id).limit(limit)
    if teams:
        q = q.where(SweepRow.team.in_(teams))
    if states:
        q = q.where(SweepRow.state.in_(states))
    if not who.admin:
        q = q.where(SweepRow.team.in_(sorted(who.teams | who.leads)) | (SweepRow.user == who.name))
    with facades.records.store.session() as s:
        sweeps = s.scalars(q).all()
        by_sweep: dict[str, list] = {sw.id: [] for sw in sweeps}
        for t in _tasks(s, list(by_sweep)):
            by_sweep[t[0].sweep_id].append(t)
    return [view(sw, by_sweep[sw.id], with_tasks=False) for sw in sweeps]


def view(sw: SweepRow, tasks: list, with_tasks: bool) -> dict:
    """The Sweep of the API; ``tasks``: (SweepTaskRow, state, reason) by index."""
    counts = {state: 0 for state in STATES}
    for _t, state, _r in tasks:
        counts[state] += 1
    best = None
    if sw.metric:
        by_index = {t.index: t for t, state, _r in tasks
                    if t.metric is not None and state == SUCCEEDED}
        i = best_index({i: t.metric for i, t in by_index.items()}, sw.metric["goal"])
        if i is not None:
            t = by_index[i]
            best = {"index": i, "parameters": t.parameters, "value": t.metric,
                    "workload_id": t.workload_id}
    out = {"id": sw.id, "name": sw.name, "team": sw.team, "user": sw.user, "state": sw.state,
           "max_running": sw.max_running, "total": len(tasks), "counts": counts,
           "metric": sw.metric, "best": best, "after": sw.after or [],
           "submitted_at": iso(sw.submitted_at), "finished_at": iso(sw.finished_at)}
    if with_tasks:
        out["tasks"] = [{"index": t.index, "parameters": t.parameters,
                         "workload_id": t.workload_id, "state": state, "reason": reason,
                         "metric": t.metric, "output_notebook": t.output_notebook}
                        for t, state, reason in tasks]
    return out


def parse_states(values: list[str]) -> list[str]:
    bad = sorted(set(values) - set(SWEEP_STATES))
    if bad:
        raise SpecError("state", f"unknown sweep state {bad[0]!r}; known: "
                                 f"{', '.join(SWEEP_STATES)}")
    return values
