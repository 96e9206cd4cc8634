"""Thin handlers under /gpuhub/deployments: the service's deployments API
with this server's token, model directories mapped between this server's
files and the replicas' view of them. The service's errors (status,
message, field) pass through as the jobs' handlers pass them."""
from __future__ import annotations

import tornado.web
from jupyter_server.utils import url_path_join

from . import deployspec, jobspec
from .handlers import GpuHubHandler


class DeploymentsHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self):
        listed = (await self.service.list_deployments())["deployments"]
        self.write_json({"deployments": [deployspec.describe(d, self.service_root)
                                         for d in listed]})

    @tornado.web.authenticated
    async def post(self):
        """Deploy a model directory of this server's files (a new deployment,
        or a new revision of one, with ``canary_percent``)."""
        body = deployspec.build_body(self.json_body(), self.root_dir, self.service_root)
        created = await self.service.deploy(body)
        self.log.info("gpuhub_lab: deployed %s/%s from %s", created.get("team"),
                      created.get("name"), body["model_dir"])
        self.write_json(deployspec.describe(created, self.service_root), status=201)


class DeploymentHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self, team: str, name: str):
        view = await self.service.get_deployment(team, name)
        self.write_json(deployspec.describe(view, self.service_root))

    @tornado.web.authenticated
    async def delete(self, team: str, name: str):
        self.write_json(await self.service.delete_deployment(team, name))


class MetricsHandler(GpuHubHandler):
    """Per revision, one point per 5 s over the last ``seconds`` (the service's
    default: 10 minutes), for the live charts."""

    @tornado.web.authenticated
    async def get(self, team: str, name: str):
        seconds = self.get_argument("seconds", None)
        if seconds is not None and not seconds.isdigit():
            raise jobspec.FormError("seconds", "must be a whole number of seconds")
        self.write_json(await self.service.get_deployment_metrics(
            team, name, seconds=None if seconds is None else int(seconds)))


class ActionHandler(GpuHubHandler):
    """promote, rollback, traffic, scale: the service knows the actions and
    refuses the ones that do not apply (no canary to promote, …)."""

    @tornado.web.authenticated
    async def post(self, team: str, name: str, action: str):
        body = self.json_body() if self.request.body else {}
        if action in ("promote", "rollback"):  # no body
            view = await getattr(self.service, f"{action}_deployment")(team, name)
        elif action in ("traffic", "scale"):
            act = {"traffic": self.service.set_deployment_traffic,
                   "scale": self.service.scale_deployment}[action]
            view = await act(team, name, body)
        else:
            raise tornado.web.HTTPError(404, f"a deployment has no action {action!r}; known: "
                                             "promote, rollback, traffic, scale")
        self.write_json(deployspec.describe(view, self.service_root))


class RevisionCancelHandler(GpuHubHandler):
    """Cancel a waiting revision: it never rolls out, the deployment serves on."""

    @tornado.web.authenticated
    async def post(self, team: str, name: str, number: str):
        view = await self.service.cancel_revision(team, name, int(number))
        self.write_json(deployspec.describe(view, self.service_root))


def routes(base: str) -> list[tuple]:
    deployment = url_path_join(base, "deployments", r"(?P<team>[^/]+)", r"(?P<name>[^/]+)")
    return [
        (url_path_join(base, "deployments"), DeploymentsHandler),
        (deployment, DeploymentHandler),
        # before the actions: "metrics" is a GET of its own, not an action
        (url_path_join(deployment, "metrics"), MetricsHandler),
        (url_path_join(deployment, "revisions", r"(?P<number>[0-9]{1,9})", "cancel"),
         RevisionCancelHandler),
        (url_path_join(deployment, r"(?P<action>[^/]+)"), ActionHandler),
    ]
