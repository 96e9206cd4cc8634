"""Thin handlers under /gpuhub/deployments: the service's deployments API
with this server's token, model directories mapped between this server's
files and the replicas' view of them. The service's errors (status,
message, field) pass through as the jobs' handlers pass them."""
from __future__ import annotations

import tornado.web
from jupyter_server.utils import url_path_join

from . import deployspec
from .handlers import GpuHubHandler
from .service import seg


def _path(team: str, name: str, *rest: str) -> str:
    return "/".join(["/deployments", seg(team), seg(name), *rest])


class DeploymentsHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self):
        listed = (await self.service.call("GET", "/deployments"))["deployments"]
        self.write_json({"deployments": [deployspec.describe(d, self.service_root)
                                         for d in listed]})

    @tornado.web.authenticated
    async def post(self):
        """Deploy a model directory of this server's files (a new deployment,
        or a new revision of one, with ``canary_percent``)."""
        body = deployspec.build_body(self.json_body(), self.root_dir, self.service_root)
        created = await self.service.call("POST", "/deployments", body=body)
        self.log.info("gpuhub_lab: deployed %s/%s from %s", created.get("team"),
                      created.get("name"), body["model_dir"])
        self.write_json(deployspec.describe(created, self.service_root), status=201)


class DeploymentHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self, team: str, name: str):
        view = await self.service.call("GET", _path(team, name))
        self.write_json(deployspec.describe(view, self.service_root))

    @tornado.web.authenticated
    async def delete(self, team: str, name: str):
        self.write_json(await self.service.call("DELETE", _path(team, name)))


class MetricsHandler(GpuHubHandler):
    """Per revision, one point per 5 s over the last ``seconds`` (the service's
    default: 10 minutes), for the live charts."""

    @tornado.web.authenticated
    async def get(self, team: str, name: str):
        seconds = self.get_argument("seconds", None)
        params = [] if seconds is None else [("seconds", seconds)]
        self.write_json(await self.service.call("GET", _path(team, name, "metrics"), params))


class ActionHandler(GpuHubHandler):
    """promote, rollback, traffic, scale: the service knows the actions and
    refuses the ones that do not apply (no canary to promote, …)."""

    @tornado.web.authenticated
    async def post(self, team: str, name: str, action: str):
        # The service reads no body for promote and rollback, but tornado's
        # client sends no POST without one: an empty object stands in.
        body = self.json_body() if self.request.body else {}
        view = await self.service.call("POST", _path(team, name, seg(action)), body=body)
        self.write_json(deployspec.describe(view, self.service_root))


def routes(base: str) -> list[tuple]:
    deployment = url_path_join(base, "deployments", r"(?P<team>[^/]+)", r"(?P<name>[^/]+)")
    return [
        (url_path_join(base, "deployments"), DeploymentsHandler),
        (deployment, DeploymentHandler),
        # before the actions: "metrics" is a GET of its own, not an action
        (url_path_join(deployment, "metrics"), MetricsHandler),
        (url_path_join(deployment, r"(?P<action>[^/]+)"), ActionHandler),
    ]
