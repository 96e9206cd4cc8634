"""Schedules: a job submitted at each firing of a cron expression, as a
normal workload of the schedule's team (admitted against its quota like any
other).

Exactly once: a firing is a row keyed by (schedule, scheduled instant),
written in the transaction that creates its workload, so a restart or a
second service process that tries the same firing again fails to insert it
and creates nothing. ``next_run_at`` (in the database) is the next firing
not yet handled; the loop (``fire_due``) handles those that are due:

- on time (the latest due firing at most ``late_grace`` seconds ago): it
  fires, whatever ``catch_up`` says;
- later (the service was down): ``catch_up="once"`` runs the latest missed
  firing once (not once per missed firing), ``"skip"`` runs none;

and then ``next_run_at`` moves to the first firing after now.

Before a due firing, the owner's right to it is asked again (``membership``,
the hub's word): an owner who left the schedule's team (or the hub) pauses
the schedule instead, with the reason as its ``last_error`` ("paused: carol
is no longer in team nlp"), a notice to the owner and the team's leads, and
an audit entry.
"""
from __future__ import annotations

import datetime as dt
import logging
import secrets
from typing import Any, Callable, Optional, Protocol

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuspawner.scheduler.workflow import cron
from gpuspawner.store import FiringRow, NoticeRow, ScheduleRow, WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.facades import Records, Submissions
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.workloads.env_access import REDACTED, keep_redacted
from gpuspawner.vocab.schedules import firing_output, job_spec, parse_schedule
from gpuspawner.vocab.specs import Limits, SpecError

log = logging.getLogger("gpuhub.schedules")
UTC = dt.timezone.utc
RECENT = 10
CRON, CATCH_UP, MANUAL = "cron", "catch-up", "manual"
PAUSED_NOTICE = "schedule-paused"
# How long the owner's and leads' notices of an automatic pause stay up.
PAUSED_NOTICE_SECONDS = 7 * 24 * 3600
PAUSED_PREFIX = "paused: "


class Membership(Protocol):
    """Whether a schedule's owner may still fire it, as the hub says now."""

    def refused(self, user: str, team: str) -> Optional[str]:
        """Why ``user`` may no longer submit as ``team`` ("carol is no
        longer in team nlp"); None when they may, or nobody knows."""

    def leads(self, team: str) -> list[str]:
        """The team's leads, to be told."""


class Skipped(Exception):
    """The firing was handled already (by another process, or before a
    restart), or its schedule changed meanwhile: nothing to do."""


def when(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, UTC)


def next_run(row: ScheduleRow, after: float) -> float:
    c, tz = cron.parse(row.cron), cron.zone(row.timezone)
    return cron.next_fire(c, tz, when(after)).timestamp()


def firing_stamp(row: ScheduleRow, fire_time: float) -> str:
    """``YYYYmmddTHHMM``, the firing's wall time in the schedule's zone."""
    return f"{when(fire_time).astimezone(cron.zone(row.timezone)):%Y%m%dT%H%M}"


def firing_name(row: ScheduleRow, fire_time: float) -> str:
    """``<schedule>-YYYYmmddTHHMM``."""
    return f"{row.name}-{firing_stamp(row, fire_time)}"


class Schedules:
    def __init__(self, records: Records, submissions: Submissions, limits: Callable[[], Limits],
                 late_grace: float = 60.0):
        """``records``: the database and the clock; ``submissions``: submits the
        firings; ``limits()``: the operator's job limits, read at each firing."""
        self.records = records
        self.submissions = submissions
        self.limits = limits
        self.late_grace = late_grace
        # The service sets it (the hub's groups); without it, owners are not re-checked.
        self.membership: Optional[Membership] = None

    @property
    def store(self):
        return self.records.store

    # ---- reads -----------------------------------------------------------
    def get(self, who: Identity, sid: str) -> ScheduleRow:
        with self.store.session() as s:
            return self._visible(s, who, sid)

    def listing(self, who: Identity, team: Optional[str] = None) -> list[ScheduleRow]:
        with self.store.session() as s:
            q = select(ScheduleRow).order_by(ScheduleRow.created_at.desc(), ScheduleRow.id)
            if team:
                q = q.where(ScheduleRow.team == team)
            return [r for r in s.scalars(q) if who.sees_team(r.team) or r.user == who.name]

    def recent(self, sid: str) -> list[dict[str, Any]]:
        """The last firings, newest first, with the state of each workload."""
        with self.store.session() as s:
            rows = s.execute(
                select(FiringRow, WorkloadRow.state)
                .join(WorkloadRow, WorkloadRow.id == FiringRow.workload_id, isouter=True)
                .where(FiringRow.schedule_id == sid)
                .order_by(FiringRow.fired_at.desc()).limit(RECENT)).all()
        return [{"workload_id": f.workload_id, "fired_at": f.fired_at, "state": state,
                 "scheduled_for": f.fire_time, "cause": f.cause} for f, state in rows]

    @staticmethod
    def _visible(s: Session, who: Identity, sid: str) -> ScheduleRow:
        row = s.get(ScheduleRow, sid)
        if row is None or not (who.sees_team(row.team) or row.user == who.name):
            raise NotFound(f"no schedule {sid}")
        return row

    def _mine(self, s: Session, who: Identity, sid: str) -> ScheduleRow:
        row = self._visible(s, who, sid)
        if not who.acts_on(row.user, row.team):
            raise Forbidden(f"schedule {sid} belongs to {row.user}; only they, a lead of team "
                            f"{row.team} or an admin may change it")
        return row

    # ---- changes ---------------------------------------------------------
    def create(self, who: Identity, body: Any) -> ScheduleRow:
        fields = parse_schedule(body, self.limits())
        if not who.can_submit:
            raise Forbidden("you may not submit work (scope custom:gpuhub:submit)")
        team = self.submissions.team_for(who, fields.pop("team") or fields["spec"].get("team"))
        if fields["spec"].get("team") not in (None, team):
            raise SpecError("spec.team", f"must be the schedule's team {team!r} or left out")
        now = self.records.clock()
        row = ScheduleRow(id="c" + secrets.token_hex(6), team=team, user=who.name,
                          created_at=now, updated_at=now, **fields)
        self._check_job(row)
        row.next_run_at = None if row.paused else next_run(row, now)
        with self.store.transaction() as s:
            s.add(row)
            journal.audit(s, now, who.name, "schedule-create", row.id,
                          {"team": team, "name": row.name, "cron": row.cron,
                           "timezone": row.timezone})
        return row

    def update(self, who: Identity, sid: str, body: Any) -> ScheduleRow:
        fields = parse_schedule(body, self.limits(), partial=True)
        now = self.records.clock()
        with self.store.transaction() as s:
            row = self._mine(s, who, sid)
            if fields.get("spec", {}).get("team") not in (None, row.team):
                raise SpecError("spec.team",
                                f"must be the schedule's team {row.team!r} or left out")
            if (fields.get("spec") or {}).get("env"):
                fields["spec"]["env"] = self._unredacted(fields["spec"]["env"], row)
            for key, value in fields.items():
                setattr(row, key, value)
            self._check_job(row)
            if not row.paused and ({"cron", "timezone"} & set(fields)):
                row.next_run_at = next_run(row, now)
            row.updated_at = now
            journal.audit(s, now, who.name, "schedule-update", sid, {"changed": sorted(fields)})
        return row

    @staticmethod
    def _unredacted(env: dict, row: ScheduleRow) -> dict:
        """A whole spec sent back by someone who saw its env redacted (a
        lead, a teammate) keeps the owner's values, not the placeholder."""
        try:
            return keep_redacted(env, (row.spec or {}).get("env"))
        except ValueError as e:
            raise SpecError(f"spec.env.{e}", f"is {REDACTED!r}, the placeholder for a value "
                                             f"you were not shown; give the value") from None

    def pause(self, who: Identity, sid: str) -> ScheduleRow:
        return self._set_paused(who, sid, True)

    def resume(self, who: Identity, sid: str) -> ScheduleRow:
        """Firings while paused are not run; the next one after now is."""
        return self._set_paused(who, sid, False)

    def _set_paused(self, who: Identity, sid: str, paused: bool) -> ScheduleRow:
        now = self.records.clock()
        with self.store.transaction() as s:
            row = self._mine(s, who, sid)
            if row.paused == paused:
                return row  # asked before: nothing new to record
            row.paused, row.updated_at = paused, now
            row.next_run_at = None if paused else next_run(row, now)
            if not paused and (row.last_error or "").startswith(PAUSED_PREFIX):
                row.last_error = row.last_error_at = None  # the automatic pause's reason
            journal.audit(s, now, who.name, "schedule-pause" if paused else "schedule-resume",
                          sid, {})
        return row

    def delete(self, who: Identity, sid: str) -> None:
        """The schedule and its firings go; the workloads it made stay."""
        now = self.records.clock()
        with self.store.transaction() as s:
            row = self._mine(s, who, sid)
            s.execute(delete(FiringRow).where(FiringRow.schedule_id == sid))
            s.delete(row)
            journal.audit(s, now, who.name, "schedule-delete", sid,
                          {"team": row.team, "name": row.name})

    def run_now(self, who: Identity, sid: str) -> WorkloadRow:
        """Fire once now (paused or not); the schedule's timing stays."""
        with self.store.session() as s:
            row = self._mine(s, who, sid)
        now = self.records.clock()
        return self._fire(row, now, MANUAL, who.name)

    def _check_job(self, row: ScheduleRow) -> None:
        """SpecError (naming ``spec.<field>``) when its job could not be submitted."""
        spec = job_spec(row.spec, self.limits(), "x", row.team)
        try:
            self.submissions.check_row(self.submissions.new_row(self._owner(row), spec))
        except SpecError as e:
            if e.field.startswith("spec."):
                raise
            raise SpecError(f"spec.{e.field}", e.message, e.status) from None

    @staticmethod
    def _owner(row: ScheduleRow) -> Identity:
        """Whom a firing submits as: the schedule's user, in its team."""
        return Identity(row.user, teams=frozenset({row.team}), can_submit=True)

    # ---- firing ----------------------------------------------------------
    def fire_due(self) -> list[WorkloadRow]:
        """Handle every firing due by now (the service's loop calls this)."""
        now = self.records.clock()
        with self.store.session() as s:
            due = s.scalars(select(ScheduleRow).where(
                ScheduleRow.paused.is_(False), ScheduleRow.next_run_at <= now)).all()
        made = []
        for row in due:
            try:
                why = self.membership.refused(row.user, row.team) if self.membership else None
                if why:
                    self._pause_for(row, why, now)
                    continue
                wl = self._fire_due(row, now)
            except Skipped:
                continue
            except Exception:  # one schedule must not stop the others
                log.exception("schedule %s could not fire", row.id)
                continue
            if wl is not None:
                made.append(wl)
        return made

    def due_owners(self) -> set[tuple[str, str]]:
        """(user, team) of the schedules due now: whom ``membership`` is asked about."""
        now = self.records.clock()
        with self.store.session() as s:
            return {(user, team) for user, team in s.execute(
                select(ScheduleRow.user, ScheduleRow.team).where(
                    ScheduleRow.paused.is_(False), ScheduleRow.next_run_at <= now))}

    def _pause_for(self, row: ScheduleRow, why: str, now: float) -> None:
        """Pause a schedule whose owner may no longer fire it; tell the owner
        and the team's leads (a notice each), audited."""
        told = list(dict.fromkeys([row.user, *self.membership.leads(row.team)]))
        with self.store.transaction() as s:
            sched = s.get(ScheduleRow, row.id)
            if sched is None or sched.paused:
                return
            sched.paused, sched.next_run_at, sched.updated_at = True, None, now
            sched.last_error, sched.last_error_at = PAUSED_PREFIX + why, now
            for user in told:
                whose = "your schedule" if user == row.user else f"{row.user}'s schedule"
                s.add(NoticeRow(user=user, kind=PAUSED_NOTICE, created_at=now,
                                expires_at=now + PAUSED_NOTICE_SECONDS,
                                message=f"{whose} {row.name} ({row.id}) of team {row.team} is "
                                        f"paused: {why}. It fires again once resumed.",
                                data={"schedule_id": row.id, "team": row.team}))
            journal.audit(s, now, f"schedule {row.id}", "schedule-auto-pause", row.id,
                          {"user": row.user, "team": row.team, "reason": why, "told": told})
        log.warning("schedule %s paused: %s", row.id, why)

    def _fire_due(self, row: ScheduleRow, now: float) -> Optional[WorkloadRow]:
        c, tz = cron.parse(row.cron), cron.zone(row.timezone)
        expected = row.next_run_at
        latest = cron.last_fire_between(c, tz, when(expected - 1), when(now)).timestamp()
        following = cron.next_fire(c, tz, when(now)).timestamp()
        if now - latest <= self.late_grace:
            cause = CRON
        elif row.catch_up == "once":
            cause = CATCH_UP
        else:
            self._advance(row.id, expected, following, now, f"skipped firings missed while the "
                          f"service was down, the latest at {when(latest):%Y-%m-%d %H:%M}Z "
                          f"(catch_up=skip)")
            return None
        return self._fire(row, latest, cause, f"schedule {row.id}", expected, following)

    def _advance(self, sid: str, expected: float, following: float, now: float,
                 why: str, failed_firing: Optional[float] = None) -> None:
        """On to the next firing; with ``failed_firing`` (its scheduled
        instant), ``why`` is the schedule's ``last_error`` until a firing
        succeeds, and audited."""
        with self.store.transaction() as s:
            row = s.get(ScheduleRow, sid)
            if row is None or row.paused or row.next_run_at != expected:
                return
            row.next_run_at = following
            log.info("schedule %s: %s", sid, why)
            if failed_firing is not None:
                row.last_error, row.last_error_at = why, now
                journal.audit(s, now, f"schedule {sid}", "schedule-fire-failed", sid,
                              {"scheduled_for": failed_firing, "error": why})

    def _fire(self, row: ScheduleRow, fire_time: float, cause: str, actor: str,
              expected: Optional[float] = None, following: Optional[float] = None
              ) -> WorkloadRow:
        """Submit the firing's workload; with ``expected``, only if the
        schedule's next_run_at is still that, moving it to ``following``."""
        now = self.records.clock()
        try:
            spec = job_spec(firing_output(row.spec, firing_stamp(row, fire_time)), self.limits(),
                            firing_name(row, fire_time), row.team)
            wl = self.submissions.new_row(self._owner(row), spec)
        except (SpecError, Forbidden) as err:  # the team, pool or limits changed since
            if expected is not None:
                self._advance(row.id, expected, following, now,
                              f"the firing for {when(fire_time):%Y-%m-%d %H:%M}Z could not be "
                              f"submitted: {err}", failed_firing=fire_time)
            raise
        wl.schedule_id = row.id

        def record(s: Session) -> None:
            sched = s.get(ScheduleRow, row.id)
            if sched is None:
                raise Skipped()
            if expected is not None:
                if sched.paused or sched.next_run_at != expected:
                    raise Skipped()
                sched.next_run_at = following
            s.add(FiringRow(schedule_id=row.id, fire_time=fire_time, fired_at=now,
                            workload_id=wl.id, cause=cause))
            s.flush()  # a firing made before: IntegrityError, and nothing is written
            sched.last_run_at, sched.last_workload_id = now, wl.id
            sched.last_error = sched.last_error_at = None
            journal.audit(s, now, actor, "schedule-fire", row.id,
                          {"workload": wl.id, "scheduled_for": fire_time, "cause": cause})
        try:
            return self.submissions.queue_row(wl, actor, also=record)
        except IntegrityError:
            if cause == MANUAL:
                raise Conflict(f"schedule {row.id} was just run; try again") from None
            raise Skipped() from None
