"""LocalGPUSpawner: the embedded default's notebook servers, as local
processes that see exactly the GPUs the scheduler gave them."""
from __future__ import annotations

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import default

from .admission import GPUSpawnerMixin


class LocalGPUSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """A local process spawner whose servers ask the scheduler for GPUs first.

    Servers run as the hub's user in per-user home directories
    (``home_dir_template``), like JupyterHub's SimpleLocalProcessSpawner.
    """

    _stopping = False

    @default("start_timeout")
    def _start_timeout_default(self):
        # A spawn may wait in the GPU queue; the progress page says why.
        return 24 * 3600

    async def start(self):
        await self.admit()
        try:
            return await super().start()
        except BaseException:
            await self.release("the server failed to start")
            raise

    def get_env(self):
        env = super().get_env()
        env.update(self.gpu_env())
        return env

    async def poll(self):
        wid = self.workload_id
        # LocalProcessSpawner.poll clears the state when the process is gone.
        status = await super().poll()
        if status is not None:
            if wid and not self._stopping:
                await self.release(f"the server exited ({status})", wid)
            return status
        if self._stopping:
            return None
        why = await self.workload_lost()
        if why is None:
            return None
        # Preempted or evicted: the GPUs are someone else's now.
        self.log.warning("stopping %s: %s", self._log_name, why)
        await self.stop()
        return 1

    async def stop(self, now=False):
        wid = self.workload_id  # the base class clears the state as it stops
        self._stopping = True
        try:
            await super().stop(now=now)
        finally:
            self._stopping = False
        await self.release("the server stopped", wid)
