"""Schedules in the service, on a scripted clock (the engine's ``clock``
seam; nothing sleeps): the real database (SQLite and PostgreSQL), the real
engine and the loop's step ``Schedules.fire_due``, as the service runs it
every ``schedule_check_interval``. What a user sees: the workloads each
firing makes (name, schedule_id, state), the schedule's next_run_at, and
that nothing fires twice across restarts or two service processes."""
from __future__ import annotations

import datetime as dt
import sys

import nbformat
import pytest
from sqlalchemy import select

from gpuspawner.scheduler.model import Quota
from gpuspawner.service.errors import Forbidden, NotFound
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.service.schedules.schedules import Schedules, Skipped
from gpuspawner.service.workloads import queries
from gpuspawner.service.schedules.api import schedule_view
from gpuspawner.vocab.specs import Limits, SpecError, parse_job
from gpuspawner.store import AuditEntry, FiringRow, ScheduleRow, WorkloadRow
from test_start_estimates_service import ALICE, BOB, Clock, make_engine

CAROL = Identity("carol", teams=frozenset({"a"}), can_submit=True)  # alice's teammate
ADMIN = Identity("root", admin=True, can_submit=True)
JOB = {"command": [sys.executable, "-c", "print('nightly')"], "gpus": 1, "pool": "default"}


def utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc).timestamp()


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


class Service:
    """One service process: an engine and its schedules, on the shared clock."""

    def __init__(self, db_url, tmp_path, clock, grace: float = 60.0):
        self.engine = make_engine(db_url, tmp_path, clock)
        self.schedules = Schedules(self.engine.records, self.engine.submissions, Limits, grace)

    def run_until(self, clock: Clock, until: float, step: float = 20.0) -> list[WorkloadRow]:
        """The loop, every ``step`` seconds of the clock until ``until``."""
        made = []
        while clock.t < until:
            clock.t = min(until, clock.t + step)
            made += self.schedules.fire_due()
        return made

    def close(self):
        self.engine.store.close()


@pytest.fixture
def clock():
    return Clock(utc("2026-06-01T10:00:30"))


@pytest.fixture
def service(db_url, tmp_path, clock):
    svc = Service(db_url, tmp_path, clock)
    yield svc
    svc.close()


def create(svc, cron="* * * * *", who=ALICE, **extra):
    return svc.schedules.create(who, {"name": "nightly", "cron": cron, "spec": JOB, **extra})


def workloads_of(svc, sid) -> list[WorkloadRow]:
    with svc.engine.store.session() as s:
        return list(s.scalars(select(WorkloadRow).where(WorkloadRow.schedule_id == sid)
                              .order_by(WorkloadRow.submitted_at)))


def test_a_schedule_makes_one_named_workload_per_firing_on_time(service, clock):
    sched = create(service)
    assert iso(sched.next_run_at) == "2026-06-01T10:01:00"
    made = service.run_until(clock, utc("2026-06-01T10:05:30"))
    assert [w.name for w in made] == [f"nightly-20260601T10{m:02d}" for m in range(1, 6)]
    assert all(w.schedule_id == sched.id and w.team == "a" and w.user == "alice" for w in made)
    # Late by at most the loop's step (20 s here): fired_at - scheduled time.
    with service.engine.store.session() as s:
        firings = s.scalars(select(FiringRow).order_by(FiringRow.fire_time)).all()
    assert [f.cause for f in firings] == ["cron"] * 5
    assert all(0 <= f.fired_at - f.fire_time <= 20 for f in firings)
    assert iso(service.schedules.get(ALICE, sched.id).next_run_at) == "2026-06-01T10:06:00"


def test_each_firing_of_a_notebook_keeps_its_own_executed_copy(service, clock, tmp_path):
    workspace = tmp_path / "workspaces" / "alice"
    workspace.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), str(workspace / "report.ipynb"))
    nb = {"notebook": "report.ipynb", "output_notebook": "out/report.ipynb", "pool": "default",
          "gpus": 0}
    sched = service.schedules.create(ALICE, {"name": "daily", "cron": "* * * * *", "spec": nb})
    made = service.run_until(clock, utc("2026-06-01T10:02:30"))
    assert [w.spec["output_notebook"] for w in made] == ["out/report-20260601T1001.ipynb",
                                                          "out/report-20260601T1002.ipynb"]
    assert service.schedules.get(ALICE, sched.id).spec["output_notebook"] == "out/report.ipynb"


# Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
# New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
@pytest.mark.parametrize("cron,tz,start,until,fired", [
    # spring forward: the skipped 02:30 runs once, at 03:00 CEST (01:00Z)
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00", "2026-03-30T03:00:00",
     [("2026-03-29T01:00:00", "nightly-20260329T0300"),
      ("2026-03-30T00:30:00", "nightly-20260330T0230")]),
    # fall back: the repeated 02:30 runs at its first occurrence only (CEST, 00:30Z)
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00", "2026-10-26T03:00:00",
     [("2026-10-25T00:30:00", "nightly-20261025T0230"),
      ("2026-10-26T01:30:00", "nightly-20261026T0230")]),
    ("0 2 * * *", "America/New_York", "2026-03-07T12:00:00", "2026-03-08T12:00:00",
     [("2026-03-08T07:00:00", "nightly-20260308T0300")]),
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00", "2026-11-01T12:00:00",
     [("2026-11-01T05:30:00", "nightly-20261101T0130")]),
])
def test_daylight_saving_changes_through_the_loop(service, clock, cron, tz, start, until, fired):
    clock.t = utc(start)
    sched = create(service, cron, timezone=tz)
    made = service.run_until(clock, utc(until), step=60.0)
    with service.engine.store.session() as s:
        firings = s.scalars(select(FiringRow).where(FiringRow.schedule_id == sched.id)
                            .order_by(FiringRow.fire_time)).all()
    assert [(iso(f.fire_time), w.name) for f, w in zip(firings, made)] == fired
    assert len(made) == len(fired)


@pytest.mark.parametrize("catch_up,back_at,expected", [
    # down 10:05:30 -> 11:02:10, twelve firings missed: the latest runs once
    ("once", "2026-06-01T11:02:10", [("nightly-20260601T1100", "catch-up")]),
    ("skip", "2026-06-01T11:02:10", []),
    # back within schedule_late_grace (60 s) of the latest: it is on time
    ("skip", "2026-06-01T11:00:40", [("nightly-20260601T1100", "cron")]),
])
def test_firings_missed_while_down_run_once_or_not_at_a_restart(db_url, tmp_path, clock,
                                                                 catch_up, back_at, expected):
    first = Service(db_url, tmp_path, clock)
    sched = create(first, "*/5 * * * *", catch_up=catch_up)
    assert [w.name for w in first.run_until(clock, utc("2026-06-01T10:05:30"))] == \
        ["nightly-20260601T1005"]
    first.close()  # the service is down ...
    clock.t = utc(back_at)
    again = Service(db_url, tmp_path, clock)  # ... and restarts
    made = again.schedules.fire_due()
    made += again.schedules.fire_due()  # the next loop turn: nothing more
    with again.engine.store.session() as s:
        causes = {f.workload_id: f.cause for f in s.scalars(select(FiringRow))}
    assert [(w.name, causes[w.id]) for w in made] == expected
    # ... and the schedule goes on from now
    assert iso(again.schedules.get(ALICE, sched.id).next_run_at) == "2026-06-01T11:05:00"
    later = again.run_until(clock, utc("2026-06-01T11:05:30"))
    assert [w.name for w in later] == ["nightly-20260601T1105"]
    again.close()


def test_two_service_processes_never_fire_the_same_firing_twice(db_url, tmp_path, clock):
    one, two = Service(db_url, tmp_path, clock), Service(db_url, tmp_path, clock)
    sched = create(one)
    clock.t = utc("2026-06-01T10:01:05")
    # Both read the schedule as due before either fires it.
    with two.engine.store.session() as s:
        seen_by_two = s.get(ScheduleRow, sched.id)
    assert len(one.schedules.fire_due()) == 1
    assert two.schedules.fire_due() == []  # next_run_at moved on
    # Even past that check, the firing's key refuses a second workload.
    with pytest.raises(Skipped):
        two.schedules._fire(seen_by_two, seen_by_two.next_run_at, "cron", "test")
    assert len(workloads_of(one, sched.id)) == 1
    one.close()
    two.close()


def test_firings_are_admitted_against_the_team_quota(service, clock):
    set_team(service.engine.steering, ADMIN, "a", None, {"default": Quota(nominal=2, borrowing_limit=0)})
    create(service, spec={**JOB, "gpus": 2})
    made = service.run_until(clock, utc("2026-06-01T10:02:30"))
    service.engine.tick()
    with service.engine.store.session() as s:
        states = [s.get(WorkloadRow, w.id) for w in made]
    assert [w.state for w in states] == ["running", "queued"]
    assert "team a holds 2 default GPUs and may hold at most 2" in states[1].reason


def test_pause_resume_edit_run_now_and_delete(service, clock):
    sched = create(service)
    paused = service.schedules.pause(ALICE, sched.id)
    assert paused.paused and paused.next_run_at is None
    assert service.run_until(clock, utc("2026-06-01T10:03:30")) == []
    # run now works while paused, and keeps the schedule paused
    now_run = service.schedules.run_now(ALICE, sched.id)
    assert now_run.name == "nightly-20260601T1003" and now_run.schedule_id == sched.id
    resumed = service.schedules.resume(ALICE, sched.id)
    assert iso(resumed.next_run_at) == "2026-06-01T10:04:00"  # nothing missed while paused runs
    edited = service.schedules.update(ALICE, sched.id, {"cron": "0 12 * * *",
                                                        "timezone": "Europe/Paris"})
    assert iso(edited.next_run_at) == "2026-06-02T10:00:00"  # 12:00 CEST, tomorrow
    assert service.schedules.recent(sched.id)[0]["workload_id"] == now_run.id
    service.schedules.delete(ALICE, sched.id)
    with pytest.raises(NotFound):
        service.schedules.get(ALICE, sched.id)
    assert [w.id for w in workloads_of(service, sched.id)] == [now_run.id]  # it stays
    with service.engine.store.session() as s:
        actions = [a.action for a in s.scalars(select(AuditEntry).where(
            AuditEntry.target == sched.id).order_by(AuditEntry.id))]
    assert actions == ["schedule-create", "schedule-pause", "schedule-fire", "schedule-resume",
                       "schedule-update", "schedule-delete"]


def test_who_may_see_and_change_a_schedule(service):
    sched = create(service)
    with pytest.raises(NotFound):
        service.schedules.get(BOB, sched.id)  # another team's: as if there were none
    assert service.schedules.listing(BOB) == []
    assert service.schedules.get(CAROL, sched.id).id == sched.id  # a teammate sees it ...
    for change in (lambda w: service.schedules.pause(w, sched.id),
                   lambda w: service.schedules.run_now(w, sched.id),
                   lambda w: service.schedules.update(w, sched.id, {"cron": "@daily"}),
                   lambda w: service.schedules.delete(w, sched.id)):
        with pytest.raises(Forbidden, match="belongs to alice"):
            change(CAROL)  # ... but does not change it
    assert service.schedules.pause(ADMIN, sched.id).paused  # an admin does
    with pytest.raises(SpecError, match="not a member of team 'a'"):
        create(service, who=BOB, team="a")


@pytest.mark.parametrize("body,field,message", [
    ({"cron": "61 * * * *"}, "cron", "cron: cron minute field: 61 is out of 0-59"),
    ({"cron": "* * *"}, "cron", "cron: cron expression needs 5 fields"),
    ({"cron": None}, "cron", "cron: is required"),
    ({"timezone": "Mars/Olympus"}, "timezone", "timezone: unknown IANA time zone 'Mars/Olympus'"),
    ({"catch_up": "all"}, "catch_up", "catch_up: must be one of once, skip"),
    ({"spec": {"gpus": 1, "pool": "default"}}, "spec.command",
     "spec.command: give exactly one of 'command' or 'notebook'"),
    ({"spec": {**JOB, "pool": "h100"}}, "spec.pool", "spec.pool: unknown pool 'h100'"),
    ({"team": "a", "spec": {**JOB, "team": "b"}}, "spec.team",
     "spec.team: must be the schedule's team 'a'"),
    ({"name": "two words"}, "name", "name: may use letters"),
    ({"spec": {**JOB, "name": "no good"}}, "spec.name", "spec.name: may use letters"),
    ({"colour": "red"}, "colour", "colour: is not a known field"),
])
def test_bad_schedules_are_refused_naming_the_field(service, body, field, message):
    with pytest.raises(SpecError) as err:
        service.schedules.create(ALICE, {"name": "nightly", "cron": "@daily", "spec": JOB, **body})
    assert err.value.field == field and str(err.value).startswith(message)
    assert service.schedules.listing(ADMIN) == []  # nothing made


def test_a_firing_that_cannot_be_submitted_is_recorded_until_one_succeeds(service, clock):
    limits = [Limits()]
    service.schedules.limits = lambda: limits[0]
    sched = create(service, spec={**JOB, "time_limit": 7200})
    limits[0] = Limits(max_time_limit=3600)  # the operator lowered it since
    assert service.run_until(clock, utc("2026-06-01T10:02:30")) == []
    shown = schedule_view(service.schedules, service.schedules.get(ALICE, sched.id))
    assert shown["last_error"].startswith("the firing for 2026-06-01 10:02Z could not be "
                                          "submitted: spec.time_limit")
    assert shown["last_error_at"] == "2026-06-01T10:02:10Z"
    assert shown["next_run_at"] == "2026-06-01T10:03:00Z"  # skipped, not retried forever
    with service.engine.store.session() as s:
        failed = s.scalars(select(AuditEntry).where(
            AuditEntry.target == sched.id, AuditEntry.action == "schedule-fire-failed")).all()
    assert [a.detail["scheduled_for"] for a in failed] == [utc("2026-06-01T10:01:00"),
                                                          utc("2026-06-01T10:02:00")]
    limits[0] = Limits()
    (made,) = service.run_until(clock, utc("2026-06-01T10:03:30"))
    shown = schedule_view(service.schedules, service.schedules.get(ALICE, sched.id))
    assert (shown["last_error"], shown["last_error_at"]) == (None, None)
    assert shown["last_workload_id"] == made.id


def test_the_workloads_list_filters_by_schedule(service, clock):
    sched = create(service)
    made = service.run_until(clock, utc("2026-06-01T10:02:30"))
    by_hand = service.engine.submit(ALICE, parse_job(JOB))
    mine, _, _ = queries.workloads(service.engine.store, ALICE, {"schedule_id": [sched.id]}, 100,
                                False)
    assert sorted(w.id for w in mine) == sorted(w.id for w in made) and len(made) == 2
    none, _, _ = queries.workloads(service.engine.store, ALICE, {"schedule_id": ["none"]}, 100,
                                False)
    assert [w.id for w in none] == [by_hand.id]


# ---- an owner who left the team (issue 33 item 9) ------------------------------------------

class FakeHub:
    """The hub's API as HubMembership calls it: users' groups and role names."""

    def __init__(self, groups: dict, roles: dict = None, group_roles: dict = None):
        self.groups, self.roles, self.group_roles = groups, roles or {}, group_roles or {}
        self.down = False

    async def call(self, method, path):
        from tornado import httpclient
        if self.down:
            raise OSError("connection refused")
        path, _, query = path.partition("?")
        if path == "/users":
            return [] if "offset=0" not in query else [
                {"name": u, "roles": self.roles.get(u, [])} for u in self.groups]
        if path == "/groups":
            return [] if "offset=0" not in query else [
                {"name": g, "users": users, "roles": roles}
                for g, (users, roles) in self.group_roles.items()]
        user = path.rsplit("/", 1)[1]
        if user not in self.groups:
            raise httpclient.HTTPClientError(404)
        return {"name": user, "groups": self.groups[user]}


def loop_step(svc, membership):
    """The service's schedule loop, once: the hub asked about due owners, then fire_due."""
    import asyncio
    asyncio.run(membership.refresh(svc.schedules.due_owners()))
    return svc.schedules.fire_due()


def run_loop(svc, clock, membership, until, step=20.0):
    made = []
    while clock.t < until:
        clock.t = min(until, clock.t + step)
        made += loop_step(svc, membership)
    return made


def test_a_schedule_whose_owner_left_the_team_pauses_and_tells_the_owner_and_leads(
        service, clock):
    from gpuspawner.service.schedules.membership import HubMembership
    hub = FakeHub({"alice": ["team-a"], "lara": ["team-a"], "lou": []},
                  roles={"lara": ["user", "gpuhub-lead-a"]},
                  group_roles={"a-leads": (["lou"], ["gpuhub-lead-a"])})
    membership = HubMembership(hub.call, "team-", "default")
    service.schedules.membership = membership
    sched = create(service)
    assert len(run_loop(service, clock, membership, utc("2026-06-01T10:02:30"))) == 2
    # alice leaves team a: the next firing pauses the schedule instead, once.
    hub.groups["alice"] = []
    assert run_loop(service, clock, membership, utc("2026-06-01T10:05:30")) == []
    shown = schedule_view(service.schedules, service.schedules.get(ADMIN, sched.id))
    assert shown["paused"] is True and shown["next_run_at"] is None
    assert shown["last_error"] == "paused: alice is no longer in team a"
    assert shown["last_error_at"] == "2026-06-01T10:03:10Z"
    assert len(workloads_of(service, sched.id)) == 2
    # The owner and the team's leads (by role, and by a group's role) are told, once each.
    now = clock.t
    told = {u: [n.message for n in queries.notices(service.engine.store, u, now)]
            for u in ("alice", "lara", "lou")}
    assert told["alice"] == [f"your schedule nightly ({sched.id}) of team a is paused: alice is "
                             f"no longer in team a. It fires again once resumed."]
    assert told["lara"] == told["lou"] == [
        f"alice's schedule nightly ({sched.id}) of team a is paused: alice is no longer in "
        f"team a. It fires again once resumed."]
    with service.engine.store.session() as s:
        (entry,) = s.scalars(select(AuditEntry).where(
            AuditEntry.target == sched.id, AuditEntry.action == "schedule-auto-pause")).all()
    assert entry.actor == f"schedule {sched.id}"
    assert entry.detail == {"user": "alice", "team": "a", "reason": "alice is no longer in team a",
                            "told": ["alice", "lara", "lou"]}
    # Back in the team and resumed: it fires again, the pause's reason gone.
    hub.groups["alice"] = ["team-a"]
    resumed = service.schedules.resume(ALICE, sched.id)
    assert resumed.last_error is None
    (made,) = run_loop(service, clock, membership, utc("2026-06-01T10:06:30"))
    assert made.name == "nightly-20260601T1006"


@pytest.mark.parametrize("groups, team, reason", [
    (["team-a"], "a", None),
    (["team-a", "team-b"], "a", None),
    ([], "a", "alice is no longer in team a"),
    (["team-b", "gpuhub-admins"], "a", "alice is no longer in team a"),
    (None, "a", "alice is no longer a user of the hub"),
    # The default team is everyone in no other team.
    ([], "default", None),
    (["gpuhub-admins"], "default", None),
    (["team-b"], "default", "alice is no longer in team default (now in team b)"),
    (None, "default", "alice is no longer a user of the hub"),
])
def test_who_may_still_fire_a_schedule_of_a_team(groups, team, reason):
    from gpuspawner.service.schedules.membership import why_refused
    assert why_refused("alice", team, groups, "team-", "default") == reason


def test_a_hub_that_does_not_answer_pauses_nothing(service, clock):
    from gpuspawner.service.schedules.membership import HubMembership
    hub = FakeHub({"alice": []})
    hub.down = True  # not knowing is no refusal: the firings go ahead
    membership = HubMembership(hub.call, "team-", "default")
    service.schedules.membership = membership
    sched = create(service)
    assert len(run_loop(service, clock, membership, utc("2026-06-01T10:02:30"))) == 2
    assert not service.schedules.get(ALICE, sched.id).paused


def test_a_leads_whole_spec_patch_keeps_the_owners_env_values(service):
    """lara, a lead of team a, sees alice's schedule with its env values
    redacted; sending the whole spec back as she saw it (a new command) must
    not write "•••" over alice's WANDB_API_KEY, and a new variable with the
    placeholder as its value is refused, naming it."""
    lara = Identity("lara", teams=frozenset({"a"}), leads=frozenset({"a"}), can_submit=True)
    sched = create(service, spec={**JOB, "env": {"WANDB_API_KEY": "alices-secret",
                                                 "WANDB_MODE": "online"}})
    seen = schedule_view(service.schedules, service.schedules.get(lara, sched.id), "lara")["spec"]
    assert seen["env"] == {"WANDB_API_KEY": "•••", "WANDB_MODE": "•••"}
    changed = {**seen, "command": [sys.executable, "-c", "print('weekly')"],
               "env": {**seen["env"], "WANDB_MODE": "offline"}}
    service.schedules.update(lara, sched.id, {"spec": changed})
    env = service.schedules.get(ALICE, sched.id).spec["env"]
    assert env == {"WANDB_API_KEY": "alices-secret", "WANDB_MODE": "offline"}
    with pytest.raises(SpecError) as e:
        service.schedules.update(lara, sched.id, {"spec": {**changed, "env": {
            **changed["env"], "NEW_TOKEN": "•••"}}})
    assert e.value.field == "spec.env.NEW_TOKEN" and "give the value" in e.value.message
