"""GPU Hub's part of the hub configuration when JupyterHub runs from the
Zero to JupyterHub (z2jh) chart, as the GPU Hub Helm chart deploys it.

The chart's ``jupyterhub.hub.extraConfig.gpuhub`` runs, in the hub pod::

    import z2jh
    from gpuspawner.hub.chart import configure_z2jh
    configure_z2jh(c, z2jh.get_config("custom.gpuhub", {}))

By then z2jh has set up the proxy, the hub's database, KubeSpawner's base
settings and ``c.JupyterHub.services`` from ``hub.services``, with the API
tokens it generated and keeps in its Secret (``hub.services.<name>.apiToken``).
This adds what ``hub_config/kubernetes/jupyterhub_config.py`` adds to a
hand-made deployment: the GPU-aware spawner and its pools, the scheduler
service with its scopes and roles, the spawner's token, the culler, the notice
banner and the admin-panel link, keeping whatever else z2jh or the site
configured (other services, roles, templates).

``settings`` are the values under ``jupyterhub.custom.gpuhub`` (camelCase, as
in the chart's values.yaml).
"""
from __future__ import annotations

import sys
from typing import Any

from . import config as gpuhub

DEFAULT_SERVICE_URL = "http://gpuhub-service:10101"
DEFAULT_PUBLIC_URL = "http://proxy-public/services/gpuhub"
DEFAULT_INITIAL_USERS = "/usr/local/etc/gpuhub/initial-users/initial-users.json"
OURS = ("gpuhub", "gpuhub-spawner", "gpuhub-culler")


class ChartConfigError(RuntimeError):
    """The chart's values leave the hub without something GPU Hub needs."""


def _token(services: dict, name: str) -> str:
    service = services.get(name)
    if not service or not service.get("api_token"):
        raise ChartConfigError(
            f"jupyterhub.hub.services.{name} is missing: GPU Hub needs it so that the z2jh chart "
            f"generates its API token (hub.services.{name}.apiToken in the hub Secret); "
            f"the chart's values.yaml declares it")
    return service["api_token"]


def configure_z2jh(c, settings: dict[str, Any] | None = None) -> None:
    settings = dict(settings or {})
    before = list(c.JupyterHub.get("services") or [])
    services = {s["name"]: s for s in before}
    service_token = _token(services, "gpuhub")
    spawner_token = _token(services, "gpuhub-spawner")
    other_services = [s for s in before if s["name"] not in OURS]
    other_roles = list(c.JupyterHub.get("load_roles") or [])
    templates = list(c.JupyterHub.get("template_paths") or [])
    template_vars = dict(c.JupyterHub.get("template_vars") or {})

    auth = settings.get("auth") or {}
    if auth.get("native", True):
        # NativeAuthenticator with the first users (and their passwords) of an
        # optional Secret; otherwise the site's authenticator from hub.config.
        # (Its team leads' roles are kept by configure below.)
        gpuhub.configure_auth(c, auth.get("initialUsersFile", DEFAULT_INITIAL_USERS))

    url = (settings.get("serviceUrl") or services["gpuhub"].get("url")
           or DEFAULT_SERVICE_URL).rstrip("/")
    gpuhub.configure(c, service={"url": url, "api_token": service_token},
                     service_api=f"{url}/services/gpuhub/api/v1", spawner_token=spawner_token)

    # The culler runs in the hub pod, as a hub-managed service.
    culler = settings.get("culler") or {}
    if not culler.get("enabled", True):
        c.JupyterHub.services = [s for s in c.JupyterHub.services if s["name"] != "gpuhub-culler"]
        c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles
                                   if r["name"] != "gpuhub-culler"]
    elif culler.get("args"):
        for s in c.JupyterHub.services:
            if s["name"] == "gpuhub-culler":
                s["command"] = [sys.executable, "-m", "gpuspawner.culler", *culler["args"]]

    # What z2jh and the site configured besides GPU Hub stays; GPU Hub's
    # roles (same names) win, since its scopes depend on them.
    ours = {r["name"] for r in c.JupyterHub.load_roles}
    c.JupyterHub.load_roles += [r for r in other_roles if r["name"] not in ours]
    c.JupyterHub.services += other_services
    # The admin-panel link (templates/page.html) first, then the site's.
    c.JupyterHub.template_paths = c.JupyterHub.template_paths + [
        p for p in templates if p not in c.JupyterHub.template_paths]
    c.JupyterHub.template_vars = {**template_vars, **c.JupyterHub.template_vars}

    # Notebook servers: pods on the GPUs the scheduler admitted them with.
    c.JupyterHub.spawner_class = "gpuspawner.spawner.kube.KubeGPUSpawner"
    c.GPUSpawnerMixin.gpuhub_public_url = settings.get("publicUrl") or DEFAULT_PUBLIC_URL
    c.KubeGPUSpawner.gpu_pools = settings.get("gpuPools") or {}
    c.KubeGPUSpawner.priority_class_names = settings.get("priorityClassNames") or {}
    c.KubeGPUSpawner.pin_to_scheduled_node = bool(settings.get("pinToScheduledNode", True))
    if settings.get("podStartTimeout"):
        c.KubeGPUSpawner.pod_start_timeout = int(settings["podStartTimeout"])
