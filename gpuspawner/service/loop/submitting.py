"""The one way work enters the queue: who asks, the checks against the
live cluster, the row, and its way into the core.

A job from the API, a notebook server's GPUs from the spawner, a sweep's
tasks, a schedule's firing, a job token's follow-up and a replica from the
serving controller all pass here (``Submitting``): each writes the database
(with its event and audit entry), then changes the core and wakes the loop
(``Signals``). The Engine holds one; rooms reach it through
``facades.Submissions``."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Callable, Optional

from sqlalchemy.orm import Session

from gpuspawner.scheduler.kinds import kind
from gpuspawner.scheduler.model import JOB
from gpuspawner.scheduler.policy import Policy
from gpuspawner.scheduler.workflow import dependencies
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.errors import Forbidden
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.rebuild import field_for_reason, to_workload
from gpuspawner.service.workloads import waiting
from gpuspawner.store import Store, WorkloadRow
from gpuspawner.vocab.shares import PoolSharing, resolve_share
from gpuspawner.vocab.specs import JobSpec, SpecError
from gpuspawner.vocab.states import QUEUED, WAITING


@dataclass(frozen=True)
class Signals:
    """What the loop is told once rows are stored."""
    # fn(scheduler): a change of the core, now or once the cycle being planned is applied.
    change: Callable[[Callable], None]
    # Waiting rows (dependencies, sweep slots) are to be looked at again.
    dependencies_changed: Callable[[], None]
    # A new row gets a start estimate.
    track: Callable[[WorkloadRow], None]
    # Run the next cycle soon.
    wake: Callable[[], None]


class Submitting:
    """Submissions, checked and stored. ``core()`` is the scheduler (made at
    the engine's start); ``teams`` the team book; ``launcher`` makes a
    job's launch spec; ``pool_sharing(pool)`` says how a pool shares GPUs."""

    def __init__(self, store: Store, clock: Callable[[], float], policy: Policy, teams,
                 launcher, pool_sharing: Callable[[str], Optional[PoolSharing]],
                 core: Callable[[], object], signals: Signals):
        self.store, self.clock, self.policy = store, clock, policy
        self.teams, self.launcher, self.pool_sharing = teams, launcher, pool_sharing
        self.core, self.signals = core, signals
        # Gates the app sets where the features are on: why a team's new jobs
        # are refused (its space is full: service/teams/spaces.py), and the
        # check of a submission's datasets (names, team, pool; raises
        # SpecError naming one: service/datasets/registry.py).
        self.storage_refusal: Callable[[str], Optional[str]] = lambda team: None
        self.dataset_check: Callable[[tuple, str, str], object] = lambda n, t, p: None
        # The node labels its datasets' residency asks for, kept with the
        # workload at its submit (dataset name -> labels; the core's rule).
        self.dataset_nodes: Callable[[tuple], dict] = lambda names: {}

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
        if team not in self.core().state.teams:  # the core has every team's row
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
        if spec.pool not in self.core().state.capacity:
            raise SpecError("pool", f"unknown pool {spec.pool!r}; known pools: "
                                    f"{', '.join(sorted(self.core().state.capacity)) or 'none'}")
        self.share_of(spec)
        if spec.datasets:
            self.dataset_check(spec.datasets, team, spec.pool)
        full = self.storage_refusal(team) if spec.kind == JOB else None
        if full:  # a notebook server still starts: it is where files are removed from
            raise SpecError("team", full, status=403)
        if not kind(spec.kind).run_by_backend:  # a notebook server: its team's limit per server
            most = self.teams.notebook_gpu_limit(team, spec.pool)
            if most is not None and spec.gpus_per_node > most:
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
            project=spec.project, pool=spec.pool, gpus_per_node=spec.gpus_per_node, num_nodes=spec.nodes,
            gpu_share=self.share_of(spec),
            priority=spec.priority or "batch", time_limit=spec.time_limit,
            grace_period=spec.grace_period,
            spec=self.stored_spec(wid, user, spec),
            state=WAITING if waits else QUEUED,
            reason=reason or (dependencies.resolve(after, {})[1] if after else "queued"),
            attempt=0, preempted_by=[], submitted_at=now, after=after)

    def stored_spec(self, wid: str, user: str, spec: JobSpec) -> dict:
        """What a new row keeps of its request: a job's whole spec, a
        server's datasets only (its spawner asks for them at its start),
        and the node labels its datasets allow (where it may be placed)."""
        out = (self.launcher.job_spec(wid, user, spec) if kind(spec.kind).run_by_backend
               else {"datasets": list(spec.datasets)} if spec.datasets else {})
        nodes = self.dataset_nodes(spec.datasets) if spec.datasets else {}
        return {**out, "dataset_nodes": nodes} if nodes else out

    def check_row(self, row: WorkloadRow) -> None:
        """SpecError when the core could never run ``row``."""
        reason = self.core().validate(to_workload(row))
        if reason is not None:
            raise SpecError(field_for_reason(reason), reason)

    def queue_row(self, row: WorkloadRow, actor: str,
                  also: Optional[Callable[[Session], None]] = None) -> WorkloadRow:
        """Validate, persist (with its event and audit entry) and queue a new
        workload row: the end of every submission path. ``also(session)``
        writes what must be committed with it or not at all (a schedule's
        firing); what it raises leaves nothing behind."""
        self.check_row(row)
        with self.store.transaction() as s:
            if also is not None:
                also(s)
            self._store_rows(s, [(row, actor)])
        self.store.rows_added(WorkloadRow.__tablename__, 1)
        self.queued([row])
        return row

    def store_rows(self, batch: list[tuple[WorkloadRow, str]]) -> None:
        """The database half of ``queue_row`` for several rows already
        checked (``check_row``), each with its actor, in one transaction;
        ``queued`` then puts them in the core. loop/intake.py stores the
        submits of one turn of the event loop so, in its writer thread;
        adding rows only, they need not wait for the cycle's writes."""
        with self.store.adding() as s:
            self._store_rows(s, batch)
        self.store.rows_added(WorkloadRow.__tablename__, len(batch))

    @staticmethod
    def _store_rows(s: Session, batch: list[tuple[WorkloadRow, str]]) -> None:
        s.add_all([row for row, _actor in batch])
        s.flush()
        for row, actor in batch:
            journal.event(s, row.id, "submitted", row.submitted_at, f"{row.kind} submitted by "
                          f"{actor} for {row.user} to team {row.team}", attempt=0)
            journal.audit(s, row.submitted_at, actor, "submit", row.id,
                          {"team": row.team, "pool": row.pool,
                           "gpus": row.gpus_per_node * row.num_nodes,
                           **({"gpu_share": row.gpu_share} if row.gpu_share else {})})

    def queued(self, rows: list[WorkloadRow]) -> None:
        """Stored rows into the core (or, waiting, to the dependency check)."""
        for row in rows:
            if row.state == QUEUED:
                self.signals.change(lambda sched, w=to_workload(row), at=row.submitted_at:
                            sched.submit(w, at))
            else:
                self.signals.dependencies_changed()
            self.signals.track(row)
        self.signals.wake()
