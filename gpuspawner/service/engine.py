"""The scheduling loop: the one place where the core, the database and the
backend meet.

Every decision is persisted before it is acted on: a cycle's admissions and
preemptions are committed, then the core applies them, then the backend
starts or stops processes. A crash between two steps leaves the database
describing work that may not have started; at the next start the backend
reports such work as lost and it is requeued.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ..backends.base import EXITED, LOST, TIME_LIMIT, AttemptExit, LaunchSpec
from ..isolation.accounts import AccountError
from ..scheduler import events as ev
from ..scheduler.model import Node, Quota
from ..scheduler.policy import Policy
from ..store import (Allocation, Attempt, AuditEntry, EventRow, QuotaRow, Store, TeamRow,
                     UsageRow, WorkloadRow)
from .identity import Identity
from .rebuild import (CANCELLED, FAILED, FINAL_STATES, HELD, HOLDING_STATES, QUEUED, RUNNING,
                      STOPPED, STOPPING, SUCCEEDED, field_for_reason, placement_from_json,
                      placement_to_json, rebuild, to_team, to_workload)
from .specs import JobSpec, SpecError
from .start_estimates import StartEstimates, runtime_subject
from .views import output_notebook

log = logging.getLogger("gpuhub.engine")
# Workloads the backend runs (notebook servers are run by the hub's spawner).
BACKEND_KINDS = ("job", "deployment")


class NotFound(LookupError):
    """No such workload, or one the caller may not see (same answer)."""


class Conflict(ValueError):
    """The request does not fit the workload's state."""


class Forbidden(PermissionError):
    pass


@dataclass
class LocalNode:
    """A node of this host: the core's view plus the device indices behind
    the node's GPU numbers."""

    node: Node
    devices: list[int] = field(default_factory=list)
    uuids: list[str] = field(default_factory=list)  # the devices' (inventory), if known

    def uuid(self, gpu: int) -> str:
        return self.uuids[gpu] if gpu < len(self.uuids) else ""


def local_nodes(gpus, host: str) -> list[LocalNode]:
    """This host's GPUs (inventory ``Gpu`` records) as scheduler nodes: one
    node per pool, since a host may mix GPU models."""
    by_pool: dict[str, list] = {}
    for g in gpus:
        by_pool.setdefault(g.pool, []).append(g)
    out = []
    for pool, members in sorted(by_pool.items()):
        name = host if len(by_pool) == 1 else f"{host}/{pool}"
        unhealthy = frozenset(i for i, g in enumerate(members) if not g.healthy)
        out.append(LocalNode(Node(name, pool, len(members), unhealthy_gpus=unhealthy),
                             [g.index for g in members], [g.uuid for g in members]))
    return out


@dataclass
class EngineConfig:
    data_dir: str
    team_prefix: str = "team-"
    default_quota: Quota = Quota(0, None, None)
    workspace_root: str = "{data_dir}/workspaces/{username}"
    default_grace_period: float = 30.0
    # team or "*" -> pool or "*" -> most GPUs one notebook server may hold.
    notebook_gpu_limits: dict = field(default_factory=dict)
    # A job lost this many times (its process vanished) fails instead.
    max_lost_attempts: int = 3
    # A serving replica that ended this many times is not restarted again.
    max_replica_restarts: int = 5
    # Makes a user's workspace theirs (their system account's, created on
    # first use) instead of a plain directory; None: a plain directory.
    prepare_workspace: Optional[Callable[[str], object]] = None
    # Issues and revokes each attempt's own token (JobTokens); None: jobs get none.
    job_tokens: Optional[object] = None
    # The team of users in no other team, whose nominal quota is what the
    # other teams do not own ("": none).
    default_team: str = ""


class Engine:
    def __init__(self, store: Store, backend, nodes: list[LocalNode], policy: Policy,
                 config: EngineConfig, clock: Callable[[], float] = time.time):
        self.store = store
        self.backend = backend
        self.nodes = {n.node.name: n for n in nodes}
        self.policy = policy
        self.config = config
        self.clock = clock
        self.scheduler = None
        self._reasons: dict[str, str] = {}
        self.estimates = StartEstimates(policy)
        # Workloads whose first start estimate is persisted.
        self._estimated: set[str] = set()
        # (replica, attempt) -> why the service itself ends it (replace_replica).
        self._replacing: dict[tuple[str, int], str] = {}
        # Set by the app: metrics (ServiceMetrics) and a way to wake the loop
        # early after a submit or cancel.
        self.metrics = None
        self.wake: Callable[[], None] = lambda: None

    # ---- start -----------------------------------------------------------
    def start(self) -> None:
        """Rebuild the core from the database and find running work again."""
        now = self.clock()
        specs, broken = [], []
        with self.store.transaction() as s:
            self.scheduler, unplaceable = rebuild(s, [n.node for n in self.nodes.values()],
                                                  self.policy)
            # Not notebook servers: the hub runs (and finds again) those.
            for row in s.scalars(select(WorkloadRow).where(
                    WorkloadRow.state.in_(HOLDING_STATES), WorkloadRow.kind.in_(BACKEND_KINDS))):
                if row.id in unplaceable:
                    continue
                try:
                    specs.append(self._launch_spec(s, row))
                except Exception as err:  # one bad workload must not keep the service down
                    log.exception("cannot rebuild the launch of %s", row.id)
                    broken.append((row.id, row.attempt, f"could not be recovered: {err}"))
        with self.store.transaction() as s:
            self._refresh_default_team(s)
        with self.store.session() as s:
            self.estimates.load(s)
            for row in s.scalars(select(WorkloadRow).where(WorkloadRow.finished_at.is_(None))):
                self.estimates.subjects[row.id] = runtime_subject(row)
                if row.estimate_made_at is not None:
                    self._estimated.add(row.id)
        for wid in unplaceable:
            self._lost_without_core(wid, now, "its GPUs are no longer in the inventory")
        for x in self._recover(specs, broken):
            self.on_exit(x)
        for wid, attempt, why in broken:
            self._fail_launch(wid, attempt, why)
        with self.store.session() as s:
            stopping = s.scalars(select(WorkloadRow).where(WorkloadRow.state == STOPPING,
                                                           WorkloadRow.kind.in_(BACKEND_KINDS))).all()
        for row in stopping:
            # The stop was persisted before the restart; say it again.
            grace = (max(0.0, row.kill_at - now) if row.kill_at is not None
                     else self._grace(row))
            try:
                self.backend.stop(row.id, row.attempt, grace)
            except Exception as err:
                log.exception("could not stop %s", row.id)
                self._fail_launch(row.id, row.attempt, f"could not be stopped: {err}")
        log.info("rebuilt: %d queued, %d running; %d recovered attempts",
                 len(self.scheduler.state.pending), len(self.scheduler.state.running), len(specs))

    def _recover(self, specs: list[LaunchSpec], broken: list) -> list[AttemptExit]:
        """The backend's recovery of all attempts at once; if that fails, of
        each alone, so that the one it cannot recover fails by itself
        (``broken``) and the others are adopted."""
        try:
            return self.backend.recover(specs)
        except Exception:
            log.exception("recovering %d attempts failed; recovering them one by one", len(specs))
        exits = []
        for spec in specs:
            try:
                exits += self.backend.recover([spec])
            except Exception as err:
                log.exception("could not recover %s", spec.workload_id)
                broken.append((spec.workload_id, spec.attempt, f"could not be recovered: {err}"))
        return exits

    def _fail_launch(self, wid: str, attempt: int, why: str) -> None:
        """A workload whose attempt cannot be started or found again: it
        fails by itself with the reason, and its GPUs go back."""
        try:
            self.backend.kill(wid, attempt)
        except Exception:
            log.exception("could not kill %s attempt %s", wid, attempt)
        self.on_exit(AttemptExit(wid, attempt, EXITED, 127, self.clock()), detail=why)

    # ---- requests --------------------------------------------------------
    def submit(self, who: Identity, spec: JobSpec, on_behalf_of: Optional[str] = None
               ) -> WorkloadRow:
        """Queue a job (users) or a notebook server's GPUs (the spawner, an
        admin identity acting for ``on_behalf_of``)."""
        if not who.can_submit:
            raise Forbidden("you may not submit work (scope custom:gpuhub:submit)")
        external = spec.kind != "job"
        if external or on_behalf_of:
            if not who.admin:
                raise Forbidden("only the hub's spawner (scope custom:gpuhub:admin) may ask for "
                                "GPUs on someone's behalf")
            if not on_behalf_of or not spec.team:
                raise SpecError("user" if not on_behalf_of else "team",
                                "is required when asking on someone's behalf")
            team, user = spec.team, on_behalf_of
        else:
            team, user = self._team_for(who, spec.team), who.name
        now = self.clock()
        priority = spec.priority or "batch"
        if priority not in self.policy.priority_classes:
            raise SpecError("priority", f"unknown priority class {priority!r}; known: "
                                        f"{', '.join(sorted(self.policy.priority_classes))}")
        if spec.pool not in self.scheduler.state.capacity:
            raise SpecError("pool", f"unknown pool {spec.pool!r}; known pools: "
                                    f"{', '.join(sorted(self.scheduler.state.capacity)) or 'none'}")
        if spec.kind == "notebook":
            most = self.notebook_gpu_limit(team, spec.pool)
            if most is not None and spec.gpus > most:
                raise SpecError("gpus", f"a notebook server of team {team} may hold at most "
                                        f"{most} {spec.pool} GPU(s)")
        self._ensure_team(team, now)
        wid = "w" + secrets.token_hex(6)
        row = WorkloadRow(
            id=wid, name=spec.name, kind=spec.kind, team=team, user=user,
            project=spec.project, pool=spec.pool, gpus_per_node=spec.gpus, num_nodes=spec.nodes,
            priority=priority, time_limit=spec.time_limit, grace_period=spec.grace_period,
            spec={} if external else self._job_spec(wid, user, spec), state=QUEUED, reason="queued",
            attempt=0, preempted_by=[], submitted_at=now)
        return self.queue_row(row, who.name)

    def queue_row(self, row: WorkloadRow, actor: str) -> WorkloadRow:
        """Validate, persist (with its event and audit entry) and queue a new
        workload row: the end of every submission path."""
        reason = self.scheduler.validate(to_workload(row))
        if reason is not None:
            raise SpecError(field_for_reason(reason), reason)
        with self.store.transaction() as s:
            s.add(row)
            s.flush()
            self._event(s, row.id, "submitted", row.submitted_at, f"{row.kind} submitted by "
                        f"{actor} for {row.user} to team {row.team}", attempt=0)
            self._audit(s, row.submitted_at, actor, "submit", row.id,
                        {"team": row.team, "pool": row.pool,
                         "gpus": row.gpus_per_node * row.num_nodes})
        self.scheduler.submit(to_workload(row), row.submitted_at)
        self.estimates.subjects[row.id] = runtime_subject(row)
        self.wake()
        return row

    def cancel(self, who: Identity, wid: str) -> WorkloadRow:
        now = self.clock()
        with self.store.transaction() as s:
            row = self._visible(s, who, wid)
            if not who.acts_on(row.user, row.team):
                raise Forbidden(f"workload {wid} belongs to {row.user}; only they, a lead of team "
                                f"{row.team} or an admin may cancel it")
            if row.kind == "notebook":
                raise Conflict(f"workload {wid} is a {row.kind}: stop it where it was started "
                               f"(the hub's server page), which gives its GPUs back")
            if row.kind == "deployment" and not who.admin:
                raise Conflict(f"workload {wid} is a replica of a deployment: scale or delete "
                               f"the deployment instead")
            if row.state in FINAL_STATES:
                raise Conflict(f"workload {wid} has already {row.state}")
            if row.state == STOPPING and row.cancel_requested:
                return row  # asked before: nothing new to record
            self._audit(s, now, who.name, "cancel", wid, {"state": row.state})
            was = row.state
            if row.state in (QUEUED, HELD):
                row.state, row.finished_at = CANCELLED, now
                row.reason = f"cancelled by {who.name} while queued"
                row.nomination = None
                self._event(s, wid, "cancelled", now, row.reason, attempt=row.attempt)
                stop = None
            else:
                row.cancel_requested = True
                row.state = STOPPING
                row.reason = f"cancelled by {who.name}; stopping"
                self._event(s, wid, "cancel-requested", now, row.reason, attempt=row.attempt)
                stop = (row.attempt, self._grace(row))
        if stop is None:
            if was == QUEUED:
                self.scheduler.cancel(wid, now)
            self._reasons.pop(wid, None)
        else:
            self.backend.stop(wid, stop[0], stop[1])
        self.wake()
        return row

    def release(self, who: Identity, wid: str, why: str) -> WorkloadRow:
        """A notebook server (or deployment) stopped: its GPUs go back now.
        Idempotent, so a stop, a crash and a cull report it once between them."""
        if not who.admin:
            raise Forbidden("only the hub's spawner may release a server's GPUs")
        now = self.clock()
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, wid)
            if row is None:
                raise NotFound(f"no workload {wid}")
            if row.kind == "job":
                raise Conflict(f"workload {wid} is a job: cancel it instead")
            if row.state in FINAL_STATES:
                return row
            was = row.state
            msg = f"stopped ({why})" if why else "stopped"
            if was != QUEUED:
                self._end_attempt(s, row, now, STOPPED, None, msg)
            row.state, row.finished_at, row.reason = STOPPED, now, msg
            row.kill_at, row.preempted_for, row.nomination = None, None, None
            self._event(s, wid, ev.FINISHED, now, msg, attempt=row.attempt,
                        data={"state": STOPPED})
            self._audit(s, now, who.name, "release", wid, {"state": was, "why": why})
            self._finished(s, row)
        if was == QUEUED:
            self.scheduler.cancel(wid, now)
        elif wid in self.scheduler.state.running:
            self.scheduler.finished(wid, now, requeue=False)
        self._reasons.pop(wid, None)
        self.wake()
        return row

    def replace_replica(self, wid: str, attempt: int, why: str) -> None:
        """End a serving replica's attempt whose process runs but no longer
        serves (its model is gone): it is stopped and, like any replica that
        ended, placed again as the next attempt."""
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, wid)
            if row is None or row.kind != "deployment" or row.state != RUNNING \
                    or row.attempt != attempt:
                return  # already ending, or ended
            self._event(s, wid, "replacing", self.clock(), f"attempt {attempt} {why}; "
                        f"stopping it to place it again", attempt=attempt)
            grace = self._grace(row)
        self._replacing[(wid, attempt)] = why
        self.backend.stop(wid, attempt, grace)

    def notebook_gpu_limit(self, team: str, pool: str) -> Optional[int]:
        limits = self.config.notebook_gpu_limits
        for t in (team, "*"):
            for p in (pool, "*"):
                if p in limits.get(t, {}):
                    return limits[t][p]
        return None

    def queue_position(self, wid: str) -> Optional[int]:
        """1 for the next of its team's queue to be considered."""
        w = self.scheduler.state.pending.get(wid)
        if w is None:
            return None
        pending = self.scheduler.state.pending
        queue = [q for q in self.scheduler.state.queue(self.scheduler.state.group_of(w))
                 if pending.get(q.id) is q]
        return next((i + 1 for i, q in enumerate(queue) if q.id == wid), None)

    def devices(self, placement) -> list[int]:
        """The host device indices behind a placement (local nodes)."""
        return [self.nodes[node].devices[g] for node, gpus in placement
                if node in self.nodes for g in gpus]

    def device_uuids(self, placement) -> list[str]:
        """The UUIDs the inventory gave a placement's GPUs ("" where unknown)."""
        return [self.nodes[node].uuid(g) for node, gpus in placement
                if node in self.nodes for g in gpus]

    def set_team(self, who: Identity, name: str, weight: Optional[float],
                 quotas: Optional[dict[str, Quota]], audit_detail: Optional[dict] = None
                 ) -> list[str]:
        """Change a team's weight and quotas; returns warnings (the change
        is made) and raises SpecError for a change that cannot work.
        ``audit_detail`` joins the audit entry (an applied preview's figures)."""
        if not who.admin:
            raise Forbidden("changing teams and quotas needs the scope custom:gpuhub:admin")
        now = self.clock()
        capacity = self.scheduler.state.capacity
        if quotas and name == self.config.default_team:
            raise SpecError("quotas", f"team {name} is the default team: its nominal quota is "
                                      f"what the other teams do not own; change theirs instead",
                            status=409)
        for pool, q in (quotas or {}).items():
            if pool not in capacity:
                raise SpecError(f"quotas.{pool}", f"unknown pool {pool!r}; known pools: "
                                f"{', '.join(sorted(capacity))}")
            total = sum(n.gpus for n in self.scheduler.state.nodes.values() if n.pool == pool)
            if q.nominal > total:
                raise SpecError(f"quotas.{pool}.nominal", f"{q.nominal} GPUs cannot be "
                                f"guaranteed: pool {pool} has {total} GPUs in all")
            if q.lending_limit is not None and q.lending_limit > q.nominal:
                raise SpecError(f"quotas.{pool}.lending_limit", f"{q.lending_limit} is more "
                                f"than the team's nominal quota ({q.nominal}): a team lends "
                                f"only from its own idle nominal quota")
        warnings = []
        with self.store.transaction() as s:
            team = self._ensure_team(name, now, s)
            before = {"weight": team.weight, "quotas": {q.pool: [q.nominal, q.borrowing_limit,
                                                                  q.lending_limit]
                                                         for q in self._quota_rows(s, name)}}
            if weight is not None:
                team.weight = weight
            for pool, q in (quotas or {}).items():
                row = s.get(QuotaRow, (name, pool)) or QuotaRow(team=name, pool=pool)
                row.nominal, row.borrowing_limit, row.lending_limit = (
                    q.nominal, q.borrowing_limit, q.lending_limit)
                s.add(row)
            s.flush()
            after_rows = self._quota_rows(s, name)
            self._audit(s, now, who.name, "set-team", name, {
                "before": before, "after": {"weight": team.weight, "quotas": {
                    q.pool: [q.nominal, q.borrowing_limit, q.lending_limit] for q in after_rows}},
                **(audit_detail or {})})
            self.scheduler.set_team(to_team(team, after_rows))
            self._refresh_default_team(s)
            nominal: dict[str, int] = {}
            for q in s.scalars(select(QuotaRow)):
                nominal[q.pool] = nominal.get(q.pool, 0) + q.nominal
        for pool in sorted(quotas or {}):
            if nominal.get(pool, 0) > capacity.get(pool, 0):
                warnings.append(f"the nominal quotas of pool {pool} add up to {nominal[pool]} "
                                f"GPUs but it has {capacity.get(pool, 0)} healthy: not every "
                                f"team can have its guarantee at once")
        self.wake()
        return warnings

    # ---- the loop --------------------------------------------------------
    def tick(self) -> None:
        if self.metrics is None:
            return self._tick()
        with self.metrics.cycle_seconds.time():
            self._tick()

    def _tick(self) -> None:
        for x in self.backend.poll():
            self.on_exit(x)
        # Cluster backends see nodes fail or get cordoned; the next cycle
        # requeues work on broken ones and places nothing new there.
        for node in getattr(self.backend, "take_node_changes", lambda: [])():
            if node.name in self.nodes:
                self.nodes[node.name].node = node
                self.scheduler.set_node(node)
        now = self.clock()
        result = self.scheduler.cycle(now, explain=True)
        changed = {w: r for w, r in result.waiting.items() if self._reasons.get(w) != r}
        if result.events or changed:
            with self.store.transaction() as s:
                for e in result.events:
                    self._persist_decision(s, e, now)
                for wid, reason in changed.items():
                    row = s.get(WorkloadRow, wid)
                    if row is not None and row.state == QUEUED:
                        row.reason = reason
        self._reasons.update(changed)
        if self.metrics is not None:
            for e in result.events:
                self.metrics.events.labels(e.type).inc()
                w = self.scheduler.state.pending.get(e.workload_id)
                if e.type == ev.ADMITTED and w is not None and w.attempt == 0:
                    self.metrics.queue_wait.labels(w.team, w.kind).observe(now - w.submit_time)
        for e in self.scheduler.apply_result(result, now):
            w = self.scheduler.state.pending.get(e.workload_id)
            if e.type == ev.REQUEUED and w is not None and w.kind != "job":
                self.scheduler.cancel(e.workload_id, now)  # evicted server: ended above
                continue
            with self.store.transaction() as s:
                self._event(s, e.workload_id, e.type, now, e.message, attempt=e.attempt)
        for e in result.events:
            try:
                self._act(e, now)
            except Exception:  # one workload's stop or kill must not end the cycle
                log.exception("could not act on %s of %s", e.type, e.workload_id)
        self._estimate(now)

    def _estimate(self, now: float) -> None:
        """Remake the start estimates; persist each workload's first one (what
        its estimates' accuracy is judged by when it starts)."""
        try:
            self.estimates.refresh(self.scheduler.state, now)
        except Exception:  # an estimate is advice: never worth a cycle
            log.exception("start estimates failed")
            return
        first = {wid: t for wid in self.estimates.current if wid not in self._estimated
                 and (t := self.estimates.planned(wid)) is not None}
        if not first:
            return
        with self.store.transaction() as s:
            for wid, planned in first.items():
                row = s.get(WorkloadRow, wid)
                if row is not None and row.estimate_made_at is None:
                    row.estimate_made_at, row.estimated_start = now, planned
        self._estimated.update(first)

    def _persist_decision(self, s: Session, e: ev.Event, now: float) -> None:
        row = s.get(WorkloadRow, e.workload_id)
        data = {}
        if e.type == ev.ADMITTED:
            row.state, row.reason, row.nomination = RUNNING, "", None
            if row.started_at is None:
                row.started_at = now
                self.estimates.record_start(row)
            s.add(Attempt(workload_id=row.id, number=row.attempt, state=RUNNING,
                          placement=placement_to_json(e.placement), gpus=self._gpus(row),
                          started_at=now, attempt_dir=self._attempt_dir(row.id, row.attempt),
                          borrowed=e.borrowed))
            s.flush()
            for node, gpus in e.placement:
                for g in gpus:
                    s.add(Allocation(node=node, gpu=g, workload_id=row.id, attempt=row.attempt))
            s.flush()
            data = {"placement": placement_to_json(e.placement), "borrowed": e.borrowed}
        elif e.type == ev.NOMINATED:
            row.nomination = placement_to_json(e.placement)
            row.reason = e.message
        elif e.type == ev.NOMINATION_DROPPED:
            row.nomination = None
        elif e.type == ev.PREEMPTED:
            row.state, row.preempted_for, row.kill_at = STOPPING, e.preemptor_id, e.kill_at
            row.reason = e.message
            data = {"preemptor": e.preemptor_id, "kill_at": e.kill_at}
            # Preemptions are decisions about people's work: audited like an admin's.
            self._audit(s, now, "scheduler", "preempt", row.id,
                        {"preemptor": e.preemptor_id, "team": row.team, "user": row.user,
                         "reason": e.message})
        elif e.type == ev.EVICTED:
            self._end_attempt(s, row, now, "evicted", None, e.message)
            if row.kind == "job":
                self._requeue_row(row, e.message)
            else:
                # A server is not restarted elsewhere behind its user's back:
                # it ends, its spawner sees that and stops the process.
                row.state, row.finished_at = STOPPED, now
                row.reason = f"stopped: {e.message}"
        self._event(s, row.id, e.type, now, e.message, attempt=row.attempt, data=data)

    def _act(self, e: ev.Event, now: float) -> None:
        state = self.scheduler.state
        w = state.running.get(e.workload_id) or state.pending.get(e.workload_id)
        if w is None or getattr(w, "workload", w).kind not in BACKEND_KINDS:
            return  # a server: its spawner starts and stops it, seeing the decision in the API
        if e.type == ev.ADMITTED:
            try:
                with self.store.session() as s:
                    row = s.get(WorkloadRow, e.workload_id)
                    spec = self._launch_spec(s, row)
                    if row.spec.get("notebook"):  # again: a link may have changed since
                        notebook_in_workspace(self.workspace(row.user), spec.cwd,
                                              row.spec["notebook"])
                if self.config.job_tokens is not None:
                    spec = replace(spec, env={**spec.env,
                                              **self.config.job_tokens.env_for(spec)})
                self.backend.start(spec)
            except Exception as err:  # a job that cannot start fails; others go on
                log.exception("could not start %s", e.workload_id)
                self._fail_launch(e.workload_id, getattr(w, "workload", w).attempt,
                                  f"could not start: {err}")
        elif e.type == ev.PREEMPTED:
            attempt = self.scheduler.state.running[e.workload_id].workload.attempt
            self.backend.stop(e.workload_id, attempt, max(0.0, (e.kill_at or now) - now))
        elif e.type == ev.EVICTED:
            # The core already requeued it as attempt + 1: kill the old one.
            attempt = self.scheduler.state.pending[e.workload_id].attempt - 1
            self.backend.kill(e.workload_id, attempt)

    # ---- exits -----------------------------------------------------------
    def on_exit(self, x: AttemptExit, detail: str = "") -> None:
        """An attempt ended: record it, then tell the core."""
        if self.config.job_tokens is not None:
            self.config.job_tokens.revoke(x.workload_id, x.attempt)
        replaced = self._replacing.pop((x.workload_id, x.attempt), None)
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, x.workload_id)
            attempt = s.get(Attempt, (x.workload_id, x.attempt))
            if row is None or attempt is None or attempt.state != RUNNING or row.attempt != x.attempt:
                return  # already recorded (an evicted attempt's late exit)
            preempted = row.state == STOPPING and row.preempted_for is not None
            requeue = False
            if row.cancel_requested:
                state, outcome, msg = CANCELLED, "cancelled", "cancelled; stopped"
            elif preempted:
                requeue, outcome = True, "preempted"
                msg = f"preempted for {row.preempted_for}; requeued as attempt {row.attempt + 1}"
            elif row.kind == "deployment" and row.attempt + 1 < self.config.max_replica_restarts:
                # A serving replica never ends by itself: replace it.
                requeue, outcome = True, "lost" if x.reason == LOST else "failed"
                msg = (f"replica ended ({replaced or describe_returncode(x.returncode, x.reason)})"
                       f"; replaced by attempt {row.attempt + 1}")
            elif row.kind == "deployment":
                state, outcome = FAILED, "failed"
                msg = (f"replica ended ({describe_returncode(x.returncode, x.reason)}) "
                       f"{self.config.max_replica_restarts} times; not restarted again")
            elif x.reason == LOST and self._lost_before(s, row.id) + 1 >= self.config.max_lost_attempts:
                state, outcome = FAILED, "lost"
                msg = (f"attempt {row.attempt} was lost; lost {self.config.max_lost_attempts} "
                       f"times, so it is not requeued again")
            elif x.reason == LOST:
                requeue, outcome = True, "lost"
                msg = f"attempt {row.attempt} was lost; requeued as attempt {row.attempt + 1}"
            elif x.reason == TIME_LIMIT:
                state, outcome = FAILED, "failed"
                msg = f"killed at its time limit of {row.time_limit:.0f} s"
            elif x.reason == EXITED and x.returncode == 0:
                state, outcome, msg = SUCCEEDED, "succeeded", "exited with code 0"
            else:
                state, outcome = FAILED, "failed"
                msg = detail or describe_returncode(x.returncode, x.reason)
            self._end_attempt(s, row, x.finished_at, outcome, x.returncode, msg)
            if requeue:
                self._requeue_row(row, msg)
                self._event(s, row.id, ev.REQUEUED, x.finished_at, msg, attempt=row.attempt)
            else:
                row.state, row.finished_at, row.exit_code = state, x.finished_at, x.returncode
                row.reason, row.kill_at, row.preempted_for = msg, None, None
                self._event(s, row.id, ev.FINISHED, x.finished_at, msg, attempt=row.attempt,
                            data={"state": state, "exit_code": x.returncode})
                self._finished(s, row)
        if x.workload_id in self.scheduler.state.running:
            self.scheduler.finished(x.workload_id, x.finished_at, requeue=requeue)
        self._reasons.pop(x.workload_id, None)
        self.wake()

    def _finished(self, s: Session, row: WorkloadRow) -> None:
        """A workload ended for good: how long it ran joins the run-time history."""
        ran = s.scalar(select(func.sum(Attempt.ended_at - Attempt.started_at)).where(
            Attempt.workload_id == row.id, Attempt.ended_at.is_not(None))) or 0.0
        self.estimates.record_run(row, ran)
        self.estimates.subjects.pop(row.id, None)
        self._estimated.discard(row.id)

    @staticmethod
    def _lost_before(s: Session, wid: str) -> int:
        return s.scalar(select(func.count()).select_from(Attempt).where(
            Attempt.workload_id == wid, Attempt.state == "lost")) or 0

    def _lost_without_core(self, wid: str, now: float, why: str) -> None:
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, wid)
            msg = f"attempt {row.attempt} was lost ({why}); requeued as attempt {row.attempt + 1}"
            self._end_attempt(s, row, now, "lost", None, msg)
            self._requeue_row(row, msg)
            self._event(s, wid, ev.REQUEUED, now, msg, attempt=row.attempt)
        self.scheduler.state.add_pending(to_workload(row))

    def _end_attempt(self, s: Session, row: WorkloadRow, now: float, outcome: str,
                     returncode: Optional[int], msg: str) -> None:
        attempt = s.get(Attempt, (row.id, row.attempt))
        if attempt is None:
            return
        attempt.state, attempt.ended_at = outcome, now
        attempt.exit_code, attempt.reason = returncode, msg
        if self.metrics is not None:
            self.metrics.attempts.labels(outcome, row.kind).inc()
        seconds = max(0.0, now - attempt.started_at)
        s.add(UsageRow(workload_id=row.id, attempt=attempt.number, team=row.team, user=row.user,
                       project=row.project, pool=row.pool, kind=row.kind, gpus=attempt.gpus,
                       started_at=attempt.started_at, ended_at=now,
                       gpu_seconds=attempt.gpus * seconds,
                       borrowed_gpu_seconds=attempt.borrowed * seconds))
        s.execute(delete(Allocation).where(Allocation.workload_id == row.id))

    @staticmethod
    def _requeue_row(row: WorkloadRow, msg: str) -> None:
        """The database side of the core's requeue: same workload, attempt + 1,
        remembering who preempted it."""
        blockers = set(row.preempted_by or ())
        if row.preempted_for:
            blockers.add(row.preempted_for)
        row.preempted_by = sorted(blockers)
        row.attempt += 1
        row.state, row.reason = QUEUED, msg
        row.kill_at, row.preempted_for, row.nomination = None, None, None

    # ---- helpers ---------------------------------------------------------
    def _visible(self, s: Session, who: Identity, wid: str) -> WorkloadRow:
        row = s.get(WorkloadRow, wid)
        if row is None or not (who.sees_team(row.team) or row.user == who.name):
            raise NotFound(f"no workload {wid}")
        return row

    def get(self, who: Identity, wid: str) -> WorkloadRow:
        with self.store.session() as s:
            return self._visible(s, who, wid)

    def _team_for(self, who: Identity, asked: Optional[str]) -> str:
        if asked:
            if asked not in who.teams and not who.admin:
                raise SpecError("team", f"you are not a member of team {asked!r} (JupyterHub "
                                        f"group {self.config.team_prefix}{asked})", status=403)
            return asked
        if len(who.teams) == 1:
            return next(iter(who.teams))
        if not who.teams:
            raise SpecError("team", f"you are in no team: ask an admin to add you to a "
                                    f"JupyterHub group named {self.config.team_prefix}<team>",
                            status=403)
        raise SpecError("team", f"you are in teams {', '.join(sorted(who.teams))}: say which one")

    def _ensure_team(self, name: str, now: float, s: Optional[Session] = None) -> TeamRow:
        if s is None:
            with self.store.transaction() as s:
                return self._ensure_team(name, now, s)
        team = s.get(TeamRow, name)
        if team is None:
            team = TeamRow(name=name, group=self.config.team_prefix + name, weight=1.0,
                           created_at=now)
            s.add(team)
            s.flush()
            q = self.config.default_quota
            rows = [QuotaRow(team=name, pool=pool, nominal=q.nominal,
                             borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit)
                    for pool in sorted(self.scheduler.state.capacity)]
            s.add_all(rows)
            s.flush()
            self.scheduler.set_team(to_team(team, rows))
        return team

    def _refresh_default_team(self, s: Session) -> None:
        """The default team guarantees, in each pool, the GPUs no other team
        does: all of them on a first start, less as teams get quotas."""
        name = self.config.default_team
        team = s.get(TeamRow, name) if name else None
        if team is None:
            return
        owned: dict[str, int] = {}
        for q in s.scalars(select(QuotaRow).where(QuotaRow.team != name)):
            owned[q.pool] = owned.get(q.pool, 0) + q.nominal
        sizes: dict[str, int] = {}
        for n in self.scheduler.state.nodes.values():
            sizes[n.pool] = sizes.get(n.pool, 0) + n.gpus
        for pool, size in sizes.items():
            row = s.get(QuotaRow, (name, pool)) or QuotaRow(team=name, pool=pool)
            row.nominal = max(0, size - owned.get(pool, 0))
            row.borrowing_limit = row.lending_limit = None
            s.add(row)
        s.flush()
        self.scheduler.set_team(to_team(team, self._quota_rows(s, name)))

    @staticmethod
    def _quota_rows(s: Session, team: str) -> list[QuotaRow]:
        return list(s.scalars(select(QuotaRow).where(QuotaRow.team == team)))

    def _job_spec(self, wid: str, user: str, spec: JobSpec) -> dict:
        cwd = self._working_dir(user, spec)
        home = self.workspace(user)
        checkpoint = (in_workspace(home, os.path.join(cwd, spec.checkpoint_dir), "checkpoint_dir")
                      if spec.checkpoint_dir
                      else os.path.join(self.config.data_dir, "workloads", wid, "checkpoints"))
        if spec.output_notebook:
            in_workspace(home, os.path.join(cwd, spec.output_notebook), "output_notebook")
        return {**spec.stored(), "working_dir": cwd, "checkpoint_dir": checkpoint}

    def workspace(self, user: str) -> str:
        home = self.config.workspace_root.format(data_dir=self.config.data_dir, username=user)
        if self.config.prepare_workspace is not None:
            try:
                self.config.prepare_workspace(user)
            except AccountError as e:  # a directory without the user's account, say
                raise Forbidden(f"your work cannot run: {e}") from e
        else:
            os.makedirs(home, exist_ok=True)
        return home

    def _working_dir(self, user: str, spec: JobSpec) -> str:
        home = self.workspace(user)
        cwd = in_workspace(home, os.path.join(home, spec.working_dir or "."), "working_dir")
        if not os.path.isdir(cwd):
            raise SpecError("working_dir", f"{spec.working_dir!r} is not a directory "
                                           f"(relative paths start at {home})")
        if spec.notebook is not None:
            notebook_in_workspace(home, cwd, spec.notebook)
        return cwd

    def _attempt_dir(self, wid: str, attempt: int) -> str:
        return os.path.join(self.config.data_dir, "workloads", wid, f"attempt-{attempt}")

    def _grace(self, row: WorkloadRow) -> float:
        return row.grace_period if row.grace_period is not None else self.config.default_grace_period

    @staticmethod
    def _gpus(row: WorkloadRow) -> int:
        return row.gpus_per_node * row.num_nodes

    def _launch_spec(self, s: Session, row: WorkloadRow) -> LaunchSpec:
        attempt = s.get(Attempt, (row.id, row.attempt))
        placement = placement_from_json(attempt.placement if attempt else ())
        spec = row.spec
        cwd = spec.get("working_dir") or self.config.data_dir
        attempt_dir = self._attempt_dir(row.id, row.attempt)
        env = {**(spec.get("env") or {}), "GPUHUB_USER": row.user, "GPUHUB_TEAM": row.team,
               "GPUHUB_PROJECT": row.project, "GPUHUB_POOL": row.pool}
        return LaunchSpec(workload_id=row.id, attempt=row.attempt,
                          argv=tuple(job_argv(spec, attempt_dir)), attempt_dir=attempt_dir,
                          cwd=cwd, env=env, gpus=tuple(self.devices(placement)),
                          gpu_uuids=tuple(self.device_uuids(placement)),
                          time_limit=row.time_limit,
                          grace_period=self._grace(row),
                          checkpoint_dir=spec["checkpoint_dir"], placement=placement,
                          pool=row.pool, team=row.team, user=row.user, priority=row.priority,
                          gpus_per_node=row.gpus_per_node, serving=spec.get("serving") or {})

    @staticmethod
    def _event(s: Session, wid: str, type_: str, now: float, message: str,
               attempt: Optional[int] = None, data: Optional[dict] = None) -> None:
        s.add(EventRow(workload_id=wid, type=type_, time=now, attempt=attempt, message=message,
                       data=data or {}))

    @staticmethod
    def _audit(s: Session, now: float, actor: str, action: str, target: str, detail: dict) -> None:
        s.add(AuditEntry(time=now, actor=actor, action=action, target=target, detail=detail))


def in_workspace(home: str, path: str, field: str) -> str:
    """``path`` normalised, if it lies in the user's workspace: jobs run as
    the service's user, so a path outside would reach other people's files."""
    if "\x00" in path:
        raise SpecError(field, "must not contain NUL characters")
    full = os.path.normpath(path)
    home_real = os.path.realpath(home)
    if os.path.commonpath([home_real, os.path.realpath(full)]) != home_real:
        raise SpecError(field, f"{path!r} is outside your workspace {home}")
    return full


def notebook_in_workspace(home: str, cwd: str, notebook: str) -> str:
    """The notebook's path, if it is a file in the workspace. A file that is
    missing and one outside get the same answer, so that the answer does
    not tell whether a file exists outside the workspace."""
    path = os.path.join(cwd, notebook)
    try:
        in_workspace(home, path, "notebook")
        if not os.path.isfile(path):
            raise SpecError("notebook", "")
    except SpecError:
        raise SpecError("notebook", f"{notebook!r} is not a notebook file in your workspace "
                                    f"{home} (relative paths start at the working_dir)")
    return path


def job_argv(spec: dict, attempt_dir: str) -> list[str]:
    """The command line of a job: its command, or papermill for a notebook
    (gpuspawner/notebook_job.py: its kernel on Unix sockets, not TCP)."""
    if spec.get("notebook"):
        return [sys.executable, "-m", "gpuspawner.notebook_job", spec["notebook"],
                output_notebook(spec, attempt_dir), json.dumps(spec.get("parameters") or {})]
    command = spec.get("command")
    if not command:
        raise ValueError("the workload has neither a command nor a notebook")
    if spec.get("shell"):
        return ["/bin/sh", "-c", command[0]]
    return list(command)


def describe_returncode(returncode: Optional[int], reason: str) -> str:
    if returncode is None:
        return f"ended ({reason})"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"
