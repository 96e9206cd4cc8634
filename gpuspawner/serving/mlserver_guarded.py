"""``python -m gpuspawner.serving.mlserver_guarded FOLDER``: what a replica runs.

``mlserver start FOLDER`` with the replica's guard (``guard.py``) in front
of the REST app, and nothing listening that the guard does not cover: no
gRPC server, no metrics server, no Kafka. The key comes from the
environment (``GPUHUB_REPLICA_KEY``) and leaves it before the model loads;
without one the replica refuses to start rather than serve unguarded.
"""
from __future__ import annotations

import asyncio
import os
import sys
from typing import Optional

from .guard import ADMIN_ENV, KEY_ENV, ReplicaGuard


class _NoServer:
    """Stands in for MLServer's gRPC server: the guard speaks HTTP only."""

    def __init__(self, *args, **kwargs):
        pass

    async def start(self) -> None:
        return None

    async def stop(self, sig: Optional[int] = None) -> None:
        return None


def _guarded(create_app, key: str, admin_digest: str):
    def create(*args, **kwargs):
        app = create_app(*args, **kwargs)
        # add_middleware puts it outermost: it answers before gzip, CORS or
        # any route (MLServer's custom handlers, added later, included).
        app.add_middleware(ReplicaGuard, key=key, admin_digest=admin_digest)
        return app
    return create


async def _start(folder: str, key: str, admin_digest: str) -> None:
    import mlserver.rest.server as rest
    import mlserver.server as server_module
    from mlserver.cli.serve import load_settings

    rest.create_app = _guarded(rest.create_app, key, admin_digest)
    server_module.GRPCServer = _NoServer
    settings, models = await load_settings(folder)
    settings.metrics_endpoint = None   # its own port, outside the guard
    settings.kafka_enabled = False
    server = server_module.MLServer(settings)
    await server.start(models)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m gpuspawner.serving.mlserver_guarded FOLDER", file=sys.stderr)
        return 2
    key = os.environ.pop(KEY_ENV, "")
    admin_digest = os.environ.pop(ADMIN_ENV, "")
    if not key:
        print(f"{KEY_ENV} is not set: a replica does not serve without its key",
              file=sys.stderr)
        return 2
    from mlserver.logging import configure_logger
    from mlserver.utils import install_uvloop_event_loop
    configure_logger()
    install_uvloop_event_loop()
    asyncio.run(_start(argv[0], key, admin_digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
