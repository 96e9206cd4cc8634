"""What every GPU Hub jupyterhub_config.py sets the same way (the embedded
one and the Kubernetes one): scopes and roles, the hub-side services and
their tokens, the notebook servers' token scopes and the notice banner."""
from __future__ import annotations

import json
import os
import sys

from .banner import NoticeBanner

CUSTOM_SCOPES = {
    "custom:gpuhub:submit": {"description": "Submit GPU work and manage your own workloads."},
    "custom:gpuhub:team-admin": {"description": "Manage every workload of your team."},
    "custom:gpuhub:admin": {"description": "Administer GPU Hub: pools, quotas, everyone's work."},
    "custom:gpuhub:invoke": {"description": "Call your teams' model endpoints (and nothing else)."},
}
SERVICE_ACCESS = "access:services!service=gpuhub"
# What tokens the scheduler service issues through OAuth may carry.
OAUTH_SCOPES = ["custom:gpuhub:submit", "custom:gpuhub:team-admin", "custom:gpuhub:admin",
                "custom:gpuhub:invoke", SERVICE_ACCESS]
# A notebook server's own token reaches the service (the CLI and the lab
# extension use it from the server side), besides what servers need anyway.
SERVER_TOKEN_SCOPES = ["users:activity!user", "access:servers!server", SERVICE_ACCESS,
                       "custom:gpuhub:submit"]
# How often (seconds) the hub looks whether its managed services (the scheduler
# service, the culler) still run, to restart one that died: JupyterHub's
# default, its spawners' 30 s poll, made a killed service's restart take 10-30 s.
# GPUHUB_SERVICE_POLL_SECONDS changes it (scripts/bench_restart.py compares).
SERVICE_POLL_SECONDS = int(os.environ.get("GPUHUB_SERVICE_POLL_SECONDS") or 1)
# What a job's own token (service/access/job_tokens.py) gives its user on the service.
JOB_TOKEN_SCOPES = [SERVICE_ACCESS, "custom:gpuhub:submit"]
DEFAULT_CULLER_ARGS = ["--timeout=8h", "--gpu-timeout=1h", "--warn-before=15m", "--cull-every=5m"]


def configure_auth(c, initial_users_file: str) -> None:
    """NativeAuthenticator (sign-ups need an admin's approval) with the first
    users, admins and teams (JupyterHub groups ``team-<name>``) of
    ``initial_users_file`` (written by ``gpuhub up``; may be absent)."""
    first = {}
    if initial_users_file and os.path.exists(initial_users_file):
        with open(initial_users_file) as f:
            first = json.load(f)
    c.JupyterHub.authenticator_class = "gpuspawner.hub.auth.GpuHubAuthenticator"
    c.GpuHubAuthenticator.initial_users_file = initial_users_file
    c.Authenticator.admin_users = set(first.get("admins", ["admin"]))
    c.Authenticator.allow_all = True  # every approved NativeAuthenticator user
    c.NativeAuthenticator.open_signup = False
    c.NativeAuthenticator.minimum_password_length = 10
    c.JupyterHub.load_groups = {group: {"users": users}
                                for group, users in first.get("groups", {}).items()}
    c.JupyterHub.load_groups.setdefault("gpuhub-admins",
                                        {"users": sorted(c.Authenticator.admin_users)})
    c.JupyterHub.load_roles = [*(c.JupyterHub.get("load_roles") or []),
                               *lead_roles(first.get("leads", {}))]


def lead_roles(leads: dict) -> list[dict]:
    """A role per team whose leads (``{"vision": ["alice"]}``) manage the
    team's work and see it in the admin panel."""
    return [{"name": f"gpuhub-lead-{team}", "users": sorted(users),
             "scopes": [f"custom:gpuhub:team-admin!group=team-{team}"]}
            for team, users in sorted(leads.items()) if users]


def roles() -> list[dict]:
    return [
        {"name": "user", "scopes": ["self", SERVICE_ACCESS, "custom:gpuhub:submit",
                                    "custom:gpuhub:invoke"]},
        # GPU Hub admins are the members of the group gpuhub-admins (JupyterHub's
        # own admin role cannot be extended).
        {"name": "gpuhub-admin", "groups": ["gpuhub-admins"],
         "scopes": ["custom:gpuhub:admin", "custom:gpuhub:submit", SERVICE_ACCESS]},
        # Teams are groups (the admin panel creates them and changes their
        # members); servers are read to find notebook GPUs to release;
        # tokens: job tokens the hub made (before the service made them) are
        # deleted when their attempt ends; role
        # names find a team's leads (gpuhub-lead-<team>) to tell of a paused schedule.
        {"name": "gpuhub-service", "services": ["gpuhub"],
         "scopes": ["read:users", "admin:groups", "list:users", "list:groups", "read:servers",
                    "tokens", "read:roles:users", "read:roles:groups"]},
    ]


def poll_services_every(seconds: int) -> None:
    """Make the hub notice a managed service's exit within ``seconds``.

    JupyterHub builds each managed service's process spawner (its private
    ``_ServiceSpawner``) without the hub's config, so ``c.Spawner.poll_interval``
    cannot reach it (and would also poll every notebook server that often);
    the services' spawner class is swapped for one with a shorter poll."""
    from jupyterhub.services import service as hub_services
    from traitlets import Integer

    base = hub_services._ServiceSpawner
    if getattr(base, "gpuhub_poll", None) == seconds:
        return
    hub_services._ServiceSpawner = type(base.__name__, (base,), {
        "poll_interval": Integer(seconds, help="Seconds between checks that the service runs."),
        "gpuhub_poll": seconds})


def configure(c, *, service: dict, service_api: str, spawner_token: str) -> None:
    """Scopes, roles, the scheduler service (``service``: its entry without
    the OAuth scopes), the spawner's token, the culler and the banner.
    ``service_api``: the service's REST API as the hub reaches it."""
    poll_services_every(SERVICE_POLL_SECONDS)
    c.JupyterHub.custom_scopes = CUSTOM_SCOPES
    # Team leads' roles come from configure_auth, which may run first.
    c.JupyterHub.load_roles = roles() + [r for r in (c.JupyterHub.get("load_roles") or [])
                                         if r["name"].startswith("gpuhub-lead-")]
    # The hub's pages link to the admin panel (templates/page.html).
    c.JupyterHub.template_paths = [os.path.join(os.path.dirname(__file__), "templates")]
    # The panel is part of the platform: no "authorize access" page. A first
    # start on a busy machine may take long to import (and compile) the
    # service's packages: up to 2 minutes before the hub gives up on it.
    c.JupyterHub.services = [{"name": "gpuhub", "display": True, "timeout": 120, **service,
                              "oauth_client_allowed_scopes": OAUTH_SCOPES,
                              "oauth_no_confirm": True}]
    # The spawner asks the service for GPUs on users' behalf with its own token.
    c.JupyterHub.services.append({"name": "gpuhub-spawner", "api_token": spawner_token})
    c.JupyterHub.load_roles.append(
        {"name": "gpuhub-spawner", "services": ["gpuhub-spawner"],
         "scopes": ["custom:gpuhub:admin", SERVICE_ACCESS]})
    c.GPUSpawnerMixin.gpuhub_api_url = service_api
    c.GPUSpawnerMixin.gpuhub_token = spawner_token
    c.Spawner.server_token_scopes = SERVER_TOKEN_SCOPES
    # The GPU-aware culler (docs/culler.md), run by the hub; GPUHUB_CULLER_ARGS
    # (a JSON list) replaces its flags.
    args = json.loads(os.environ.get("GPUHUB_CULLER_ARGS") or json.dumps(DEFAULT_CULLER_ARGS))
    c.JupyterHub.services.append({
        "name": "gpuhub-culler",
        "command": [sys.executable, "-m", "gpuspawner.culler", *args],
        "environment": {"GPUHUB_API_URL": service_api},
    })
    c.JupyterHub.load_roles.append(
        {"name": "gpuhub-culler", "services": ["gpuhub-culler"],
         "scopes": ["list:users", "read:users:activity", "read:users:groups", "read:users:name",
                    "read:servers", "delete:servers", "admin:servers", SERVICE_ACCESS,
                    "custom:gpuhub:admin"]})
    # The culler's warnings (and other notices) as a banner on the hub's pages.
    c.JupyterHub.template_vars = {"announcement": NoticeBanner(service_api, spawner_token)}
