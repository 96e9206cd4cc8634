"""Work taken back: a user's cancel, a server's GPUs released by the
spawner, a replica that no longer serves replaced by the serving
controller. Each checks who asks, writes the database (with its event and
audit entry), then tells the core and the starter (``Withdrawals``)."""
from __future__ import annotations

from typing import Callable

from gpuspawner.scheduler import events as ev
from gpuspawner.scheduler.kinds import kind
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.submitting import Signals
from gpuspawner.service.workloads import queries
from gpuspawner.store import Store, WorkloadRow
from gpuspawner.vocab.states import (CANCELLED, FINAL_STATES, HELD, QUEUED, RUNNING, STOPPED,
                                     STOPPING, WAITING)


class Withdrawals:
    """``end_attempt(s, row, now, outcome, returncode, msg)`` and
    ``finished(s, row)`` are the engine's records of an attempt's and a
    workload's end; ``replacing`` its (replica, attempt) -> why it replaces it."""

    def __init__(self, store: Store, clock: Callable[[], float], launcher, starter,
                 signals: Signals, forget_reason: Callable[[str], None],
                 end_attempt: Callable, finished: Callable, replacing: dict):
        self.store, self.clock, self.launcher, self.starter = store, clock, launcher, starter
        self.signals, self.forget_reason = signals, forget_reason
        self.end_attempt, self.finished, self.replacing = end_attempt, finished, replacing

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
            self.signals.change(lambda sched: sched.cancel(wid, now))
        elif was not in (HELD, WAITING):
            self.starter.stop(wid, row.attempt, self.launcher.grace(row))
        self.signals.dependencies_changed()
        self.forget_reason(wid)
        self.signals.wake()
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
                self.end_attempt(s, row, now, STOPPED, None, msg)
            row.state, row.finished_at, row.reason = STOPPED, now, msg
            row.kill_at, row.preempted_for, row.nomination = None, None, None
            journal.event(s, wid, ev.FINISHED, now, msg, attempt=row.attempt,
                          data={"state": STOPPED})
            journal.audit(s, now, who.name, "release", wid, {"state": was, "why": why})
            self.finished(s, row)

        def forget(sched) -> None:
            if wid in sched.state.pending:
                sched.cancel(wid, now)
            elif wid in sched.state.running:
                sched.finished(wid, now, requeue=False)
        self.signals.change(forget)
        self.forget_reason(wid)
        self.signals.wake()
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
        self.replacing[(wid, attempt)] = why
        self.starter.stop(wid, attempt, grace)
