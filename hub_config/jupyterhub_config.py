# The embedded single-machine GPU Hub: JupyterHub + configurable-http-proxy +
# the scheduler service, SQLite, local processes. Started by `gpuhub up`
# (make run), which sets the GPUHUB_* variables read here.
import os
import secrets
import shutil
import sys

from gpuspawner.hub import config as gpuhub
from gpuspawner.isolation import accounts, identity

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
# Run as root, every user gets a system account (docs/service.md, "Trust
# model"): servers and jobs run as it, and the data directory is out of
# users' reach. The prefix: GPUHUB_ACCOUNT_PREFIX, else "gpuhub-<hub tag>-".
# The tag (HubIdentity.name or GPUHUB_HUB_NAME, else a hash of the data
# directory) keeps this hub's accounts and cgroups apart from another hub's
# on this host (isolation/identity.py).
isolate = accounts.isolating()
hub_tag = identity.HubIdentity(config=c).tag(data_dir)
account_prefix = os.environ.get("GPUHUB_ACCOUNT_PREFIX") or identity.account_prefix(hub_tag)
if isolate:
    accounts.secure_data_dir(data_dir)
    accounts.private_file(os.path.join(data_dir, "jupyterhub.sqlite"))
    for path, fix in ((sys.executable, "make the environment from a Python outside it, e.g. "
                                        "`make setup` (its venv comes from /usr/bin/python3)"),
                      (root, "put the project where every account can read it"),
                      (data_dir, "put the data directory (--data-dir) where every account can "
                                 "pass through to its workspace")):
        blocked = accounts.unreachable(path)
        if blocked:
            sys.exit(f"GPU Hub: users' accounts cannot reach {path} ({blocked} is not "
                     f"searchable by others): {fix}")
else:
    print("GPU Hub: " + accounts.NOT_ISOLATED.format(uid=os.getuid()), file=sys.stderr)
c.JupyterHub.db_url = f"sqlite:///{data_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = os.path.join(data_dir, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(data_dir, "jupyterhub.pid")

# Authentication: NativeAuthenticator, sign-ups need an admin's approval; the
# first admin (and --demo's teams) come from the file `gpuhub up` writes.
gpuhub.configure_auth(c, os.path.join(data_dir, "initial-users.json"))

# Scopes and roles, the scheduler service (managed: started and restarted by
# the hub), the spawner's token, the culler and the notice banner.
token_file = os.path.join(data_dir, "spawner-token")
if not os.path.exists(token_file):
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
with open(token_file) as f:
    spawner_token = f.read().strip()
gpuhub.configure(c, service={
    "url": f"http://127.0.0.1:{service_port}",
    "command": [sys.executable, "-m", "gpuspawner.service",
                "-f", os.environ.get("GPUHUB_CONFIG", os.path.join(here, "gpuhub_config.py"))],
    # Importing and starting it can take more than JupyterHub's 30 s on a busy machine.
    "timeout": 120,
    "environment": {"GPUHUB_DATA_DIR": data_dir,
                    "GPUHUB_DB_URL": os.environ.get("GPUHUB_DB_URL", ""),
                    "GPUHUB_ACCOUNT_PREFIX": account_prefix,
                    # `gpuhub up --gpu-sharing POOL=N` (gpuhub_config.py reads it)
                    "GPUHUB_GPU_SHARING": os.environ.get("GPUHUB_GPU_SHARING", ""),
                    identity.ENV: hub_tag},
}, service_api=f"http://127.0.0.1:{service_port}/services/gpuhub/api/v1",
    spawner_token=spawner_token)

# Notebook servers: local processes (as each user's account when the hub is
# root, else as the hub's user; in per-user workspaces) that see exactly the
# GPUs the scheduler admitted them with.
c.JupyterHub.spawner_class = "gpuspawner.spawner.local.LocalGPUSpawner"
c.GPUSpawnerMixin.gpuhub_public_url = f"http://{ip}:{port}/services/gpuhub"
c.Spawner.default_url = "/lab"
# A first JupyterLab start on a busy machine imports (and compiles) a lot:
# give it 2 minutes to answer, not JupyterHub's 30 s.
c.Spawner.http_timeout = 120
# Named servers (/hub/home lists them): each one asks for its own GPUs.
c.JupyterHub.allow_named_servers = True
# Stop servers with SIGTERM at once: SIGINT makes a Jupyter server started
# from a terminal ask "Shutdown this Jupyter server?" and wait 5 s.
c.LocalProcessSpawner.interrupt_timeout = 0
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]  # this environment's
c.LocalGPUSpawner.user_accounts = isolate
c.LocalGPUSpawner.account_prefix = account_prefix
c.LocalGPUSpawner.hub_tag = hub_tag
c.LocalProcessSpawner.home_dir_template = os.path.join(data_dir, "workspaces", "{username}")
c.Spawner.notebook_dir = os.path.join(data_dir, "workspaces", "{username}")

