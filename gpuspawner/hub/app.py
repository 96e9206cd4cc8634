"""The embedded hub's JupyterHub: JupyterHub with a shutdown that leaves
nothing booked.

JupyterHub's own shutdown stops the managed services first and the notebook
servers after them, so a server's GPUs could not be released (the
scheduler service was already gone) and stayed booked until the service's
reconciliation found them after the next start; its service health check
also kept running during the shutdown and raised on a service it had just
stopped; and it stopped the services one after the other, each with SIGINT
and a 10 s wait for a process that does not exit on it. Here the periodic
checks stop first, then the servers while the scheduler service still
answers, then the services together, each with SIGTERM at once and
watched closely (JupyterHub sends SIGINT first and polls with a backoff that
grows to seconds), and the process leaves without the interpreter's teardown
(``exit_now``), once everything is stopped and written.

``gpuhub up`` runs ``python -m gpuspawner.hub.app -f jupyterhub_config.py``.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time

from jupyterhub.app import JupyterHub
from jupyterhub.objects import Server
from jupyterhub.utils import AnyTimeoutError

from ..exit_now import exit_now

# Seconds a managed service has to exit on SIGTERM (it takes well under one).
SERVICE_TERM_TIMEOUT = 5.0


class GpuHubApp(JupyterHub):
    """JupyterHub whose shutdown stops servers before services."""

    async def shutdown_cancel_tasks(self, sig=None):
        for pc in self._periodic_callbacks.values():
            pc.stop()
        await super().shutdown_cancel_tasks(sig)

    async def cleanup(self):
        if self.cleanup_servers:
            self.log.info("Stopping single-user servers before the services (their GPUs are "
                          "released while the scheduler service runs)...")
            stops = [self.users[uid].stop(name) for uid, user in list(self.users.items())
                     for name, spawner in list(user.spawners.items()) if spawner.active]
            for result in await asyncio.gather(*stops, return_exceptions=True):
                if isinstance(result, Exception):
                    self.log.error("Failed to stop a server: %s", result)
        managed = [s for s in self._service_map.values() if s.managed and s.spawner is not None]
        await self._terminate(managed)
        # JupyterHub's own stop, all at once: the bookkeeping for those that
        # exited, SIGKILL in the end for one that did not.
        for result in await asyncio.gather(*(s.stop() for s in managed), return_exceptions=True):
            if isinstance(result, Exception):
                self.log.error("Failed to stop a service: %s", result)
        await super().cleanup()

    async def _terminate(self, services) -> None:
        """SIGTERM to every managed service at once (each exits on it), then
        wait for them to exit (up to SERVICE_TERM_TIMEOUT), looking often."""
        for service in services:
            if service.spawner.pid:
                try:
                    os.kill(service.spawner.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + SERVICE_TERM_TIMEOUT
        while time.monotonic() < deadline:
            if all([await s.spawner.poll() is not None for s in services]):
                return
            await asyncio.sleep(0.05)

    async def check_services_health(self):
        for name, service in self._service_map.items():
            # A service being stopped has no server any more: nothing to check.
            if not service.url or service.orm.server is None:
                continue
            try:
                await Server.from_orm(service.orm.server).wait_up(timeout=service.timeout,
                                                                  http=True)
            except AnyTimeoutError:
                self.log.warning("Cannot connect to %s service %s at %s", service.kind, name,
                                 service.url)


def main() -> None:
    GpuHubApp.launch_instance()
    exit_now()  # cleanup() stopped the servers, the services and the proxy


if __name__ == "__main__":
    main()
