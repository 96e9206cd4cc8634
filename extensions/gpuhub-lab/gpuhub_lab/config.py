"""Where the scheduler service is and how this server reaches it."""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from traitlets import Float, Unicode
from traitlets.config import Configurable

# As the gpuhub CLI reads a URL: the same rules wherever a user types one.
from gpuspawner.client import SERVICE_PREFIX, normalize_url


class GpuHubLab(Configurable):
    """Configuration of the server side of the GPU Hub lab extension
    (``c.GpuHubLab.*`` in jupyter_server_config.py)."""

    service_url = Unicode(
        "", config=True,
        help="The scheduler service's URL (…/services/gpuhub). Empty: $GPUHUB_URL, which the "
             "GPU Hub spawners set, else the hub's API URL ($JUPYTERHUB_API_URL) with "
             "/services/gpuhub.")
    token = Unicode(
        "", config=True,
        help="The token sent to the service. Empty: $GPUHUB_TOKEN, else this server's own "
             "$JUPYTERHUB_API_TOKEN, which carries the scopes of Spawner.server_token_scopes.")
    service_root = Unicode(
        "", config=True,
        help="This server's root directory as the service's jobs see it. Empty: the same "
             "absolute path (the jobs share the server's filesystem, as with the local backend "
             "of the embedded hub). Paths the extension sends (working_dir, checkpoint_dir, "
             "output notebook) start here.")
    request_timeout = Float(
        30.0, config=True, help="Seconds to wait for one answer of the service.")

    def resolved_url(self) -> str:
        url = self.service_url or os.environ.get("GPUHUB_URL", "")
        if not url:
            hub_api = os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")
            parts = urlsplit(hub_api)
            url = f"{parts.scheme}://{parts.netloc}{SERVICE_PREFIX}"
        return normalize_url(url)

    def resolved_token(self) -> str:
        return (self.token or os.environ.get("GPUHUB_TOKEN")
                or os.environ.get("JUPYTERHUB_API_TOKEN", ""))

    def resolved_root(self, root_dir: str) -> str:
        return self.service_root or os.path.abspath(os.path.expanduser(root_dir))
