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
import shutil
import signal
import sys
import tempfile
import time

from jupyterhub.app import JupyterHub
from jupyterhub.objects import Server
from jupyterhub.services.service import Service
from jupyterhub.utils import AnyTimeoutError
from traitlets import Integer

from ..exit_now import exit_now
from . import exit_reason

# Seconds a managed service has to exit on SIGTERM (it takes well under one).
SERVICE_TERM_TIMEOUT = 5.0


class GpuHubApp(JupyterHub):
    """JupyterHub whose shutdown stops servers before services, and that
    stops (its proxy included) when a managed service cannot start."""

    service_start_retries = Integer(2, help="""
        How often a managed service (the scheduler service, the culler) that
        exits while the hub starts is started again before the hub gives
        up: it then stops everything it started, the proxy included, prints
        the service's last error and exits with status 1 (JupyterHub would
        restart it at every exit, or exit leaving the proxy running).
        Once a service has started, it is restarted whenever it exits, as
        JupyterHub does.
        """).tag(config=True)

    _reasons_dir = None  # where managed services write why they exited

    async def start_service(self, service_name, service, ssl_context=None):
        """JupyterHub's, with a bounded number of starts: see
        ``service_start_retries``."""
        if not service.managed:
            return await super().start_service(service_name, service, ssl_context)
        if self._reasons_dir is None:
            self._reasons_dir = tempfile.mkdtemp(prefix="gpuhub-services-")
        reason_file = os.path.join(self._reasons_dir, service_name)
        service.environment = {**service.environment, exit_reason.ENV: reason_file}
        started = False

        def proc_stopped():
            # JupyterHub restarts a service at every exit; while the hub
            # starts, the loop below decides.
            if started:
                Service._proc_stopped(service)
        service._proc_stopped = proc_stopped
        status = None
        for attempt in range(1 + max(0, self.service_start_retries)):
            if await super().start_service(service_name, service, ssl_context):
                started = True
                return True
            service.spawner.stop_polling()
            status = await service.spawner.poll()
            if status is None:
                break  # up but not answering: no use starting it again
            if attempt < self.service_start_retries:
                self.log.error("Service %s exited with status %s while the hub starts; "
                               "starting it again (%d of %d)", service_name, status,
                               attempt + 1, self.service_start_retries)
        await self._give_up(service_name, status, exit_reason.read(reason_file))
        return False

    async def _give_up(self, name, status, reason) -> None:
        """Stop what was started (services, servers, the proxy) and say why;
        JupyterHub's start then exits with status 1."""
        why = reason or (f"it exited with status {status}" if status is not None
                         else f"it did not answer within {self._service_map[name].timeout} s")
        self.log.critical("Service %s could not start: %s. Stopping the hub.", name, why)
        await self.cleanup()
        proxy = getattr(self.proxy, "proxy_process", None)
        deadline = time.monotonic() + SERVICE_TERM_TIMEOUT
        while proxy is not None and proxy.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # its last words before ours
        print(f"\nGPU Hub stopped: the {name} service could not start: {why}",
              file=sys.stderr, flush=True)

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
        if self._reasons_dir:
            shutil.rmtree(self._reasons_dir, ignore_errors=True)
        await super().cleanup()

    async def _terminate(self, services) -> None:
        """SIGTERM to every managed service at once (each exits on it), then
        wait for them to exit (up to SERVICE_TERM_TIMEOUT), looking often.
        Their exit watch stops first: JupyterHub restarts a managed service
        its poll finds exited, and one restarted this way held the stop up
        for the SIGKILL's 5 s."""
        for service in services:
            service.spawner.stop_polling()
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
