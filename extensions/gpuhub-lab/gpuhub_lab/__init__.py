"""GPU Hub in JupyterLab: a Jupyter Server extension that forwards the front
end's calls to the GPU Hub scheduler service with the server's own JupyterHub
token (so no token reaches the browser), and the prebuilt lab extension."""
from __future__ import annotations

__version__ = "0.1.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "gpuhub-lab"}]


def _jupyter_server_extension_points():
    return [{"module": "gpuhub_lab"}]


def _load_jupyter_server_extension(server_app):
    from .config import GpuHubLab
    from .routes import setup_handlers
    from .service import ServiceClient

    config = GpuHubLab(parent=server_app)
    root = config.resolved_root(server_app.root_dir)
    client = ServiceClient(config.resolved_url(), config.resolved_token(),
                           timeout=config.request_timeout)
    setup_handlers(server_app.web_app, client, root_dir=server_app.root_dir,
                   service_root=root)
    server_app.log.info("gpuhub_lab: forwarding /gpuhub/ to %s", client.api)


# Older jupyter_server versions look for this name.
load_jupyter_server_extension = _load_jupyter_server_extension
