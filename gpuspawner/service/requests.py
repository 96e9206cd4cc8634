"""What users, the hub's spawner and the serving controller ask of the
engine: submit work, cancel it, release a server's GPUs, replace a replica.
Each checks who asks, writes the database (with its event and audit entry)
and then changes the core (``Engine.change``) and wakes the loop."""
from __future__ import annotations

import secrets
from typing import Callable, Optional

from sqlalchemy.orm import Session

from ..scheduler import dependencies
from ..scheduler import events as ev
from ..store import WorkloadRow
from . import journal, queries, waiting
from .errors import Conflict, Forbidden, NotFound
from .identity import Identity
from .kinds import kind
from .rebuild import field_for_reason, to_workload
from .share_specs import resolve_share
from .specs import JobSpec, SpecError
from .states import (CANCELLED, FINAL_STATES, HELD, QUEUED, RUNNING, STOPPED, STOPPING,
                     WAITING)


class Requests:
    """The engine's requests (mixed into ``Engine``)."""

    def submit(self, who: Identity, spec: JobSpec, on_behalf_of: Optional[str] = None
               ) -> WorkloadRow:
        """Queue a job (users) or a notebook server's GPUs (the spawner, an
        admin identity acting for ``on_behalf_of``). A job with ``after``
        waits for its dependencies first (``waiting``), outside the core."""
        return self.queue_row(self.new_row(who, spec, on_behalf_of), who.name)

    def new_row(self, who: Identity, spec: JobSpec, on_behalf_of: Optional[str] = None
                ) -> WorkloadRow:
        """The workload row ``submit`` would queue, checked against who asks,
        the cluster and its dependencies, not yet stored (its team's row is
        made if new)."""
        team, user, now = self.accept(who, spec, on_behalf_of)
        wid = "w" + secrets.token_hex(6)
        after = list(spec.after)
        if after:
            with self.store.session() as s:
                waiting.check_after(s, who, wid, after)
        return self.make_row(wid, spec, team, user, now, after)

    def accept(self, who: Identity, spec: JobSpec, on_behalf_of: Optional[str] = None
               ) -> tuple[str, str, float]:
        """The team and user a submission (a job, a server, a sweep's
        template) is for, and now, once it passed the checks; its team exists."""
        team, user = self.owner_of(who, spec, on_behalf_of)
        now = self.clock()
        self.check_submission(spec, team)
        self.teams.ensure(team, now)
        return team, user, now

    def owner_of(self, who: Identity, spec: JobSpec, on_behalf_of: Optional[str]
                 ) -> tuple[str, str]:
        """The team and user a submission is for, if the caller may submit it."""
        if not who.can_submit:
            raise Forbidden("you may not submit work (scope custom:gpuhub:submit)")
        rules = kind(spec.kind)
        if not rules.submitted_by_users or on_behalf_of:
            if not who.admin:
                raise Forbidden("only the hub's spawner (scope custom:gpuhub:admin) may ask for "
                                "GPUs on someone's behalf")
            if not on_behalf_of or not spec.team:
                raise SpecError("user" if not on_behalf_of else "team",
                                "is required when asking on someone's behalf")
            return spec.team, on_behalf_of
        return self.teams.team_for(who, spec.team), who.name

    def check_submission(self, spec: JobSpec, team: str) -> None:
        """What needs the live cluster: the priority class, the pool, a
        notebook server's limit."""
        priority = spec.priority or "batch"
        if priority not in self.policy.priority_classes:
            raise SpecError("priority", f"unknown priority class {priority!r}; known: "
                                        f"{', '.join(sorted(self.policy.priority_classes))}")
        if spec.pool not in self.scheduler.state.capacity:
            raise SpecError("pool", f"unknown pool {spec.pool!r}; known pools: "
                                    f"{', '.join(sorted(self.scheduler.state.capacity)) or 'none'}")
        self.share_of(spec)
        if not kind(spec.kind).run_by_backend:  # a notebook server: its team's limit per server
            most = self.teams.notebook_gpu_limit(team, spec.pool)
            if most is not None and spec.gpus > most:
                raise SpecError("gpus", f"a notebook server of team {team} may hold at most "
                                        f"{most} {spec.pool} GPU(s)")

    def share_of(self, spec: JobSpec) -> float:
        """The share of one GPU a request gets in its pool (0.0: whole GPUs)."""
        if spec.share is None:
            return 0.0
        return resolve_share(spec.share, spec.pool, self.pool_sharing(spec.pool))

    def make_row(self, wid: str, spec: JobSpec, team: str, user: str, now: float,
                 after: list, reason: str = "") -> WorkloadRow:
        """The row of a new workload: ``waiting`` with ``after`` (or a
        ``reason`` to wait), else ``queued``."""
        waits = bool(after) or bool(reason)
        return WorkloadRow(
            id=wid, name=spec.name, kind=spec.kind, team=team, user=user,
            project=spec.project, pool=spec.pool, gpus_per_node=spec.gpus, num_nodes=spec.nodes,
            gpu_share=self.share_of(spec),
            priority=spec.priority or "batch", time_limit=spec.time_limit,
            grace_period=spec.grace_period,
            spec=self.launcher.job_spec(wid, user, spec) if kind(spec.kind).run_by_backend else {},
            state=WAITING if waits else QUEUED,
            reason=reason or (dependencies.resolve(after, {})[1] if after else "queued"),
            attempt=0, preempted_by=[], submitted_at=now, after=after)

    def check_row(self, row: WorkloadRow) -> None:
        """SpecError when the core could never run ``row``."""
        reason = self.scheduler.validate(to_workload(row))
        if reason is not None:
            raise SpecError(field_for_reason(reason), reason)

    def queue_row(self, row: WorkloadRow, actor: str,
                  also: Optional[Callable[[Session], None]] = None) -> WorkloadRow:
        """Validate, persist (with its event and audit entry) and queue a new
        workload row: the end of every submission path. ``also(session)``
        writes what must be committed with it or not at all (a schedule's
        firing); what it raises leaves nothing behind."""
        self.check_row(row)
        w = to_workload(row)
        with self.store.transaction() as s:
            if also is not None:
                also(s)
            s.add(row)
            s.flush()
            journal.event(s, row.id, "submitted", row.submitted_at, f"{row.kind} submitted by "
                          f"{actor} for {row.user} to team {row.team}", attempt=0)
            journal.audit(s, row.submitted_at, actor, "submit", row.id,
                          {"team": row.team, "pool": row.pool,
                           "gpus": row.gpus_per_node * row.num_nodes,
                           **({"gpu_share": row.gpu_share} if row.gpu_share else {})})
        if row.state == QUEUED:
            self.change(lambda sched: sched.submit(w, row.submitted_at))
        else:
            self.dependencies_changed()
        self.estimates.track(row)
        self.wake()
        return row

    def cancel(self, who: Identity, wid: str) -> WorkloadRow:
        now = self.clock()
        with self.store.transaction() as s:
            row = queries.visible(s, who, wid)
            if not who.acts_on(row.user, row.team):
                raise Forbidden(f"workload {wid} belongs to {row.user}; only they, a lead of team "
                                f"{row.team} or an admin may cancel it")
            refusal = kind(row.kind).refusal(wid, who.admin)
            if refusal:
                raise Conflict(refusal)
            if row.state in FINAL_STATES:
                raise Conflict(f"workload {wid} has already {row.state}")
            if row.state == STOPPING and row.cancel_requested:
                return row  # asked before: nothing new to record
            journal.audit(s, now, who.name, "cancel", wid, {"state": row.state})
            was = row.state
            if row.state in (WAITING, QUEUED, HELD):
                row.state, row.finished_at = CANCELLED, now
                row.reason = (f"cancelled by {who.name} while "
                              f"{'waiting' if was == WAITING else 'queued'}")
                row.nomination = None
                journal.event(s, wid, "cancelled", now, row.reason, attempt=row.attempt)
            else:
                row.cancel_requested = True
                row.state = STOPPING
                row.reason = f"cancelled by {who.name}; stopping"
                journal.event(s, wid, "cancel-requested", now, row.reason, attempt=row.attempt)
        if was == QUEUED:
            self.change(lambda sched: sched.cancel(wid, now))
        elif was not in (HELD, WAITING):
            self.starter.stop(wid, row.attempt, self.launcher.grace(row))
        self.dependencies_changed()
        self._reasons.pop(wid, None)
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
            if kind(row.kind).submitted_by_users:
                raise Conflict(f"workload {wid} is a {row.kind}: cancel it instead")
            if row.state in FINAL_STATES:
                return row
            was = row.state
            msg = f"stopped ({why})" if why else "stopped"
            if was != QUEUED:
                self._end(s, row, now, STOPPED, None, msg)
            row.state, row.finished_at, row.reason = STOPPED, now, msg
            row.kill_at, row.preempted_for, row.nomination = None, None, None
            journal.event(s, wid, ev.FINISHED, now, msg, attempt=row.attempt,
                          data={"state": STOPPED})
            journal.audit(s, now, who.name, "release", wid, {"state": was, "why": why})
            self._finished(s, row)

        def forget(sched) -> None:
            if wid in sched.state.pending:
                sched.cancel(wid, now)
            elif wid in sched.state.running:
                sched.finished(wid, now, requeue=False)
        self.change(forget)
        self._reasons.pop(wid, None)
        self.wake()
        return row

    def replace_replica(self, wid: str, attempt: int, why: str) -> None:
        """End a serving replica's attempt whose process runs but no longer
        serves (its model is gone): it is stopped and, like any replica that
        ended, placed again as the next attempt."""
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, wid)
            if row is None or not kind(row.kind).replaced_on_exit or row.state != RUNNING \
                    or row.attempt != attempt:
                return  # already ending, or ended
            journal.event(s, wid, "replacing", self.clock(), f"attempt {attempt} {why}; "
                          f"stopping it to place it again", attempt=attempt)
            grace = self.launcher.grace(row)
        self._replacing[(wid, attempt)] = why
        self.starter.stop(wid, attempt, grace)
