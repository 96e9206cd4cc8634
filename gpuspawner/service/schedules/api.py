"""The schedules' REST handlers (``/schedules``): thin, over
``Schedules`` (service/schedules/schedules.py)."""
from __future__ import annotations

from typing import Optional

from gpuspawner.store import ScheduleRow
from gpuspawner.times import iso
from gpuspawner.service.workloads import views
from gpuspawner.service.workloads.env_access import redact
from gpuspawner.service.api.base import APIHandler
from gpuspawner.vocab.specs import SpecError


def schedule_view(schedules, row: ScheduleRow, viewer: Optional[str] = None) -> dict:
    """``viewer``: who asks; the env's values are only its owner's."""
    spec = row.spec or {}
    if viewer != row.user and spec.get("env"):  # its owner's secrets (env_access.py)
        spec = {**spec, "env": redact(spec["env"])}
    return {"id": row.id, "name": row.name, "team": row.team, "user": row.user,
            "cron": row.cron, "timezone": row.timezone, "spec": spec,
            "paused": row.paused, "catch_up": row.catch_up,
            "next_run_at": iso(None if row.paused else row.next_run_at),
            "last_run_at": iso(row.last_run_at), "last_workload_id": row.last_workload_id,
            "last_error": row.last_error, "last_error_at": iso(row.last_error_at),
            "created_at": iso(row.created_at), "updated_at": iso(row.updated_at),
            "recent": [{**f, "fired_at": iso(f["fired_at"]),
                        "scheduled_for": iso(f["scheduled_for"])}
                       for f in schedules.recent(row.id)]}


class ScheduleAPI(APIHandler):
    @property
    def schedules(self):
        return self.gpuhub.schedules

    def write_schedule(self, row: ScheduleRow, status: int = 200) -> None:
        self.write_json(schedule_view(self.schedules, row, self.identity.name),
                        status=status)


class SchedulesHandler(ScheduleAPI):
    def get(self):
        team = self.get_argument("team", None)
        if team is not None and not (0 < len(team) <= 128):
            raise SpecError("team", "must be a team name")
        self.write_json({"schedules": [schedule_view(self.schedules, r, self.identity.name)
                                       for r in self.schedules.listing(self.identity, team)]})

    def post(self):
        row = self.schedules.create(self.identity, self.json_body())
        self.set_header("Location", f"{self.gpuhub.api_prefix}schedules/{row.id}")
        self.write_schedule(row, status=201)


class ScheduleHandler(ScheduleAPI):
    def get(self, sid: str):
        self.write_schedule(self.schedules.get(self.identity, sid))

    def patch(self, sid: str):
        self.write_schedule(self.schedules.update(self.identity, sid, self.json_body()))

    def delete(self, sid: str):
        self.schedules.delete(self.identity, sid)
        self.set_status(204)
        self.clear_header("Content-Type")
        self.finish()


class PauseHandler(ScheduleAPI):
    def post(self, sid: str):
        self.write_schedule(self.schedules.pause(self.identity, sid))


class ResumeHandler(ScheduleAPI):
    def post(self, sid: str):
        self.write_schedule(self.schedules.resume(self.identity, sid))


class RunHandler(ScheduleAPI):
    def post(self, sid: str):
        row = self.schedules.run_now(self.identity, sid)
        self.set_header("Location", f"{self.gpuhub.api_prefix}workloads/{row.id}")
        self.write_json(views.workload(row, env_values=row.user == self.identity.name), status=201)
