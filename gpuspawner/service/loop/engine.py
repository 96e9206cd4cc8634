"""The scheduling loop: the one place where the core, the database and the
backend meet.

Every decision is persisted before it is acted on: a cycle's admissions and
preemptions are committed, then the core applies them, then the backend
starts or stops processes. A crash between two steps leaves the database
describing work that may not have started; at the next start the backend
reports such work as lost and it is requeued.

A cycle runs in steps (``tick_steps``) with API requests served between
them. Changes of the core asked while it is planned wait (``change``); a
decision about a workload that changed meanwhile is dropped, not persisted.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuspawner.backends.base import EXITED, AttemptExit
from gpuspawner.scheduler import events as ev
from gpuspawner.scheduler.policy import Policy
from gpuspawner.scheduler.steps import drain
from gpuspawner.store import Attempt, GpuRow, NodeRow, Store, WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.service.loop import records
from gpuspawner.service.sharing import enforce as share_enforce
from gpuspawner.service.sweeps import sweeps
from gpuspawner.service.workloads import waiting
from gpuspawner.service.loop.exits import Asked, ending
from gpuspawner.service.loop.facades import (ClusterView, Facades, Paths, Records, Steering,
                                               Submissions)
from gpuspawner.service.access.identity import Identity
from gpuspawner.scheduler.kinds import BACKEND_KINDS, kind
from gpuspawner.service.loop.launch import Launcher, LocalNode
from gpuspawner.service.loop.rebuild import rebuild, to_workload
from gpuspawner.service.loop.submitting import Signals, Submitting
from gpuspawner.service.loop.withdrawals import Withdrawals
from gpuspawner.vocab.shares import PoolSharing
from gpuspawner.service.workloads.start_estimates import StartEstimates
from gpuspawner.service.loop.starts import Starter
from gpuspawner.service.loop.intake import Intake
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.vocab.states import HOLDING_STATES, RUNNING, STOPPING
from gpuspawner.service.teams.registry import TeamBook

log = logging.getLogger("gpuhub.engine")
# Waiting reasons written per transaction (and step of a cycle).
REASONS_PER_STEP = 500
# Most seconds a workload the service stops itself (stop_for) has to exit.
STOP_FOR_GRACE = 5.0
# Who the service's own releases are recorded as.
SCHEDULER = Identity("scheduler", admin=True)


@dataclass
class Begun:
    """What a cycle begins with (``Engine.take_begun``)."""
    failed: list  # (workload id, attempt, why): starts that failed
    exits: list   # AttemptExit: attempts that ended
    nodes: list   # (Node, why): nodes whose health or state changed

    def __bool__(self) -> bool:
        return bool(self.failed or self.exits or self.nodes)


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
        self.launcher = Launcher(self.nodes, config.data_dir, config.workspace_root,
                                 config.default_grace_period, config.prepare_workspace)
        self.launcher.pool_sharing = self.pool_sharing
        shares_held = share_enforce.ShareSettings(config.share_watch, config.share_watch_interval,
                                                  isolated=config.prepare_workspace is not None)
        self.launcher.share_enforcement = lambda row, attempt_dir: share_enforce.decide(
            self.cluster, self.store, shares_held, row, attempt_dir)
        self.teams = TeamBook(store, config.team_prefix, config.default_quota,
                              config.default_team, config.notebook_gpu_limits, self.change,
                              self.pool_sizes)
        self.starter = Starter(backend, config.job_tokens, config.start_threads,
                               wake=lambda: self.wake())
        self.estimates = StartEstimates(policy, rollout_pending=config.estimate_rollout_pending)
        self.intake = Intake(self)  # the API's submits, batched (loop/intake.py)
        self._reasons: dict[str, str] = {}
        # workload -> GPU memory (MiB) its processes used at the last reading
        # of a shared GPU (the share watcher's), for the heat map.
        self.share_memory: dict[str, int] = {}
        # workload -> SM utilisation % of its own processes on its shared GPU.
        self.share_activity: dict[str, float] = {}
        # (replica, attempt) -> why the service itself ends it (replace_replica).
        self._replacing: dict[tuple[str, int], str] = {}
        # (workload, attempt) -> why the service stopped it (stop_for).
        self._stopped_for: dict[tuple[str, int], str] = {}
        self._planning = False
        self._changes: list[Callable] = []
        # Something ended (or waits anew): the waiting ones are looked at
        # again before the next cycle (waiting.release_step). At start too.
        self._dependencies_changed = True
        # Set by the app: metrics (ServiceMetrics) and a way to wake the loop
        # early after a submit or cancel.
        self.metrics = None
        self.wake: Callable[[], None] = lambda: None
        # What a team's view shows of its space (service/teams/spaces.py; the app sets it).
        self.storage_view: Callable[[str], Optional[dict]] = lambda team: None
        # The parts read the engine's clock when they need it (tests set it later).
        def now() -> float:
            return self.clock()
        signals = Signals(self.change, self.dependencies_changed, self.estimates.track,
                          lambda: self.wake())
        self.submitting = Submitting(store, now, policy, self.teams, self.launcher,
                                     self.pool_sharing, lambda: self.scheduler, signals)
        self.withdrawals = Withdrawals(store, now, self.launcher, self.starter, signals,
                                       self.forget_reason, self._end, self._finished,
                                       self._replacing)
        # What the feature rooms get instead of the engine (facades.py).
        self.records = Records(store, now, config.data_dir)
        self.cluster = ClusterView(self)
        self.submissions = Submissions(self)
        self.facades = Facades(self.records, self.cluster, self.submissions, Paths(self))
        self.steering = Steering(self, self.facades)

    # ---- requests (submitting.py, withdrawals.py) ----------------------------
    def submit(self, who: Identity, spec, on_behalf_of: Optional[str] = None) -> WorkloadRow:
        """Queue a job (users) or a notebook server's GPUs (the spawner)."""
        return self.submitting.submit(who, spec, on_behalf_of)

    def cancel(self, who: Identity, wid: str) -> WorkloadRow:
        return self.withdrawals.cancel(who, wid)

    def release(self, who: Identity, wid: str, why: str) -> WorkloadRow:
        """A notebook server (or deployment) stopped: its GPUs go back now."""
        return self.withdrawals.release(who, wid, why)

    def replace_replica(self, wid: str, attempt: int, why: str) -> None:
        self.withdrawals.replace_replica(wid, attempt, why)

    def change(self, fn: Callable) -> None:
        """``fn(scheduler)``: a change of the core, made now, or once the
        cycle being planned has been applied."""
        if self._planning:
            self._changes.append(fn)
        else:
            fn(self.scheduler)

    def dependencies_changed(self) -> None:
        self._dependencies_changed = True

    @property
    def dependencies_pending(self) -> bool:
        """Whether the next cycle looks for waiting work to release."""
        return self._dependencies_changed

    def forget_reason(self, wid: str) -> None:
        """Its waiting reason is to be written again when it waits again."""
        self._reasons.pop(wid, None)

    def pool_sharing(self, pool: str) -> Optional[PoolSharing]:
        """How ``pool`` shares its GPUs (None: it does not): its slots per
        GPU and the memory of its smallest GPU, which a share is part of."""
        units = self.config.gpu_sharing.get(pool)
        if not units:
            return None
        with self.store.session() as s:
            smallest = s.execute(select(GpuRow.memory_mib, GpuRow.model)
                                 .join(NodeRow, NodeRow.name == GpuRow.node)
                                 .where(NodeRow.pool == pool)
                                 .order_by(GpuRow.memory_mib).limit(1)).first()
        return PoolSharing(pool, units, *(smallest or (0, "")),
                           mps_pipe_directory=self.config.mps_pipe_directories.get(pool))

    def pool_sizes(self) -> dict[str, int]:
        """pool -> GPUs of its nodes, healthy or not."""
        sizes: dict[str, int] = {}
        for n in self.scheduler.state.nodes.values():
            sizes[n.pool] = sizes.get(n.pool, 0) + n.gpus
        return sizes

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
                    specs.append(self.launcher.launch_spec(s, row))
                except Exception as err:  # one bad workload must not keep the service down
                    log.exception("cannot rebuild the launch of %s", row.id)
                    broken.append((row.id, row.attempt, f"could not be recovered: {err}"))
            self.teams.refresh_default(s)
        with self.store.session() as s:
            self.estimates.load(s)
            for row in s.scalars(select(WorkloadRow).where(WorkloadRow.finished_at.is_(None))):
                self.estimates.track(row)
            stopping = s.scalars(select(WorkloadRow).where(
                WorkloadRow.state == STOPPING, WorkloadRow.kind.in_(BACKEND_KINDS))).all()
        for wid in unplaceable:
            self._lost_without_core(wid, now, "its GPUs are no longer in the inventory")
        for x in self.starter.recover(specs, broken):
            self.on_exit(x)
        for wid, attempt, why in broken:
            self._fail_launch(wid, attempt, why)
        for row in stopping:
            if row.id in {w for w, _a, _y in broken}:
                continue
            # The stop was persisted before the restart; say it again.
            grace = (max(0.0, row.kill_at - now) if row.kill_at is not None
                     else self.launcher.grace(row))
            try:
                self.backend.stop(row.id, row.attempt, grace)
            except Exception as err:
                log.exception("could not stop %s", row.id)
                self._fail_launch(row.id, row.attempt, f"could not be stopped: {err}")
        log.info("rebuilt: %d queued, %d running; %d recovered attempts",
                 len(self.scheduler.state.pending), len(self.scheduler.state.running), len(specs))

    def _fail_launch(self, wid: str, attempt: int, why: str) -> None:
        """A workload whose attempt cannot be started or found again: it
        fails by itself with the reason, and its GPUs go back."""
        try:
            self.starter.kill(wid, attempt)
        except Exception:
            log.exception("could not kill %s attempt %s", wid, attempt)
        self.on_exit(AttemptExit(wid, attempt, EXITED, 127, self.clock()), detail=why)

    # ---- the loop --------------------------------------------------------
    # A cycle's phases: ``take_begun`` (on the loop: the failed starts, exits
    # and node changes the backend saw), ``record_begun`` (their records and
    # the waiting work whose wait is over; changes held), ``planned_steps``
    # (the plan, which reads the core only, then one transaction for its
    # decisions; changes held), ``apply_cycle`` (on the loop: the core, then
    # the backend), then ``after_cycle_steps`` (waiting reasons and start
    # estimates; changes held). The service runs all but the loop's two in a
    # worker thread (loop/driver.py; its plans explain after the decisions);
    # ``tick_steps`` runs them all here.
    def tick(self, explain: bool = True) -> None:
        """One cycle, at once (tests and tools; the service runs ``loop.driver``)."""
        drain(self.tick_steps(explain))

    def tick_steps(self, explain: bool = True):
        """One cycle as a generator that yields between steps (where the
        service's event loop serves requests while its worker works)."""
        t0 = time.perf_counter()
        begun = self.take_begun()
        with self.changes_held():
            now = self.record_begun(begun)
            yield
        with self.changes_held(apply=False):
            result = yield from self.planned_steps(now, explain)
            yield  # between the decisions' commit and the core's change
        self.apply_cycle(result, now)
        with self.changes_held():
            yield from self.after_cycle_steps(result, now)
        if self.metrics is not None:
            self.metrics.cycle_seconds.observe(time.perf_counter() - t0)

    def take_begun(self) -> Begun:
        """On the loop, first: the starts that failed, the attempts that
        ended and the nodes that changed since the last cycle (the changed
        nodes are the core's at once: the plan places nothing new on a
        broken one and requeues its work)."""
        nodes = []
        for node in self.backend.take_node_changes():
            if node.name in self.nodes:
                self.nodes[node.name].node = node
                self.scheduler.set_node(node)
                nodes.append((node, self.backend.node_reason(node.name)))
        return Begun(self.starter.take(), self.backend.poll(), nodes)

    def record_begun(self, begun: Begun) -> float:
        """What ``take_begun`` found, recorded (changes held: the core hears
        of the ends once they are), and the waiting workloads whose wait is
        over queued. Returns the cycle's now."""
        for wid, attempt, why in begun.failed:
            self._fail_launch(wid, attempt, why)
        self.on_exits(begun.exits)  # one transaction for all of them
        for node, why in begun.nodes:
            log.warning("node %s is now %s", node.name,
                        "healthy" if node.healthy else f"unhealthy: {why}")
            with self.store.transaction() as s:
                records.node_health(s, node, why, self.clock())
        now = self.clock()
        if self._dependencies_changed:
            self._release_waiting(now)
        return now

    def planned_steps(self, now: float, explain: bool = True):
        """The cycle planned (in steps; it reads the core only), then its
        decisions persisted in one transaction, those about workloads that
        changed meanwhile dropped. Returns the plan (its kept decisions)."""
        result = yield from self.scheduler.cycle_steps(now, explain=explain)
        if not result.events:
            return result
        pending = self.scheduler.state.pending
        self.starter.expect([(e.workload_id, pending[e.workload_id].attempt)
                             for e in result.events
                             if e.type == ev.ADMITTED and e.workload_id in pending])
        try:
            with self.store.transaction() as s:
                rows = records.rows_by_id(s, {e.workload_id for e in result.events})
                allocations: list = []
                result.events = [e for e in result.events if self._persist(s, e, now, allocations)]
                records.allocate_all(s, allocations)
                del rows  # held while the decisions were written
        except BaseException:
            self.starter.expected_done()
            raise
        return result

    def apply_cycle(self, result, now: float) -> None:
        """On the loop: a planned cycle's persisted decisions applied to the
        core, then the changes that waited, then carried out by the backend."""
        try:
            self._apply(result, now)
        finally:
            self.starter.expected_done()

    def _apply(self, result, now: float) -> None:
        if self.metrics is not None:
            self.metrics.count_decisions(result.events, self.scheduler.state, now)
        follow_ups = []
        for e in self.scheduler.apply_result(result, now):
            w = self.scheduler.state.pending.get(e.workload_id)
            if e.type == ev.REQUEUED and w is not None and not kind(w.kind).requeued_when_evicted:
                self.scheduler.cancel(e.workload_id, now)  # evicted server: ended above
                continue
            follow_ups.append(e)
        if follow_ups:  # the core's own consequences (a requeue after an eviction): rare
            with self.store.transaction() as s:
                for e in follow_ups:
                    journal.event(s, e.workload_id, e.type, now, e.message, attempt=e.attempt)
        self._apply_changes()
        to_build: list[tuple[str, int]] = []  # admitted, their launches built in a worker
        for e in result.events:
            try:
                self._act(e, now, to_build)
            except Exception:  # one workload's stop or kill must not end the cycle
                log.exception("could not act on %s of %s", e.type, e.workload_id)
        if to_build:
            self.starter.start_built(to_build, self._launches)

    def after_cycle_steps(self, result, now: float, estimate: bool = True):
        """Waiting reasons and (with ``estimate``) start estimates, in steps;
        they read the core, so the caller holds changes (``changes_held``)
        meanwhile."""
        yield from self._reason_steps(result.waiting)
        if not estimate:
            return
        try:
            yield from self.estimates.refresh_steps(self.scheduler.state, now)
        except Exception:  # an estimate is advice: never worth a cycle
            log.exception("start estimates failed")
            return
        self.estimates.persist_first(self.store, now)

    def _release_waiting(self, now: float) -> None:
        """Queue the waiting workloads whose wait is over (into the core, for
        this cycle); cancel those whose dependency can never be met."""
        self._dependencies_changed = False  # a change from now on is seen next cycle
        try:
            with self.store.transaction() as s:
                done = waiting.release_step(s, now,
                                            lambda r: self.scheduler.validate(to_workload(r)))
        except Exception:  # tried again next cycle; the cycle itself goes on
            log.exception("could not release the waiting workloads")
            self._dependencies_changed = True
            return
        for row in done.queued:
            self.change(lambda sched, w=to_workload(row): sched.submit(w, now))
        if done.ended:
            self.wake()

    def _reason_steps(self, waiting: dict[str, str]):
        """Write down why each waits where that changed, a batch at a time
        (with a long queue most change every cycle: "reserved to start within
        12 min")."""
        changed = [(w, r) for w, r in waiting.items() if self._reasons.get(w) != r]
        for i in range(0, len(changed), REASONS_PER_STEP):
            batch = changed[i:i + REASONS_PER_STEP]
            with self.store.transaction() as s:
                records.write_reasons(s, batch)
            self._reasons.update(batch)
            yield

    @contextmanager
    def changes_held(self, apply: bool = True):
        """While the core is being read (in steps, or in another thread):
        changes wait (``change``); with ``apply`` they are made at the end
        (call it on the thread that owns the core)."""
        self._planning = True
        try:
            yield
        except BaseException:  # no plan to apply: the changes are made now
            self._planning = False
            self._apply_changes()
            raise
        self._planning = False
        if apply:
            self._apply_changes()

    def _apply_changes(self) -> None:
        changes, self._changes = self._changes, []
        for fn in changes:
            fn(self.scheduler)

    def _persist(self, s: Session, e: ev.Event, now: float, allocations: list) -> bool:
        state = self.scheduler.state
        planned = state.pending.get(e.workload_id) or getattr(
            state.running.get(e.workload_id), "workload", None)
        attempt = None if planned is None else planned.attempt
        kept = records.persist_decision(s, e, now, attempt,
                                        self.launcher.attempt_dir(e.workload_id, attempt or 0),
                                        allocations, self.estimates.record_start,
                                        self.config.gpu_sharing.get(
                                            getattr(planned, "pool", ""), 1))
        if kept and e.type == ev.EVICTED and planned is not None:
            self._count_attempt("evicted", planned.kind)
        return kept

    def _act(self, e: ev.Event, now: float, to_build: list) -> None:
        state = self.scheduler.state
        w = state.running.get(e.workload_id) or state.pending.get(e.workload_id)
        if w is None or not kind(getattr(w, "workload", w).kind).run_by_backend:
            return  # a server: its spawner starts and stops it, seeing the decision in the API
        if e.type == ev.ADMITTED:
            if self.starter.in_workers:  # the launch is read and checked off the loop too
                to_build.append((e.workload_id, w.workload.attempt))
                return
            try:
                with self.store.session() as s:
                    row = s.get(WorkloadRow, e.workload_id)
                    spec = self.launcher.launch_spec(s, row)
                    self.launcher.recheck(row, spec)
            except Exception as err:  # a job that cannot start fails; others go on
                log.exception("could not start %s", e.workload_id)
                self._fail_launch(e.workload_id, w.workload.attempt, f"could not start: {err}")
                return
            self.starter.start(spec)
        elif e.type == ev.PREEMPTED:
            attempt = state.running[e.workload_id].workload.attempt
            self.starter.stop(e.workload_id, attempt, max(0.0, (e.kill_at or now) - now))
        elif e.type == ev.EVICTED:
            # The core already requeued it as attempt + 1: kill the old one.
            self.starter.kill(e.workload_id, state.pending[e.workload_id].attempt - 1)

    def _launches(self, wids: list[str]) -> dict[str, object]:
        """Admitted workloads' launches (``Launcher.launches``), in a
        starter's worker thread: its own session."""
        with self.store.session() as s:
            return self.launcher.launches(s, wids)

    # ---- exits -----------------------------------------------------------
    def on_exit(self, x: AttemptExit, detail: str = "") -> None:
        """An attempt ended: record it, then tell the core."""
        self.on_exits([x], detail)

    def on_exits(self, exits: list[AttemptExit], detail: str = "") -> None:
        """Attempts that ended (a backend's poll): recorded in one transaction
        (if that fails, each in its own, so that one that cannot be recorded
        does not keep the others from it), then told to the core."""
        if not exits:
            return
        asked = []
        tokens = self.config.job_tokens
        rows_go = set()  # attempts whose token's row goes with their end's record
        for x in exits:
            key = (x.workload_id, x.attempt)
            if tokens is not None and tokens.revoke(*key):
                rows_go.add(key)
            asked.append((x, self._replacing.pop(key, None), self._stopped_for.pop(key, None)))

        def record(s, batch):
            """The ends of ``batch`` recorded in ``s``: their rows read, their
            GPUs freed and their tokens' rows dropped, a statement for all."""
            known = records.rows_with_attempts(s, [x.workload_id for x, _, _ in batch])
            ended = [(x, end) for x, replaced, stopped in batch
                     if (end := self._record_exit(s, x, detail, replaced, stopped,
                                                  known.get(x.workload_id, (None, []))[1]))]
            records.free_gpus(s, [x.workload_id for x, _ in ended])
            going = [key for x, _, _ in batch if (key := (x.workload_id, x.attempt)) in rows_go]
            if going:
                tokens.drop_rows(s, going)
            return ended
        try:
            with self.store.transaction() as s:
                ended = record(s, asked)
        except Exception:
            if len(asked) == 1:
                raise
            log.exception("recording %d ends together failed; recording them one by one",
                          len(asked))
            ended = []
            for x, replaced, stopped in asked:
                try:
                    with self.store.transaction() as s:
                        ended += record(s, [(x, replaced, stopped)])
                except Exception:
                    log.exception("could not record the end of %s attempt %s",
                                  x.workload_id, x.attempt)
        for x, end in ended:
            def done(sched, x=x, requeue=end.requeue) -> None:
                if x.workload_id in sched.state.running:
                    sched.finished(x.workload_id, x.finished_at, requeue=requeue)
            self.change(done)
            self._reasons.pop(x.workload_id, None)
        if ended:
            self.wake()

    def _record_exit(self, s: Session, x: AttemptExit, detail: str, replaced: Optional[str],
                     stopped: Optional[str], attempts: list[Attempt]):
        """The database side of an attempt's end: its ending (exits.py), or
        None when it was recorded before (an evicted attempt's late exit).
        ``attempts``: all the workload's, read with its row (``rows_with_attempts``)."""
        row = s.get(WorkloadRow, x.workload_id)
        attempt = s.get(Attempt, (x.workload_id, x.attempt))
        if row is None or attempt is None or attempt.state != RUNNING or row.attempt != x.attempt:
            return None
        preempted = row.preempted_for if row.state == STOPPING else None
        end = ending(kind(row.kind), row.attempt, x.reason, x.returncode,
                     Asked(row.cancel_requested, preempted, replaced, stopped),
                     lost_before=records.lost_before(attempts), time_limit=row.time_limit,
                     max_replica_restarts=self.config.max_replica_restarts,
                     max_lost_attempts=self.config.max_lost_attempts, detail=detail)
        self._end(s, row, x.finished_at, end.outcome, x.returncode, end.message, free=False)
        if end.requeue:
            records.requeue_row(row, end.message)
            journal.event(s, row.id, ev.REQUEUED, x.finished_at, end.message,
                          attempt=row.attempt)
        else:
            row.state, row.finished_at, row.exit_code = end.state, x.finished_at, x.returncode
            row.reason, row.kill_at, row.preempted_for = end.message, None, None
            journal.event(s, row.id, ev.FINISHED, x.finished_at, end.message,
                          attempt=row.attempt,
                          data={"state": end.state, "exit_code": x.returncode})
            self._finished(s, row, attempts)
        return end

    def stop_for(self, row: WorkloadRow, why: str) -> None:
        """The service itself ends a running workload for ``why`` (a share
        above its GPU memory): a job's attempt is stopped and ends failed
        with that reason; a server's GPUs go back, and its spawner stops it."""
        if not kind(row.kind).run_by_backend:
            self.release(SCHEDULER, row.id, why)
            return
        self._stopped_for[(row.id, row.attempt)] = why
        self.starter.stop(row.id, row.attempt, min(self.launcher.grace(row), STOP_FOR_GRACE))

    def _finished(self, s: Session, row: WorkloadRow,
                  attempts: Optional[list[Attempt]] = None) -> None:
        """A workload ended for good: how long it ran (over ``attempts``, all
        of its, read here if not given) joins the run-time history; what
        waits for it is looked at again."""
        if attempts is None:
            attempts = records.rows_with_attempts(s, [row.id]).get(row.id, (row, []))[1]
        self.estimates.finished(row, records.ran_seconds(attempts))
        if row.sweep_id is not None:
            try:
                with s.begin_nested():
                    sweeps.record_result(s, row)
            except Exception:  # what a job left cannot keep its end from being recorded
                log.exception("could not read the result of sweep task %s", row.id)
        self._dependencies_changed = True

    def _lost_without_core(self, wid: str, now: float, why: str) -> None:
        with self.store.transaction() as s:
            row = s.get(WorkloadRow, wid)
            msg = f"attempt {row.attempt} was lost ({why}); requeued as attempt {row.attempt + 1}"
            self._end(s, row, now, "lost", None, msg)
            records.requeue_row(row, msg)
            journal.event(s, wid, ev.REQUEUED, now, msg, attempt=row.attempt)
        self.scheduler.state.add_pending(to_workload(row))

    def _end(self, s: Session, row: WorkloadRow, now: float, outcome: str,
             returncode: Optional[int], msg: str, free: bool = True) -> None:
        if records.end_attempt(s, row, now, outcome, returncode, msg, free) is not None:
            self._count_attempt(outcome, row.kind)

    def _count_attempt(self, outcome: str, kind_name: str) -> None:
        if self.metrics is not None:
            self.metrics.attempts.labels(outcome, kind_name).inc()
