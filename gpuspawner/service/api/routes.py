"""Every route of the service: the REST API as the OpenAPI document names its paths, the admin
panel's pages, the endpoints' router, OAuth and metrics, with their path parameters."""
from __future__ import annotations

from jupyterhub.services.auth import HubOAuthCallbackHandler

from gpuspawner.service.api import admin as admin_api
from gpuspawner.service.api import cluster
from gpuspawner.service.api import handlers as h
from gpuspawner.service.api.base import NoRouteHandler
from gpuspawner.service.datasets import api as datasets_api
from gpuspawner.service.datasets import page as datasets_page
from gpuspawner.service.panel.pages import PANEL_ROUTES, OverviewPage
from gpuspawner.service.schedules import api as schedules_api
from gpuspawner.service.serving import endpoints
from gpuspawner.service.sweeps import api as sweeps_api
from gpuspawner.service.whatif import api as whatif_api

# The REST API, as the OpenAPI document names its paths.
API_ROUTES = [
    ("/me", h.MeHandler),
    ("/workloads", h.WorkloadsHandler),
    ("/workloads/{id}", h.WorkloadHandler),
    ("/workloads/{id}/cancel", h.CancelHandler),
    ("/workloads/{id}/release", h.ReleaseHandler),
    ("/workloads/{id}/events", h.EventsHandler),
    ("/workloads/{id}/hold", admin_api.HoldHandler),
    ("/workloads/{id}/unhold", admin_api.UnholdHandler),
    ("/workloads/{id}/priority", admin_api.PriorityHandler),
    ("/workloads/{id}/logs", h.LogsHandler),
    ("/sweeps", sweeps_api.SweepsHandler),
    ("/sweeps/{id}", sweeps_api.SweepHandler),
    ("/sweeps/{id}/cancel", sweeps_api.SweepCancelHandler),
    ("/sweeps/{id}/retry", sweeps_api.SweepRetryHandler),
    ("/pools", cluster.PoolsHandler),
    ("/pools/{name}", admin_api.PoolHandler),
    ("/nodes/{name}", admin_api.NodeHandler),
    ("/nodes/{name}/gpus/{index}", admin_api.NodeGpuHandler),
    ("/deployments", endpoints.DeploymentsHandler),
    ("/deployments/{team}/{name}", endpoints.DeploymentHandler),
    ("/deployments/{team}/{name}/metrics", endpoints.DeploymentMetricsHandler),
    ("/deployments/{team}/{name}/promote", endpoints.PromoteHandler),
    ("/deployments/{team}/{name}/rollback", endpoints.RollbackHandler),
    ("/deployments/{team}/{name}/traffic", endpoints.TrafficHandler),
    ("/deployments/{team}/{name}/scale", endpoints.ScaleHandler),
    ("/deployments/{team}/{name}/revisions/{revision}/cancel", endpoints.RevisionCancelHandler),
    ("/teams", cluster.TeamsHandler),
    ("/teams/{name}", cluster.TeamHandler),
    ("/usage", cluster.UsageHandler),
    ("/gpus", cluster.GpusHandler),
    ("/notices", cluster.NoticesHandler),
    ("/notices/{nid}", cluster.NoticeHandler),
    ("/audit", cluster.AuditHandler),
    ("/history/trace", whatif_api.TraceExportHandler),
    ("/whatif", whatif_api.PreviewsHandler),
    ("/whatif/{id}", whatif_api.PreviewHandler),
    ("/whatif/{id}/cancel", whatif_api.PreviewCancelHandler),
    ("/whatif/{id}/apply", whatif_api.PreviewApplyHandler),
    ("/schedules", schedules_api.SchedulesHandler),
    ("/schedules/{id}", schedules_api.ScheduleHandler),
    ("/schedules/{id}/pause", schedules_api.PauseHandler),
    ("/schedules/{id}/resume", schedules_api.ResumeHandler),
    ("/schedules/{id}/run", schedules_api.RunHandler),
    ("/datasets", datasets_api.DatasetsHandler),
    ("/datasets/{name}", datasets_api.DatasetHandler),
    ("/datasets/{name}/shares/{team}", datasets_api.DatasetShareHandler),
    ("/workloads/{id}/datasets", datasets_api.ServerDatasetsHandler),
    ("/openapi.json", cluster.OpenAPIHandler),
    ("/health", cluster.HealthHandler),
]
PATH_PARAMS = {"{id}": r"([A-Za-z0-9_-]{1,32})", "{name}": r"([A-Za-z0-9._-]{1,128})",
               "{nid}": r"([0-9]{1,12})", "{index}": r"([0-9]{1,4})",
               "{team}": r"([A-Za-z0-9._-]{1,128})", "{deployment}": r"([a-z0-9-]{1,63})",
               "{revision}": r"([0-9]{1,9})",
               "{path}": r"(.*)", "{rest}": r".*"}


def route_regex(path: str) -> str:
    out = path.replace(".", r"\.")
    for param, regex in PATH_PARAMS.items():
        out = out.replace(param, regex)
    return out


def service_routes() -> list[tuple[str, type]]:
    """Every route of the service, under its prefix, with its path
    parameters named as in PATH_PARAMS (``make_app`` turns them into
    regexes; tests fill them in to try each route)."""
    return ([("api/v1" + path, handler) for path, handler in API_ROUTES]
            + [("api/v1/{rest}", NoRouteHandler),
               ("oauth_callback", HubOAuthCallbackHandler),
               ("metrics", cluster.MetricsHandler)]
            + [("admin/" + path, handler) for path, handler in PANEL_ROUTES]
            + [("admin/datasets", datasets_page.DatasetsPage)]
            + [("endpoints/{team}/{deployment}/{path}", endpoints.EndpointHandler),
               ("", OverviewPage)])
