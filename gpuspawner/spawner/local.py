"""LocalGPUSpawner: the embedded default's notebook servers, as local
processes held to exactly the GPUs the scheduler gave them."""
from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import time
from typing import Optional

from jupyterhub.spawner import SimpleLocalProcessSpawner
from tornado import web
from traitlets import Bool, Unicode, default

from ..isolation import cgroups, dataset_mounts, identity, user_env
from ..isolation.gpu_rules import visible_devices
from ..isolation.placement import Placement, enter
from ..isolation.team_spaces import HOME_LINKS
from ..isolation.accounts import (DEFAULT_PREFIX, Accounts, account_env, compose,
                                  drop_privileges, isolating, telling)
from .admission import GPUSpawnerMixin
from . import stop_reason


class LocalGPUSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """A local process spawner whose servers ask the scheduler for GPUs first.

    Servers run in per-user workspaces (``home_dir_template``). With
    ``user_accounts`` (the hub runs as root) each runs as its user's own
    system account, created on first spawn: ``make_preexec_fn`` drops to it
    (in place of JupyterHub's ``set_user_setuid``), so the server's
    environment is applied by its exec, as the account; otherwise as the
    hub's user, like JupyterHub's SimpleLocalProcessSpawner. Each server joins a cgroup that
    allows exactly its GPUs' device nodes, with its team's or pool's memory
    and CPU limits (``c.GpuEnforcement``), first thing in its preexec step,
    before the privilege drop; the cgroup is removed when it stops.
    """

    _enforcement: Optional[cgroups.GpuEnforcement] = None  # one per hub process
    placement: Optional[Placement] = None

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

    hub_tag = Unicode(help="""
        This hub's tag (isolation/identity.py: ``HubIdentity.name``, else a
        hash of the data directory), which the embedded config sets: it names
        the default ``account_prefix`` and ``GpuEnforcement.cgroup_parent``
        and marks the accounts, so another hub on this host never adopts
        them. Empty: the names of a hub from before tags.
        """).tag(config=True)

    account_prefix = Unicode(help="""
        What a hub user's account name starts with (``gpuhub-<hub tag>-alice``);
        must be the service's ``GpuHubService.account_prefix``.
        """).tag(config=True)

    @default("account_prefix")
    def _account_prefix_default(self):
        return identity.account_prefix(self.hub_tag) if self.hub_tag else DEFAULT_PREFIX

    account = None  # the user's Account while isolating, set at start

    @default("start_timeout")
    def _start_timeout_default(self):
        # A spawn may wait in the GPU queue; the progress page says why.
        return 24 * 3600

    @property
    def enforcement(self) -> cgroups.GpuEnforcement:
        cls = LocalGPUSpawner
        if cls._enforcement is None:
            cls._enforcement = cgroups.GpuEnforcement(parent=self, hub_tag=self.hub_tag).detect(
                processes_as_root=isolating() and not self.user_accounts)
            self.log.info("notebook servers: GPU enforcement: %s; limits: %s",
                          cls._enforcement.gpu_mode, cls._enforcement.limits_mode)
        return cls._enforcement

    async def start(self):
        await self.admit()
        try:
            if self.user_accounts:
                self.account = Accounts(self.account_prefix, lambda _: self.home_dir,
                                        tag=self.hub_tag,
                                        legacy_prefix=identity.LEGACY_PREFIX).ensure(self.user.name)
            self._check_datasets()
            self._place()
            return await super().start()
        except BaseException:
            self._unplace("the server failed to start")
            await self.release("the server failed to start")
            raise

    def _check_datasets(self) -> None:
        """Before the fork: the datasets can be mounted (the same checks as
        the runner's for a job): the hub runs as root, each folder is still
        the registered one."""
        if not self.datasets:
            return
        try:
            dataset_mounts.prepare(self.datasets, "the hub")
        except OSError as e:
            raise web.HTTPError(500, f"cannot start the server with its datasets: {e}") from e

    def _place(self) -> None:
        request = self.gpu_request
        # Named by its workload where it has one: the service finds a shared
        # GPU's processes by it (the memory watch).
        tag = self.workload_id or hashlib.sha1(f"{self.user.id}/{self.name}".encode()).hexdigest()[:8]
        self._unplace("left by this server's last run, which died with the hub")
        self.placement = self.enforcement.create(
            cgroups.server_cgroup_name(self.user.name, self.name, tag),
            self.devices or [], request.team if request else "", request.pool if request else "",
            self.device_uuids or [], kind="notebook")

    def _unplace(self, why: str) -> None:
        if self.placement is not None:
            left = cgroups.remove(self.placement, logger=self.log,
                                  reason=f"the hub removes {self._log_name}'s cgroups: {why}")
            if left:
                self.log.warning("could not remove %s's cgroups: %s", self._log_name, left)
            self.placement = None

    def load_state(self, state):
        super().load_state(state)
        if "gpuhub_placement" in state:
            self.placement = Placement.from_json(state["gpuhub_placement"])

    def get_state(self):
        state = super().get_state()
        if self.placement is not None:
            state["gpuhub_placement"] = self.placement.to_json()
        return state

    def make_preexec_fn(self, name):
        """What the forked server process does before it executes, in order:
        join its cgroup (the placement), mount its datasets read-only in a
        mount namespace of its own (as root), become the account keeping the
        placement's device groups (or the base class's step), go to the
        workspace."""
        placement = self.placement
        first = ((lambda: enter(placement))
                 if placement is not None and (placement.cgroups or placement.gids) else None)
        if self.datasets:
            first = compose(first, dataset_mounts.mount_step(self.datasets))
        if not self.user_accounts:
            return telling(compose(first, super().make_preexec_fn(name)))
        home = self.home_dir

        def go_home() -> None:
            os.chdir(home)
        return telling(compose(first, drop_privileges(
            self.account, extra_gids=placement.gids if placement is not None else ()), go_home))

    def user_env(self, env):
        if not self.user_accounts:
            return super().user_env(env)
        env.update(account_env(self.account))
        return env

    def get_env(self):
        # A PATH and environment made for the user (isolation/user_env.py):
        # this environment's bin (gpuhub in a terminal), the system's, none
        # of the hub's; what the admin's Spawner.environment says stays.
        env = user_env.for_user(super().get_env(), keep=self.environment)
        env.update(self.gpu_env())
        env.update(visible_devices(self.devices or [], self.device_uuids or []))
        team = self.gpu_request.team if self.gpu_request else ""
        team_dir = os.path.join(self.home_dir, HOME_LINKS, team) if team else ""
        if team_dir and os.path.isdir(team_dir):  # its team's space (service/teams/spaces.py)
            env["GPUHUB_TEAM_DIR"] = team_dir
        return env

    def get_args(self):
        args = super().get_args()
        # JupyterLab's terminal runs a login shell when the server has no
        # terminal, and /etc/profile then replaces the PATH with its own
        # (without gpuhub): an interactive shell as a desktop terminal's
        # keeps the server's (get_env), and still reads ~/.bashrc.
        if not any("terminado_settings" in a for a in [*args, *self.args]):
            shell = ((account_env(self.account)["SHELL"] if self.account else "")
                     or os.environ.get("SHELL") or "/bin/sh")
            args.append(f"--ServerApp.terminado_settings=shell_command={shell}")
        # Jupyter Server's own manager fails a whole folder's listing when one
        # entry is renamed meanwhile (gpuhub_lab/contents.py says why).
        if not any("contents_manager_class" in a for a in [*args, *self.args]):
            args.append("--ServerApp.contents_manager_class="
                        "gpuhub_lab.contents.ListingContentsManager")
        return args

    def gone_reason(self, status):
        # Read before its cgroups go (poll): the memory cgroup counted any OOM kill.
        return stop_reason.exit_reason(status, stop_reason.oom_kills(
            self.placement.cgroups if self.placement is not None else ()))

    async def poll(self):
        status = await self.poll_and_check(super().poll)
        if status is not None and not self._stopping:
            # The server is gone: what it left in its cgroup goes too.
            self._unplace(f"the server exited ({status})")
        return status

    async def stop(self, now=False):
        self.log.info("stopping %s (pid %s)%s", self._log_name, self.pid,
                      " at once" if now else "")
        await self.stop_and_release(self._terminate)
        self._unplace("the server was stopped")

    async def _terminate(self) -> None:
        """SIGTERM, then SIGKILL after ``term_timeout``. Jupyter Server stops
        cleanly on SIGTERM (its kernels and terminals shut down) with or
        without a terminal; JupyterHub's SIGINT first only raises
        KeyboardInterrupt, which code running on the server's loop can
        swallow, and CI saw a server outlive it for the whole 10 s
        ``interrupt_timeout`` before its SIGTERM."""
        if await self.poll() is not None:
            return
        await self._signal(signal.SIGTERM)
        if await self.wait_for_death(self.term_timeout):
            return
        self.log.warning("%s did not stop within %s s of SIGTERM: killing it",
                         self._log_name, self.term_timeout)
        await self._signal(signal.SIGKILL)
        if not await self.wait_for_death(self.kill_timeout):
            self.log.warning("%s (pid %s) never died", self._log_name, self.pid)

    async def wait_for_death(self, timeout=10):
        """Whether the server exited within ``timeout`` seconds, looked at
        every 0.1 s: JupyterHub's backoff grows to seconds between looks,
        which made a stop last up to twice as long as the server's exit."""
        deadline = time.monotonic() + timeout
        while await self.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True
