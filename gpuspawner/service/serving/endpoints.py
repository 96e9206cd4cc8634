"""The deployments' REST API and the router in front of their replicas.

Endpoints live at ``/services/gpuhub/endpoints/{team}/{name}/`` behind the
hub's proxy and take the Open Inference Protocol v2 paths after that
(``v2/models/{name}/infer``). A request needs a JupyterHub token of a member
of the team with ``custom:gpuhub:invoke`` or ``custom:gpuhub:submit`` (a
token made for an external client can carry only ``custom:gpuhub:invoke``
and access to the service).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Optional

from sqlalchemy import select
import aiohttp
from tornado import web
from yarl import URL

from gpuspawner.serving.traffic import Series
from gpuspawner.store import DeploymentRow, RevisionRow
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.errors import Forbidden, NotFound
from gpuspawner.service.api.base import APIHandler
from gpuspawner.service.access.identity import INVOKE
from gpuspawner.service.serving.controller import ServingController
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.workloads.views import iso

# What the router forwards: the Open Inference Protocol's inference, model
# metadata and health routes. MLServer's model repository API (which can
# unload the model) and anything else are not reachable through it. The
# path is checked and forwarded as it came (still percent-encoded), so a
# segment is unreserved characters only, and neither "." nor "..": an encoded
# "/" or ".." that the replica would decode cannot lead it elsewhere.
_SEGMENT = r"(?!\.\.?(?:/|\Z))[A-Za-z0-9._~-]+"
_MODEL = rf"v2/models/{_SEGMENT}(?:/versions/{_SEGMENT})?"
FORWARDED = [("POST", re.compile(_MODEL + "/infer")),
             ("GET", re.compile(_MODEL + "(?:/ready)?")),
             ("GET", re.compile(r"v2/health/(?:live|ready)")),
             ("GET", re.compile(r"v2/?"))]
COLD_START_SECONDS = 60.0
# How long a request waits for a replica that is restarting or scaling up.
WAIT_FOR_REPLICA_SECONDS = 30.0


def endpoint_path(service_prefix: str, team: str, name: str) -> str:
    """A deployment's inference endpoint, under the hub's base URL, as the proxy routes it."""
    return f"{service_prefix}endpoints/{team}/{name}/v2/models/{name}/infer"


def deployment_view(ctl: ServingController, dep: DeploymentRow, revisions: list[RevisionRow],
                    service_prefix: str) -> dict:
    replicas = [r for r in ctl.replicas.values() if r.deployment_id == dep.id]
    return {
        "team": dep.team, "name": dep.name, "user": dep.user, "pool": dep.pool, "gpus": dep.gpus,
        "gpu_share": dep.gpu_share or None,
        "min_replicas": dep.min_replicas, "max_replicas": dep.max_replicas,
        "target_in_flight": dep.target_in_flight, "scale_to_zero_after": dep.scale_to_zero_after,
        "traffic": {int(k): v for k, v in dep.traffic.items()},
        "stable_revision": dep.stable_revision, "canary_revision": ctl.deployments.canary(dep),
        "rollback": dep.rollback, "message": dep.message,
        "endpoint": endpoint_path(service_prefix, dep.team, dep.name),
        "created_at": iso(dep.created_at), "updated_at": iso(dep.updated_at),
        "revisions": [{"number": r.number, "model_dir": r.model_dir, "runtime": r.runtime,
                       "predictor": r.predictor, "created_at": iso(r.created_at),
                       "state": r.state, "reason": r.reason, "after": list(r.after or ()),
                       "created_by": r.created_by,
                       "replicas": sorted((p.workload_id for p in replicas if p.revision == r.number)),
                       "ready_replicas": sum(1 for p in replicas if p.revision == r.number and p.ready),
                       "in_flight": sum(p.in_flight for p in replicas if p.revision == r.number),
                       **ctl.stats(dep.id, r.number)}
                      for r in revisions],
    }


class DeploymentAPI(APIHandler):
    @property
    def ctl(self) -> ServingController:
        return self.settings["serving"]

    def on_finish(self) -> None:
        if self.request.method != "GET":
            self.ctl.reload()  # the router sees a new split at once

    def view(self, team: str, name: str) -> dict:
        with self.facades.records.store.session() as s:
            dep = self.ctl.deployments.find(s, self.identity, team, name)
            return deployment_view(self.ctl, dep, self.ctl.deployments.revisions(s, dep),
                                   self.gpuhub.service_prefix)


class DeploymentsHandler(DeploymentAPI):
    def get(self):
        with self.facades.records.store.session() as s:
            deps = [d for d in s.scalars(select(DeploymentRow).order_by(DeploymentRow.team,
                                                                        DeploymentRow.name))
                    if self.identity.sees_team(d.team)]
            out = [deployment_view(self.ctl, d, self.ctl.deployments.revisions(s, d),
                                   self.gpuhub.service_prefix) for d in deps]
        self.write_json({"deployments": out})

    def post(self):
        spec = parse_deploy(self.json_body(), self.gpuhub.default_pool)
        dep, _number = self.ctl.deployments.deploy(self.identity, spec)
        self.set_header("Location", f"{self.gpuhub.api_prefix}deployments/{dep.team}/{dep.name}")
        self.write_json(self.view(dep.team, dep.name), status=201)


class DeploymentHandler(DeploymentAPI):
    def get(self, team: str, name: str):
        self.write_json(self.view(team, name))

    def delete(self, team: str, name: str):
        self.ctl.deployments.delete(self.identity, team, name)
        self.write_json({"team": team, "name": name, "deleted": True})


class DeploymentMetricsHandler(DeploymentAPI):
    """Per revision, one point per 5 s for the live charts (``seconds``:
    how far back, at most 600)."""

    def get(self, team: str, name: str):
        seconds = self.int_arg("seconds", 600, 5, 600)
        with self.facades.records.store.session() as s:
            dep = self.ctl.deployments.find(s, self.identity, team, name)
            numbers = [r.number for r in self.ctl.deployments.revisions(s, dep)]
        history = self.ctl.history(dep.id, numbers, seconds)
        self.write_json({"interval": Series.interval, "revisions": {
            str(n): [{**p, "t": iso(p["t"])} for p in points] for n, points in history.items()}})


class PromoteHandler(DeploymentAPI):
    """The canary takes all traffic."""

    def post(self, team: str, name: str):
        self.ctl.deployments.promote(self.identity, team, name)
        self.write_json(self.view(team, name))


class RollbackHandler(DeploymentAPI):
    """All traffic back to the stable (or the previous) revision."""

    def post(self, team: str, name: str):
        self.ctl.deployments.rollback(self.identity, team, name)
        self.write_json(self.view(team, name))


class TrafficHandler(DeploymentAPI):
    """``{"traffic": {"1": 80, "2": 20}}``: the split between revisions."""

    def post(self, team: str, name: str):
        body = self.json_body()
        if not isinstance(body, dict) or set(body) != {"traffic"} \
                or not isinstance(body["traffic"], dict):
            raise SpecError("traffic", 'must be an object of revision: percent, e.g. '
                                       '{"traffic": {"1": 80, "2": 20}}')
        self.ctl.deployments.set_traffic(
            self.identity, team, name, body["traffic"], "set-traffic",
            f"traffic set to {body['traffic']} by {self.identity.name}")
        self.write_json(self.view(team, name))


class ScaleHandler(DeploymentAPI):
    """New replica bounds (and the idle time before scaling to zero)."""

    def post(self, team: str, name: str):
        self.ctl.deployments.scale(self.identity, team, name, self.json_body())
        self.write_json(self.view(team, name))


class RevisionCancelHandler(DeploymentAPI):
    """A waiting revision never rolls out; the deployment serves on as it did."""

    def post(self, team: str, name: str, revision: str):
        self.ctl.deployments.cancel_revision(self.identity, team, name, int(revision))
        self.write_json(self.view(team, name))


def request_content_type(given: Optional[str], body: Optional[bytes]) -> str:
    """The Content-Type a replica gets. The inference protocol speaks JSON:
    a body sent without a type, or with the form type ``curl -d`` puts on
    every body, that parses as JSON goes on as JSON (MLServer answers 422
    to anything else)."""
    kind = (given or "").split(";")[0].strip().lower()
    if kind in ("", "application/x-www-form-urlencoded", "text/plain") and body:
        try:
            json.loads(body)
        except ValueError:
            return given or "application/json"
        return "application/json"
    return given or "application/json"


class EndpointHandler(APIHandler):
    """The router: a revision by weight, its least busy ready replica, the
    request passed through; a replica that dropped the connection is marked
    not ready and the request goes to another one. Only the routes in
    FORWARDED pass; others answer 404."""

    invoke_route = True

    @property
    def ctl(self) -> ServingController:
        return self.settings["serving"]

    def check_access(self, team: str) -> None:
        who = self.identity
        if not (who.admin or team in who.teams or team in who.leads):
            raise NotFound(f"no endpoint {team}/…")  # not a member: like it does not exist
        if not (who.can_submit or INVOKE in who.scopes):
            raise Forbidden(f"calling endpoints needs the scope {INVOKE}")

    # The path's last group arrives decoded; route() reads it as it was sent.
    async def get(self, team: str, name: str, _decoded_path: str):
        await self.route(team, name)

    async def post(self, team: str, name: str, _decoded_path: str):
        await self.route(team, name)

    def raw_path(self, team: str, name: str) -> str:
        """The path after the deployment's, as the client sent it (tornado
        hands the handler its path decoded)."""
        head = f"{self.gpuhub.service_prefix}endpoints/{team}/{name}/"
        raw = self.request.path
        return raw[len(head):] if raw.startswith(head) else raw

    async def route(self, team: str, name: str) -> None:
        self.check_access(team)
        path = self.raw_path(team, name)
        if not any(m == self.request.method and rx.fullmatch(path) for m, rx in FORWARDED):
            raise NotFound(f"{self.request.method} {path!r} is not an inference, model metadata "
                           f"or health route of the Open Inference Protocol (v2)")
        dep = self.ctl.by_name.get((team, name))
        if dep is None:
            raise NotFound(f"no deployment {team}/{name}")
        load = self.ctl.load_of(dep.id)
        load.last_request = self.ctl.clock()
        body = self.request.body if self.request.method == "POST" else None
        headers = {"Content-Type": request_content_type(self.request.headers.get("Content-Type"),
                                                        body)}
        for attempt in range(3):
            replica = await self._replica(dep)
            started = time.monotonic()
            replica.in_flight += 1
            try:
                async with self.ctl.session.request(self.request.method,
                                                    URL(f"{replica.url}/{path}", encoded=True),
                                                    data=body,
                                                    headers={**headers, **replica.headers}) as resp:
                    status, answer = resp.status, await resp.read()
                    content_type = resp.headers.get("Content-Type", "application/json")
            except (OSError, aiohttp.ClientError, asyncio.TimeoutError):
                status = None  # refused or reset: the replica went away
            finally:
                replica.in_flight -= 1
            if status is None:  # try another (or the replacement)
                replica.ready = False
                continue
            self.ctl.record(dep, replica, time.monotonic() - started, status)
            self.set_status(status)
            self.set_header("Content-Type", content_type)
            self.set_header("X-GpuHub-Revision", str(replica.revision))
            self.finish(answer)
            return
        raise web.HTTPError(503, f"no replica of {team}/{name} answered")

    async def _replica(self, dep: DeploymentRow):
        replica = self.ctl.choose(dep)
        if replica is not None:
            return replica
        # Scaled to zero, or starting: the controller starts one for the load.
        deadline = time.monotonic() + (COLD_START_SECONDS if dep.scale_to_zero_after
                                       else WAIT_FOR_REPLICA_SECONDS)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            replica = self.ctl.choose(dep)
            if replica is not None:
                return replica
        raise web.HTTPError(503, f"no replica of {dep.team}/{dep.name} is ready yet: "
                                 f"{dep.message or 'starting'}")
