"""Every route of the server extension under ``<base_url>/gpuhub``: the workloads'
(handlers.py), the deployments' (deploy_handlers.py) and the workflows' (workflow_handlers.py)."""
from __future__ import annotations

import os

from jupyter_server.utils import url_path_join

from . import deploy_handlers, handlers, workflow_handlers
from .service import ServiceClient


def setup_handlers(web_app, service: ServiceClient, *, root_dir: str, service_root: str) -> None:
    web_app.settings.update(gpuhub_service=service, gpuhub_root_dir=os.path.abspath(root_dir),
                            gpuhub_service_root=service_root)
    base = url_path_join(web_app.settings["base_url"], "gpuhub")
    web_app.add_handlers(".*$", [*handlers.routes(base), *deploy_handlers.routes(base),
                                 *workflow_handlers.routes(base)])
