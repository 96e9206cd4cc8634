"""Thin handlers under /gpuhub/sweeps and /gpuhub/schedules: the service's
sweeps and schedules API with this server's token, the files of the forms
and of the outputs mapped between this server's tree and the jobs' view of
it. The service's errors (status, message, field) pass through as the
jobs' handlers pass them."""
from __future__ import annotations

import os

import tornado.web
from jupyter_server.utils import url_path_join

from . import jobspec, workflowspec
from .handlers import SCOPES, GpuHubHandler

SWEEP_ACTIONS = ("cancel", "retry")
SCHEDULE_ACTIONS = ("pause", "resume", "run")


class WorkflowHandler(GpuHubHandler):
    def make_dirs(self, folders: list[str]) -> None:
        for folder in folders:
            os.makedirs(os.path.join(self.root_dir, folder), exist_ok=True)

    async def scoped(self, listed: list[dict]) -> list[dict]:
        """``?scope=mine`` (the default): the caller's own; ``team``: all the
        service lists (the caller's teams)."""
        scope = self.get_argument("scope", "mine")
        if scope not in SCOPES:
            raise jobspec.FormError("scope", f"must be one of {', '.join(SCOPES)}")
        if scope == "team":
            return listed
        me = (await self.me())["name"]
        return [x for x in listed if x.get("user") == me]

    def sweep(self, sweep: dict) -> dict:
        return workflowspec.describe_sweep(sweep, self.service_root)

    def schedule(self, schedule: dict) -> dict:
        return workflowspec.describe_schedule(schedule, self.service_root)


class SweepsHandler(WorkflowHandler):
    @tornado.web.authenticated
    async def get(self):
        listed = (await self.service.list_sweeps())["sweeps"]
        self.write_json({"sweeps": [self.sweep(s) for s in await self.scoped(listed)]})

    @tornado.web.authenticated
    async def post(self):
        form = self.json_body()
        body, folders = workflowspec.build_sweep(form, self.root_dir, self.service_root)
        self.make_dirs(folders)
        created = await self.service.submit_sweep(body)
        self.log.info("gpuhub_lab: submitted sweep %s of %s tasks (%s)", created.get("id"),
                      created.get("total"), form.get("path"))
        self.write_json(self.sweep(created), status=201)


class SweepHandler(WorkflowHandler):
    @tornado.web.authenticated
    async def get(self, sid: str):
        self.write_json(self.sweep(await self.service.get_sweep(sid)))


class SweepActionHandler(WorkflowHandler):
    """cancel (every task not ended) and retry (the failed and cancelled ones)."""

    @tornado.web.authenticated
    async def post(self, sid: str, action: str):
        if action not in SWEEP_ACTIONS:
            raise tornado.web.HTTPError(404, f"a sweep has no action {action!r}; "
                                             f"known: {', '.join(SWEEP_ACTIONS)}")
        sweep = await getattr(self.service, f"{action}_sweep")(sid)
        self.write_json(self.sweep(sweep), status=202)


class SchedulesHandler(WorkflowHandler):
    @tornado.web.authenticated
    async def get(self):
        listed = (await self.service.list_schedules())["schedules"]
        self.write_json({"schedules": [self.schedule(s) for s in await self.scoped(listed)]})

    @tornado.web.authenticated
    async def post(self):
        form = self.json_body()
        body, folders = workflowspec.build_schedule(form, self.root_dir, self.service_root)
        self.make_dirs(folders)
        created = await self.service.create_schedule(body)
        self.log.info("gpuhub_lab: created schedule %s (%s, %s)", created.get("id"),
                      body["cron"], form.get("path"))
        self.write_json(self.schedule(created), status=201)


class ScheduleHandler(WorkflowHandler):
    @tornado.web.authenticated
    async def get(self, cid: str):
        self.write_json(self.schedule(await self.service.get_schedule(cid)))

    @tornado.web.authenticated
    async def patch(self, cid: str):
        body = workflowspec.schedule_patch(self.json_body())
        self.write_json(self.schedule(await self.service.edit_schedule(cid, body)))

    @tornado.web.authenticated
    async def delete(self, cid: str):
        await self.service.delete_schedule(cid)
        self.set_status(204)
        self.finish()


class ScheduleActionHandler(WorkflowHandler):
    """pause and resume (the schedule), run (now: the workload it made)."""

    @tornado.web.authenticated
    async def post(self, cid: str, action: str):
        if action not in SCHEDULE_ACTIONS:
            raise tornado.web.HTTPError(404, f"a schedule has no action {action!r}; "
                                             f"known: {', '.join(SCHEDULE_ACTIONS)}")
        answer = await getattr(self.service, f"{action}_schedule")(cid)
        if action == "run":
            self.write_json(self.describe(answer), status=201)
        else:
            self.write_json(self.schedule(answer))


def routes(base: str) -> list[tuple]:
    sweep = url_path_join(base, "sweeps", r"(?P<sid>[^/]+)")
    schedule = url_path_join(base, "schedules", r"(?P<cid>[^/]+)")
    return [
        (url_path_join(base, "sweeps"), SweepsHandler),
        (sweep, SweepHandler),
        (url_path_join(sweep, r"(?P<action>[^/]+)"), SweepActionHandler),
        (url_path_join(base, "schedules"), SchedulesHandler),
        (schedule, ScheduleHandler),
        (url_path_join(schedule, r"(?P<action>[^/]+)"), ScheduleActionHandler),
    ]
