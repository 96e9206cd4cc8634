"""LocalGPUSpawner: the embedded default's notebook servers, as local
processes held to exactly the GPUs the scheduler gave them."""
from __future__ import annotations

import hashlib
from functools import partial
from typing import Optional

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import default

from ..isolation import cgroups
from .admission import GPUSpawnerMixin


class LocalGPUSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """A local process spawner whose servers ask the scheduler for GPUs first.

    Servers run as the hub's user in per-user home directories
    (``home_dir_template``), like JupyterHub's SimpleLocalProcessSpawner.
    Each server joins a cgroup that allows exactly its GPUs' device nodes,
    with its team's or pool's memory and CPU limits (``c.GpuEnforcement``),
    first thing in its preexec step; the cgroup is removed when it stops.
    """

    _enforcement: Optional[cgroups.GpuEnforcement] = None  # one per hub process
    placement: Optional[cgroups.Placement] = None

    @default("start_timeout")
    def _start_timeout_default(self):
        # A spawn may wait in the GPU queue; the progress page says why.
        return 24 * 3600

    @property
    def enforcement(self) -> cgroups.GpuEnforcement:
        cls = LocalGPUSpawner
        if cls._enforcement is None:
            cls._enforcement = cgroups.GpuEnforcement(parent=self).detect()
            self.log.info("notebook servers: GPU enforcement: %s; limits: %s",
                          cls._enforcement.gpu_mode, cls._enforcement.limits_mode)
        return cls._enforcement

    async def start(self):
        await self.admit()
        try:
            self._place()
            return await super().start()
        except BaseException:
            self._unplace()
            await self.release("the server failed to start")
            raise

    def _place(self) -> None:
        request = self.gpu_request
        digest = hashlib.sha1(f"{self.user.id}/{self.name}".encode()).hexdigest()[:8]
        self._unplace()  # one left by a server that died with the hub
        self.placement = self.enforcement.create(
            cgroups.safe_name("server", self.user.name, self.name or "default", digest),
            self.devices or [], request.team if request else "", request.pool if request else "")

    def _unplace(self) -> None:
        if self.placement is not None:
            left = cgroups.remove(self.placement)
            if left:
                self.log.warning("could not remove %s's cgroups: %s", self._log_name, left)
            self.placement = None

    def make_preexec_fn(self, name):
        """The placement first, then the base class's step (a privilege drop)."""
        base = super().make_preexec_fn(name)
        placement = self.placement

        def preexec():
            if placement is not None:
                cgroups.enter(placement)
            if base is not None:
                base()

        return preexec

    def load_state(self, state):
        super().load_state(state)
        if "gpuhub_placement" in state:
            self.placement = cgroups.Placement.from_json(state["gpuhub_placement"])

    def get_state(self):
        state = super().get_state()
        if self.placement is not None:
            state["gpuhub_placement"] = self.placement.to_json()
        return state

    def get_env(self):
        env = super().get_env()
        env.update(self.gpu_env())
        return env

    async def poll(self):
        status = await self.poll_and_check(super().poll)
        if status is not None and not self._stopping:
            self._unplace()  # the server is gone: what it left in its cgroup goes too
        return status

    async def stop(self, now=False):
        await self.stop_and_release(partial(super().stop, now=now))
        self._unplace()
