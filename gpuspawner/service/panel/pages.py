"""The admin panel's pages (``/services/gpuhub/admin/``): cluster, teams &
quotas, queue, usage & cost, audit. Each GET gathers what the page shows;
each POST is one admin action through ``operations`` or the engine, then
back to the page."""
from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Optional
from urllib.parse import quote, urlencode

from jupyterhub.services.auth import HubOAuth
from markupsafe import Markup
from sqlalchemy import func, select
from tornado.httpclient import HTTPClientError

from gpuspawner.isolation.gpu_rules import LimitError
from gpuspawner.isolation.resources import parse_ceilings
from gpuspawner.scheduler.model import JOB, Quota
from gpuspawner.sim.whatif import KNOBS
from gpuspawner.store import Attempt, AuditEntry, DeploymentRow, QuotaRow, WorkloadRow
from gpuspawner.store.audit import verify
from gpuspawner.service.workloads import operations as ops
from gpuspawner.service.loop import journal
from gpuspawner.service.workloads import queries
from gpuspawner.service.workloads import views
from gpuspawner.service.teams.accounting import GROUPS
from gpuspawner.service.teams import storage_quotas
from gpuspawner.service.teams.storage_quotas import parse_storage_quota
from gpuspawner.service.errors import Conflict, Forbidden
from gpuspawner.vocab.times import parse_time
from gpuspawner.vocab.states import HELD, QUEUED, RUNNING, STOPPING, WAITING
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.teams.usage import culls, usage_report
from gpuspawner.service.panel import charts, glance, whatif_pages
from gpuspawner.service.panel.base import FORM_ERRORS, PanelHandler
from gpuspawner.service.panel.cluster import cluster_model
from gpuspawner.service.panel.queue_rows import (PAGED, QUEUE_PAGE_ROWS, page_cursor,
                                                 queue_rows, queued_count, recent_preemptions)

DAY = 86400.0


def ago(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 90:
        return f"{s}s"
    if s < 5400:
        return f"{s // 60}m"
    if s < 2 * DAY:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


# ---- cluster -------------------------------------------------------------------------------

class ClusterPage(PanelHandler):
    page, audience = "cluster", "admin"

    async def get(self):
        await self.show()

    async def show(self, status: int = 200, **extra):
        sample = self.gpuhub.gpu_sample()
        model = cluster_model(queries.pools_view(self.cluster, self.store, self.identity),
                              queries.gpus_view(self.cluster, self.store, sample))
        template = "_heatmap.html" if self.get_argument("fragment", "") else "cluster.html"
        self.render_page(template, status, pools=model,
                         enforcement=self.gpuhub.enforcement_report(), **extra)

    async def post(self):
        action, node = self.form("action", ""), self.form("node", "")
        reason = self.form("reason", "")

        def act():
            if action in ("drain", "undrain"):
                ops.set_drained(self.steering, self.identity, node, action == "drain", reason)
                return f"node {node} {action}ed"
            if action in ("gpu-out", "gpu-in"):
                index = self.form("gpu", "")
                if not index.isdigit():
                    raise SpecError("gpu", "must be a GPU number")
                ops.set_gpu_in_service(self.steering, self.identity, node, int(index),
                                       action == "gpu-in", reason)
                return f"GPU {node}/{index} " + ("back in service" if action == "gpu-in"
                                                 else "out of service")
            raise SpecError("action", f"unknown action {action!r}")

        await self.form_action(act, self.show)


# ---- teams ---------------------------------------------------------------------------------

QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")
# Ceilings on what the team's work asks for besides GPUs (empty: no limit).
RESOURCE_FIELDS = ("cpus", "memory")


def parse_quota_form(pools: list[str], values: dict[str, str], weight_only: bool = False
                     ) -> tuple[float, Optional[dict[str, Quota]]]:
    """The team form (``weight``, ``<pool>.<field>``) as a weight and quotas;
    empty borrowing/lending limits mean "no limit". ``weight_only``: the
    default team's form, whose quota follows the other teams'."""
    raw = values.get("weight", "").strip()
    try:
        weight = float(raw)
    except ValueError:
        raise SpecError("weight", f"must be a number, got {raw!r}")
    if not 0 < weight <= 1000:
        raise SpecError("weight", f"must be in (0, 1000], got {raw}")
    if weight_only:
        return weight, None
    quotas = {}
    for pool in pools:
        numbers: dict[str, Optional[int]] = {}
        for name in QUOTA_FIELDS:
            text = values.get(f"{pool}.{name}", "").strip()
            if text == "" and name != "nominal":
                numbers[name] = None
                continue
            if not text.isdigit():
                raise SpecError(f"quotas.{pool}.{name}", f"must be a whole number of GPUs"
                                f"{'' if name == 'nominal' else ' or empty (no limit)'}, "
                                f"got {text!r}")
            numbers[name] = int(text)
        ceilings = {f: values.get(f"{pool}.{f}", "").strip() or None for f in RESOURCE_FIELDS}
        try:
            cpus, memory = parse_ceilings(
                {**ceilings, "cpus": _number(ceilings["cpus"])}, f"quotas.{pool}")
        except LimitError as e:
            field_name, _, message = str(e).partition(": ")
            raise SpecError(field_name, message) from None
        quotas[pool] = Quota(**numbers, cpus=cpus, memory=memory)
    return weight, quotas


def _number(text: Optional[str]):
    """A number typed in a form (left as typed when it is none: the check names it)."""
    try:
        return None if text is None else float(text)
    except ValueError:
        return text


TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
USER_NAME = re.compile(r"[^/\s]{1,255}")


class TeamsPage(PanelHandler):
    """Teams (hub groups ``team-<name>``) and their quotas: admins create a
    team, add and remove its members (through the hub's API) and set its
    quotas; leads see their teams."""

    page, audience = "teams", "lead"

    async def get(self):
        await self.show()

    async def show(self, status: int = 200, **extra):
        teams = self.teams_view()
        for t in teams:
            t["members"] = [] if t["default"] else await self.gpuhub.hub.group_members(t["group"])
        capacity = dict(self.facades.cluster.state.capacity)
        with self.facades.records.store.session() as s:
            nominal = dict(s.execute(select(QuotaRow.pool, func.sum(QuotaRow.nominal))
                                     .group_by(QuotaRow.pool)).all())
        self.render_page("teams.html", status, teams=teams, pools=sorted(capacity),
                         capacity=capacity, nominal=nominal, fields=QUOTA_FIELDS + RESOURCE_FIELDS,
                         warnings=self.get_arguments("warning"), periods=whatif_pages.PERIODS,
                         knobs=KNOBS, storage_default=self.gpuhub.storage_quotas.default,
                         recent=self.gpuhub.previews.recent(self.identity),
                         typed=extra.pop("typed", {}), **extra)

    async def post(self):
        action = self.form("action", "save")
        team = self.form("team", "").strip()
        typed = {k: self.get_body_argument(k) for k in self.request.body_arguments}

        async def again(**kw):
            await self.show(error_team=team, typed=typed, **kw)

        if action == "save":
            pools = sorted(self.facades.cluster.state.capacity)
            warnings: list[tuple[str, str]] = []
            is_default = team == self.gpuhub.default_team

            def act():
                weight, quotas = parse_quota_form(pools, typed, weight_only=is_default)
                warnings.extend(("warning", w) for w in
                                ops.set_team(self.steering, self.identity, team, weight, quotas))
                return f"team {team} saved; the next scheduling cycle uses it"

            await self.form_action(act, again, warnings)
        elif action == "preview":
            try:
                pid = await whatif_pages.start_from_form(self, typed)
            except tuple(FORM_ERRORS) as e:
                await again(status=getattr(e, "status", None) or next(
                    code for kind, code in FORM_ERRORS.items() if isinstance(e, kind)),
                    error=str(e), error_field=getattr(e, "field", ""))
                return
            self.redirect(f"{self.panel_url}whatif/{pid}", status=303)
        elif action in ("create", "add-member", "remove-member"):
            await self.form_action(lambda: self.change_team(action, team), again)
        elif action == "storage-quota":
            await self.form_action(lambda: self.set_storage_quota(team), again)
        else:
            await again(status=400, error=f"action: unknown action {action!r}",
                        error_field="action")

    async def change_team(self, action: str, team: str) -> str:
        """Create a team (its hub group and its quota row) or change its
        members; audited like every admin action."""
        if not self.identity.admin:
            raise Forbidden("changing teams needs the scope custom:gpuhub:admin")
        prefix = self.gpuhub.team_group_prefix
        group = prefix + team
        if action == "create":
            if not TEAM_NAME.fullmatch(team):
                raise SpecError("team", "a team name is 1 to 63 lowercase letters, digits, '.', "
                                        "'_' or '-', starting with a letter or digit")
            if any(t["name"] == team for t in self.teams_view()):
                raise Conflict(f"team {team} exists already")
            try:
                await self.gpuhub.hub.call("POST", f"/groups/{quote(group)}")
            except HTTPClientError as e:
                if e.code != 409:  # the group may exist without a team
                    raise Conflict(f"the hub did not create group {group}: {_hub_error(e)}")
            ops.set_team(self.steering, self.identity, team, None, None)
            self._audit("create-team", team, {"group": group})
            return (f"team {team} created (hub group {group}); add its members and give it a "
                    f"nominal quota below")
        user = self.form("user", "").strip()
        if not USER_NAME.fullmatch(user):
            raise SpecError("user", "name the user to add or remove")
        if team == self.gpuhub.default_team or not any(
                t["name"] == team for t in self.teams_view()):
            raise SpecError("team", f"{team!r} is not a team whose members can change")
        method = "POST" if action == "add-member" else "DELETE"
        try:
            await self.gpuhub.hub.call(method, f"/groups/{quote(group)}/users", {"users": [user]})
        except HTTPClientError as e:
            if e.code in (400, 404):
                raise SpecError("user", f"the hub has no user {user!r} (a user exists once "
                                        f"an admin approved them and they logged in, or an "
                                        f"admin added them at /hub/admin)")
            raise Conflict(f"the hub did not change group {group}: {_hub_error(e)}")
        self.gpuhub.hub.forget_groups(user)
        self._audit(action, team, {"user": user})
        return (f"{user} added to team {team}" if action == "add-member"
                else f"{user} removed from team {team}")

    def set_storage_quota(self, team: str) -> str:
        """The team's own storage quota (teams/storage_quotas.py), audited."""
        quotas = self.gpuhub.storage_quotas
        typed = self.form("storage_quota", "")
        size = parse_storage_quota("none" if typed.lower() == "none" else typed)
        quota = quotas.set(self.steering, self.identity, team, size)
        return storage_quotas.saved(team, quota, size is not None,
                                    self.facades.cluster.storage_view(team))

    def _audit(self, action: str, target: str, detail: dict) -> None:
        with self.facades.records.store.transaction() as s:
            journal.audit(s, self.facades.records.clock(), self.identity.name, action, target, detail)


def _hub_error(e: HTTPClientError) -> str:
    try:
        return json.loads(e.response.body).get("message") or str(e)
    except (AttributeError, ValueError, TypeError):
        return str(e)


# ---- queue ---------------------------------------------------------------------------------

class QueuePage(PanelHandler):
    page, audience = "queue", "lead"

    async def get(self):
        await self.show()

    async def show(self, status: int = 200, **extra):
        now = self.facades.records.clock()
        teams = self.teams
        # Each paged section's cursor as the page's links carry it ("": its first page).
        cursors = {state: self.get_argument(arg, "") for state, arg in PAGED.items()}
        after = {state: page_cursor(PAGED[state], raw) for state, raw in cursors.items() if raw}
        with self.facades.records.store.session() as s:
            rows, counts, next_cursors = queue_rows(s, teams, {QUEUED: queued_count(
                self.facades.cluster.state, teams)}, after)
            attempts = {(a.workload_id, a.number): a for a in s.scalars(
                select(Attempt).where(Attempt.workload_id.in_([r.id for r in rows]),
                                      Attempt.state == "running"))}
            preemptions = [{"time": views.iso(e.time), "ago": ago(now - e.time), "id": w.id,
                            "name": w.name, "team": w.team, "user": w.user,
                            "message": e.message}
                           for e, w in recent_preemptions(s, teams, now - 7 * DAY)]
        waiting, queued, held, running = [], [], [], []
        positions = queries.queue_positions(self.facades.cluster.state,
                                            {r.id for r in rows if r.state == QUEUED})
        for r in rows:
            item = {**views.workload(r), "waited": ago(now - r.submitted_at)}
            if r.state == WAITING:  # for other work (after) or its sweep's cap: no GPUs yet
                waiting.append(item)
            elif r.state == QUEUED:
                item["position"] = positions.get(r.id)
                queued.append(item)
            elif r.state == HELD:
                held.append(item)
            else:
                a = attempts.get((r.id, r.attempt))
                item["gpus_held"] = ", ".join(f"{n}:{','.join(map(str, g))}"
                                              for n, g in (a.placement if a else []))
                item["ran"] = ago(now - (a.started_at if a else r.started_at or now))
                running.append(item)
        queued.sort(key=lambda w: (w["team"], w["position"] or 1 << 30))
        self.render_page("queue.html", status, waiting=waiting, queued=queued, held=held,
                         running=running, counts=counts, shown=QUEUE_PAGE_ROWS,
                         paging=self.paging(cursors, next_cursors),
                         preemptions=preemptions,
                         priorities=sorted(self.facades.cluster.policy.priority_classes), **extra)

    def paging(self, cursors: dict[str, str], next_cursors: dict[str, Optional[str]]) -> dict:
        """Each paged section's links: its next page (None: this is its last)
        and its first (None: this is it), the other sections' pages kept."""
        def url(state: str, cursor: Optional[str]) -> str:
            query = {PAGED[k]: v for k, v in {**cursors, state: cursor}.items() if v}
            return f"{self.panel_url}queue" + (f"?{urlencode(query)}" if query else "")

        return {state: {"next": next_cursors[state] and url(state, next_cursors[state]),
                        "first": cursors[state] and url(state, None)}
                for state in PAGED}

    async def post(self):
        action, wid = self.form("action", ""), self.form("id", "")

        def act():
            if action == "cancel":
                self.facades.submissions.cancel(self.identity, wid)
                return f"{wid} cancelled"
            if action == "hold":
                ops.hold(self.steering, self.identity, wid)
                return f"{wid} held"
            if action == "unhold":
                ops.release_hold(self.steering, self.identity, wid)
                return f"{wid} released into the queue"
            if action == "priority":
                priority = self.form("priority", "")
                ops.set_priority(self.steering, self.identity, wid, priority)
                return f"{wid} now has priority {priority}"
            raise SpecError("action", f"unknown action {action!r}")

        # The forms post to the page as shown: back to the same pages after.
        here = [(arg, self.get_query_argument(arg, "")) for arg in PAGED.values()]
        await self.form_action(act, self.show, extra=[(arg, v) for arg, v in here if v])


# ---- usage ---------------------------------------------------------------------------------

def day_start(t: float) -> float:
    d = dt.datetime.fromtimestamp(t, dt.timezone.utc).date()
    return dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc).timestamp()


class UsagePage(PanelHandler):
    page, audience = "usage", "lead"

    async def get(self):
        await self.show()

    async def show(self, status: int = 200, **extra):
        now = self.facades.records.clock()
        try:
            start = parse_time(self.get_argument("from", None), "from", day_start(now) - 6 * DAY)
            to_arg = self.get_argument("to", None)
            end = parse_time(to_arg, "to", now)
            if to_arg and len(to_arg) == 10:
                end += DAY  # a date "to" includes that whole day
            group_by = self.get_argument("group_by", "team")
            if group_by not in GROUPS:
                raise SpecError("group_by", f"unknown grouping {group_by!r}")
            if end <= start:
                raise SpecError("to", "must be after 'from'")
        except SpecError as e:
            start, end, group_by = day_start(now) - 6 * DAY, now, "team"
            extra.update(error=str(e), error_field=e.field)
            status = 400
        end = min(end, now)
        with self.facades.records.store.session() as s:
            report = usage_report(s, start, end, now, group_by, self.teams, series_by=group_by,
                                  resource_prices=self.gpuhub.resource_prices())
            cull = culls(s, start, end) if self.identity.admin else None
        series = report["series"]
        labels = [t[5:16].replace("T", " ") if series["bucket_seconds"] < DAY else t[:10]
                  for t in series["starts"]]
        hours = {(k or "(none)"): v for k, v in series["gpu_hours"].items()}
        bar_items = [(r[group_by] or "(none)", r["gpu_hours"]) for r in report["rows"]]
        colours = charts.colours_for(hours)
        costs = {(r[group_by] or "(none)"): f"{r['cost']:.2f} {self.gpuhub.currency}"
                 for r in report["rows"]}
        query = {"from": views.iso(start), "to": views.iso(end), "group_by": group_by}
        self.render_page(
            "usage.html", status, report=report, group_by=group_by, groups=GROUPS,
            start_date=views.iso(start)[:10], end_date=views.iso(max(start, end - 1))[:10],
            area=Markup(charts.stacked_area(labels, hours, colours=colours,
                                            title=f"GPU-hours per {group_by} over time")),
            bars=Markup(charts.bars(bar_items, note=costs, colours=colours,
                                    title=f"GPU-hours per {group_by}")),
            csv_url=f"{self.gpuhub.api_prefix}usage?{urlencode({**query, 'format': 'csv'})}",
            culls=cull, prices=report["prices"], per_team=group_by == "team", **extra)

    async def post(self):
        pool, raw = self.form("pool", ""), self.form("price", "").strip()

        def act():
            try:
                price = float(raw)
            except ValueError:
                raise SpecError("price_per_gpu_hour", f"must be a number, got {raw!r}")
            ops.set_price(self.steering, self.identity, pool, price)
            return f"pool {pool} now costs {price:g} {self.gpuhub.currency} per GPU-hour"

        await self.form_action(act, self.show)


# ---- audit ---------------------------------------------------------------------------------

AUDIT_FILTERS = ("action", "actor", "target")


def audit_query(handler: PanelHandler):
    q = select(AuditEntry)
    for name in AUDIT_FILTERS:
        value = handler.get_argument(name, "").strip()
        if value:
            q = q.where(getattr(AuditEntry, name) == value)
    for name, op in (("from", "__ge__"), ("to", "__le__")):
        raw = handler.get_argument(name, "")
        if raw:
            t = parse_time(raw, name, 0.0) + (DAY if name == "to" and len(raw) == 10 else 0)
            q = q.where(getattr(AuditEntry.time, op)(t))
    return q


class AuditPage(PanelHandler):
    page, audience = "audit", "admin"

    async def get(self):
        limit = self.get_argument("limit", "200")
        if not limit.isdigit() or not 1 <= int(limit) <= 5000:
            raise SpecError("limit", "must be an integer between 1 and 5000")
        try:
            q = audit_query(self)
        except SpecError as e:
            q, error = select(AuditEntry), str(e)
        else:
            error = ""
        with self.facades.records.store.session() as s:
            entries = s.scalars(q.order_by(AuditEntry.id.desc()).limit(int(limit))).all()
            problem = verify(s.scalars(select(AuditEntry).order_by(AuditEntry.id)))
            actions = sorted(set(s.scalars(select(AuditEntry.action).distinct())))
        filters = {k: self.get_argument(k, "") for k in (*AUDIT_FILTERS, "from", "to")}
        self.render_page("audit.html", 400 if error else 200, error=error,
                         entries=[{**views.audit(e), "detail_json": json.dumps(e.detail or {},
                                                                               sort_keys=True)}
                                  for e in entries],
                         chain_problem=problem, actions=actions, filters=filters,
                         export_url=f"{self.panel_url}audit.jsonl?"
                                    f"{urlencode({k: v for k, v in filters.items() if v})}")


class AuditExport(PanelHandler):
    """The filtered audit log as JSON lines (oldest first), with each
    entry's hash so an export can be checked against the chain."""

    page, audience = "audit", "admin"

    def get(self):
        with self.facades.records.store.session() as s:
            entries = s.scalars(audit_query(self).order_by(AuditEntry.id)).all()
        self.set_header("Content-Type", "application/x-ndjson; charset=UTF-8")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.facades.records.clock()))
        self.set_header("Content-Disposition", f'attachment; filename="gpuhub-audit-{stamp}.jsonl"')
        for e in entries:
            self.write(json.dumps({**views.audit(e), "hash": e.hash}, sort_keys=True) + "\n")
        self.finish()


class OverviewPage(PanelHandler):
    """/services/gpuhub/ ("Services → gpuhub" in the hub's menu), for
    everyone: your teams' quotas, your GPUs and work at a glance, and where
    the admin panel, the API and the CLI are. ``?embed=1``: the glance
    alone, which the hub's home page shows. Besides the active work: the
    jobs that ended in the last day, and the teams' deployments."""

    audience = "user"

    def get(self):
        who = self.identity
        teams = [t for t in self.teams_view(who) if t["name"] in who.teams]
        now = self.facades.records.clock()
        serving = self.settings["serving"]
        with self.facades.records.store.session() as s:
            rows = s.scalars(select(WorkloadRow).where(
                WorkloadRow.user == who.name,
                WorkloadRow.state.in_((QUEUED, HELD, RUNNING, STOPPING)))
                .order_by(WorkloadRow.submitted_at)).all()
            ended = s.scalars(select(WorkloadRow).where(
                WorkloadRow.user == who.name, WorkloadRow.kind == JOB,
                WorkloadRow.finished_at >= now - glance.RECENT_SECONDS)
                .order_by(WorkloadRow.finished_at.desc()).limit(glance.RECENT_JOBS)).all()
            deps = s.scalars(select(DeploymentRow).where(DeploymentRow.team.in_(sorted(who.teams)))
                             .order_by(DeploymentRow.team, DeploymentRow.name)).all()
        mine = [views.workload(r) for r in rows]

        def replicas(dep_id: int) -> tuple[int, int]:
            return (len(serving.ready_replicas(dep_id)),
                    sum(1 for r in serving.replicas.values() if r.deployment_id == dep_id))

        template = "embed.html" if self.get_argument("embed", "") else "overview.html"
        self.render_page(template, title="Overview", teams=teams, workloads=mine,
                         gpus=sum(w["gpu_share"] or w["gpus"] for w in mine
                                  if w["state"] == RUNNING),
                         finished=glance.finished_jobs(ended, self.facades.paths.workspace_path(who.name),
                                                       now, ago),
                         deployments=glance.deployments(deps, replicas, self.gpuhub.service_prefix),
                         origin=f"{self.request.protocol}://{self.request.host}",
                         hub_prefix=HubOAuth.instance().hub_prefix)


class PanelIndex(PanelHandler):
    """/admin/: the first page this person may see."""

    audience = "lead"

    def get(self):
        self.redirect(self.panel_url + ("cluster" if self.identity.admin else "queue"))


PANEL_ROUTES = [("", PanelIndex), ("cluster", ClusterPage), ("teams", TeamsPage),
                ("queue", QueuePage), ("usage", UsagePage), ("audit", AuditPage),
                ("audit.jsonl", AuditExport), ("whatif/{id}", whatif_pages.PreviewPage)]
