"""LocalGPUSpawner: the embedded default's notebook servers, as local
processes that see exactly the GPUs the scheduler gave them."""
from __future__ import annotations

import os
from functools import partial

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import Bool, Unicode, default

from ..isolation.accounts import (DEFAULT_PREFIX, Accounts, account_env, compose,
                                  drop_privileges, isolating)
from .admission import GPUSpawnerMixin


class LocalGPUSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """A local process spawner whose servers ask the scheduler for GPUs first.

    Servers run in per-user workspaces (``home_dir_template``). With
    ``user_accounts`` (the hub runs as root) each runs as its user's own
    system account, created on first spawn, through JupyterHub's
    LocalProcessSpawner setuid path; otherwise as the hub's user, like
    JupyterHub's SimpleLocalProcessSpawner.
    """

    user_accounts = Bool(help="""
        Run each server as its user's system account (``account_prefix`` +
        the hub name; created with useradd at the first spawn, the workspace
        handed to it, mode 0700). Needs root; on by default exactly when the
        hub runs as root. The service's ``GpuHubService.user_accounts`` runs
        jobs the same way.
        """).tag(config=True)

    @default("user_accounts")
    def _user_accounts_default(self):
        return isolating()

    account_prefix = Unicode(DEFAULT_PREFIX, help="""
        What a hub user's account name starts with (``gpuhub-alice``); must be
        the service's ``GpuHubService.account_prefix``.
        """).tag(config=True)

    account = None  # the user's Account while isolating, set at start

    @default("start_timeout")
    def _start_timeout_default(self):
        # A spawn may wait in the GPU queue; the progress page says why.
        return 24 * 3600

    async def start(self):
        await self.admit()
        try:
            if self.user_accounts:
                self.account = Accounts(self.account_prefix,
                                        lambda _: self.home_dir).ensure(self.user.name)
            return await super().start()
        except BaseException:
            await self.release("the server failed to start")
            raise

    def preexec_steps(self) -> list:
        """What the forked server process does before it executes, in order:
        (join its cgroup,) become the account, go to the workspace."""
        home = self.home_dir

        def go_home() -> None:
            os.chdir(home)
        return [drop_privileges(self.account), go_home]

    def make_preexec_fn(self, name):
        if not self.user_accounts:
            return super().make_preexec_fn(name)
        return compose(*self.preexec_steps())

    def user_env(self, env):
        if not self.user_accounts:
            return super().user_env(env)
        env.update(account_env(self.account))
        return env

    def get_env(self):
        env = super().get_env()
        env.update(self.gpu_env())
        return env

    async def poll(self):
        return await self.poll_and_check(super().poll)

    async def stop(self, now=False):
        await self.stop_and_release(partial(super().stop, now=now))
