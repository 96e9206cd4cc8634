# The embedded single-machine GPU Hub: JupyterHub + configurable-http-proxy +
# the scheduler service, SQLite, local processes. Started by `gpuhub up`
# (make run), which sets the GPUHUB_* variables read here.
import json
import os
import secrets
import shutil
import sys

c = get_config()  # noqa: F821

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
data_dir = os.path.abspath(os.environ.get("GPUHUB_DATA_DIR", os.path.join(root, "gpuhub-data")))
os.makedirs(data_dir, exist_ok=True)
port = int(os.environ.get("GPUHUB_PORT", "8000"))
ip = os.environ.get("GPUHUB_IP", "127.0.0.1")
service_port = int(os.environ.get("GPUHUB_SERVICE_PORT", str(port + 2)))

c.JupyterHub.bind_url = f"http://{ip}:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("GPUHUB_HUB_PORT", str(port + 1)))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(os.environ.get('GPUHUB_PROXY_API_PORT', str(port + 3)))}"
proxy = os.path.join(root, "node_modules", ".bin", "configurable-http-proxy")
c.ConfigurableHTTPProxy.command = [proxy if os.path.exists(proxy)
                                   else shutil.which("configurable-http-proxy") or proxy]
c.JupyterHub.db_url = f"sqlite:///{data_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = os.path.join(data_dir, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(data_dir, "jupyterhub.pid")

# Authentication: NativeAuthenticator, sign-ups need an admin's approval.
initial = os.path.join(data_dir, "initial-users.json")
first = json.load(open(initial)) if os.path.exists(initial) else {}
c.JupyterHub.authenticator_class = "gpuspawner.hub.auth.GpuHubAuthenticator"
c.GpuHubAuthenticator.initial_users_file = initial
c.Authenticator.admin_users = set(first.get("admins", ["admin"]))
c.Authenticator.allow_all = True  # every approved NativeAuthenticator user
c.NativeAuthenticator.open_signup = False
c.NativeAuthenticator.minimum_password_length = 10
# Teams are JupyterHub groups named team-<name>.
c.JupyterHub.load_groups = {group: {"users": users}
                            for group, users in first.get("groups", {}).items()}
c.JupyterHub.load_groups.setdefault("gpuhub-admins", {"users": sorted(c.Authenticator.admin_users)})

# Who may do what with the scheduler (see docs/service.md).
c.JupyterHub.custom_scopes = {
    "custom:gpuhub:submit": {"description": "Submit GPU work and manage your own workloads."},
    "custom:gpuhub:team-admin": {"description": "Manage every workload of your team."},
    "custom:gpuhub:admin": {"description": "Administer GPU Hub: pools, quotas, everyone's work."},
}
c.JupyterHub.load_roles = [
    {"name": "user",
     "scopes": ["self", "access:services!service=gpuhub", "custom:gpuhub:submit"]},
    # GPU Hub admins are the members of the group gpuhub-admins (JupyterHub's
    # own admin role cannot be extended).
    {"name": "gpuhub-admin", "groups": ["gpuhub-admins"],
     "scopes": ["custom:gpuhub:admin", "custom:gpuhub:submit", "access:services!service=gpuhub"]},
    {"name": "gpuhub-service", "services": ["gpuhub"],
     # Teams are groups; servers are read to find notebook GPUs to release.
     "scopes": ["read:users", "read:groups", "list:users", "list:groups", "read:servers"]},
]

# The scheduler service, managed (started and restarted) by the hub.
c.JupyterHub.services = [{
    "name": "gpuhub",
    "display": True,
    "url": f"http://127.0.0.1:{service_port}",
    "command": [sys.executable, "-m", "gpuspawner.service",
                "-f", os.environ.get("GPUHUB_CONFIG", os.path.join(here, "gpuhub_config.py"))],
    "environment": {"GPUHUB_DATA_DIR": data_dir,
                    "GPUHUB_DB_URL": os.environ.get("GPUHUB_DB_URL", "")},
    "oauth_client_allowed_scopes": ["custom:gpuhub:submit", "custom:gpuhub:team-admin",
                                    "custom:gpuhub:admin", "access:services!service=gpuhub"],
}]

# The spawner asks the service for GPUs on users' behalf with its own token.
token_file = os.path.join(data_dir, "spawner-token")
if not os.path.exists(token_file):
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
with open(token_file) as f:
    spawner_token = f.read().strip()
c.JupyterHub.services.append({"name": "gpuhub-spawner", "api_token": spawner_token})
c.JupyterHub.load_roles.append(
    {"name": "gpuhub-spawner", "services": ["gpuhub-spawner"],
     "scopes": ["custom:gpuhub:admin", "access:services!service=gpuhub"]})

# The GPU-aware idle culler: a hub-managed service (python -m gpuspawner.culler
# takes jupyterhub-idle-culler's flags plus the GPU ones; see docs/culler.md).
c.JupyterHub.services.append({
    "name": "gpuhub-culler",
    "command": [sys.executable, "-m", "gpuspawner.culler"] + json.loads(
        os.environ.get("GPUHUB_CULLER_ARGS", '["--timeout=8h", "--gpu-timeout=1h", '
                                             '"--warn-before=15m", "--cull-every=5m"]')),
    "environment": {"GPUHUB_API_URL": f"http://127.0.0.1:{service_port}/services/gpuhub/api/v1"},
})
c.JupyterHub.load_roles.append(
    {"name": "gpuhub-culler", "services": ["gpuhub-culler"],
     "scopes": ["list:users", "read:users:activity", "read:users:groups", "read:users:name",
                "read:servers", "delete:servers", "admin:servers", "access:services!service=gpuhub",
                "custom:gpuhub:admin"]})

# The culler's warnings (and other notices) as a banner on the hub's pages.
from gpuspawner.hub.banner import notice_banner  # noqa: E402

c.JupyterHub.template_vars = {"announcement": notice_banner(
    f"http://127.0.0.1:{service_port}/services/gpuhub/api/v1", spawner_token)}

# Notebook servers: local processes (as the hub's user, in per-user
# workspaces) that see exactly the GPUs the scheduler admitted them with.
c.JupyterHub.spawner_class = "gpuspawner.spawner.local.LocalGPUSpawner"
c.GPUSpawnerMixin.gpuhub_api_url = f"http://127.0.0.1:{service_port}/services/gpuhub/api/v1"
c.GPUSpawnerMixin.gpuhub_token = spawner_token
c.GPUSpawnerMixin.gpuhub_public_url = f"http://{ip}:{port}/services/gpuhub"
c.Spawner.default_url = "/lab"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]  # this environment's
if os.getuid() == 0:
    # Servers run as the hub's user; Jupyter refuses root unless told.
    c.Spawner.args = ["--allow-root"]
c.LocalProcessSpawner.home_dir_template = os.path.join(data_dir, "workspaces", "{username}")
c.Spawner.notebook_dir = os.path.join(data_dir, "workspaces", "{username}")
# The server's token reaches the service (the CLI and the lab extension use
# it from the server side), besides what servers need by default.
c.Spawner.server_token_scopes = [
    "users:activity!user", "access:servers!server",
    "access:services!service=gpuhub", "custom:gpuhub:submit",
]
