"""LocalGPUSpawner: the embedded default's notebook servers, as local
processes that see exactly the GPUs the scheduler gave them."""
from __future__ import annotations

from functools import partial

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import default

from .admission import GPUSpawnerMixin


class LocalGPUSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """A local process spawner whose servers ask the scheduler for GPUs first.

    Servers run as the hub's user in per-user home directories
    (``home_dir_template``), like JupyterHub's SimpleLocalProcessSpawner.
    """

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
        return await self.poll_and_check(super().poll)

    async def stop(self, now=False):
        await self.stop_and_release(partial(super().stop, now=now))
