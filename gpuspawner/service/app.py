"""The scheduler service: a JupyterHub service (tornado + HubOAuth) that runs
the scheduling loop and serves the REST API at /services/gpuhub/api/v1/.

Configured with traitlets from ``gpuhub_config.py``; started by the hub as a
managed service (``python -m gpuspawner.service -f gpuhub_config.py``).
"""
from __future__ import annotations

import asyncio
import errno
import functools
import gc
import os
import signal
import socket
import time
from collections import deque
from dataclasses import replace
from typing import Optional
from urllib.parse import urlparse

import yaml
from jupyterhub.services.auth import HubOAuth
from sqlalchemy import select
from tornado import ioloop, web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.hub.lifeline import exit_with_parent
from gpuspawner.inventory import Inventory
from gpuspawner.isolation import identity
from gpuspawner.service.access.db_exposure import exposure_warning
from gpuspawner.isolation.cgroups import GpuEnforcement
from gpuspawner.isolation.identity import HubIdentity
from gpuspawner.isolation.gpu_rules import CGROUP_V1, DEVICE_GROUPS
from gpuspawner.isolation.resources import KINDS as RESOURCE_KINDS, WorkloadResources
from gpuspawner.isolation.resources import parse_ceilings, stored as resource_spec
from gpuspawner.isolation.share_memory import MemoryWatch
from gpuspawner.isolation.workspaces import hand_over_all, listed_users
from gpuspawner.isolation.accounts import (NOT_ISOLATED, Accounts, isolating,
                                  private_file, secure_data_dir)
from gpuspawner.scheduler.model import Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.store import GpuRow, NodeRow, PoolRow, PriceRow, QuotaRow, TeamRow, WorkloadRow
from gpuspawner.store.db import open_store
from gpuspawner.backends.kubernetes.config import KubernetesJobs
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.driver import CycleDriver
from gpuspawner.service.loop.full_collections import FullCollections
from gpuspawner.service.loop.lag import on_this_thread, probe as lag_probe, watch_full_collections
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.hub_api import HubApi
from gpuspawner.service.schedules.membership import HubMembership
from gpuspawner.service.access.identity import Identity, identity_from_model
from gpuspawner.scheduler.kinds import KINDS
from gpuspawner.vocab.states import HOLDING_STATES
from gpuspawner.service.access.job_tokens import JobTokens
from gpuspawner.service.metrics import ServiceMetrics
from gpuspawner.service.panel.base import environment as panel_environment
from gpuspawner.service.schedules.schedules import Schedules
from gpuspawner.vocab.shares import parse_mps, parse_sharing
from gpuspawner.vocab.specs import Limits
from gpuspawner.service.api.routes import API_ROUTES, route_regex, service_routes
from gpuspawner.service.settings import ServiceSettings
from gpuspawner.service.teams.spaces import SpaceSync, space_root
from gpuspawner.service.teams.storage import StorageLedger
from gpuspawner.service.teams.storage_quotas import StorageQuotas
from gpuspawner.service.datasets.registry import Datasets
from gpuspawner.isolation.team_spaces import TeamSpaces
from gpuspawner.isolation.gpu_rules import LimitError, parse_memory
from gpuspawner.service.wiring import (ENFORCED_ELSEWHERE, FACTORIES, combine, record_inventory,
                                       serving_controller, share_watch)
from gpuspawner.service.whatif.previews import Previews
from gpuspawner.service.workloads import operations

OPENAPI = os.path.join(os.path.dirname(__file__), "api", "openapi.yaml")
# Kinds the hub's spawner runs: the hub says whether they still exist.
HUB_KINDS = tuple(k.name for k in KINDS.values() if not k.run_by_backend)


# Who the service is when it acts by itself (reconciliation).
SERVICE_IDENTITY = Identity("gpuhub-service", admin=True, can_submit=True)

class GpuHubService(ServiceSettings):
    name = "gpuhub-service"
    description = "GPU Hub scheduler service"
    classes = [Inventory, KubernetesJobs, SlurmBackend, GpuEnforcement, HubIdentity,
               WorkloadResources]
    aliases = {"f": "GpuHubService.config_file", "config": "GpuHubService.config_file"}
    flags = {"generate-config": ({"GpuHubService": {"generate_config": True}},
                                 "print a config file with every option and its help, then exit")}

    def _classes_with_config_traits(self, classes=None):
        """The options are declared on ``ServiceSettings`` but are this class's:
        help, ``--generate-config`` and config files name ``GpuHubService``."""
        return (c for c in super()._classes_with_config_traits(classes) if c is not ServiceSettings)

    # ---- start -----------------------------------------------------------
    def initialize(self, argv=None) -> None:
        super().initialize(argv)
        if self.generate_config:
            print(self.generate_config_file())
            self.exit(0)
        if os.path.exists(self.config_file):
            self.load_config_file(self.config_file)
        os.makedirs(self.data_dir, exist_ok=True)
        self.backend_names = list(dict.fromkeys(self.backends or [self.backend]))
        self.slurm = SlurmBackend(parent=self) if "slurm" in self.backend_names else None
        accounts = self._accounts(self.slurm)
        self.database_warnings = self._database_warnings()
        self.sockets = self._listen()
        self.store = open_store(self.db_url, self.log)
        if accounts is not None:
            self._hand_over_workspaces(accounts)
        self.engine = self._engine(accounts)
        self.engine.metrics = ServiceMetrics(self.engine)
        self.driver = CycleDriver(self.engine, self.cycle_interval, self.reasons_interval)
        self.full_collections = FullCollections(self.driver.last_request_at)
        self.engine.start()
        if self.engine.config.job_tokens is not None:
            # Tokens of attempts that ended while the service was down go now.
            self.engine.config.job_tokens.revoke_ended()
        self._features()
        self.storage_quotas = StorageQuotas(self.engine.store, self._storage_quotas())
        self.storage_ledger = StorageLedger(self.engine.store)
        self.space_sync = self._team_spaces(accounts)
        self.datasets = self._datasets()
        self._storage_price()

    def _engine(self, accounts) -> Engine:
        """The backends, their nodes and the engine that schedules on them."""
        self.inventory = Inventory(parent=self)
        wired = [FACTORIES[name](self, accounts) for name in self.backend_names]
        for w in wired:
            record_inventory(self.store, w)
            if w.enforcement is not None:
                self.enforcement = w.enforcement
        self.source = "+".join(w.source for w in wired)
        backend = combine(wired)
        nodes = [ln for w in wired for ln in w.nodes]
        nodes = self._with_admin_state(nodes)
        self.sharing = self._sharing(wired)
        nodes = [LocalNode(replace(ln.node, share_units=self.sharing.get(ln.node.pool, 0)),
                           ln.devices, ln.uuids) for ln in nodes]
        if not self.default_pool and len({ln.node.pool for ln in nodes}) == 1:
            self.default_pool = nodes[0].node.pool
        self._seed_teams()
        policy = replace(get_policy(self.policy), preemption_delay=self.preemption_delay,
                         sweep_task_spacing=self.sweep_task_spacing)
        return Engine(self.store, backend, nodes, policy,
                             EngineConfig(data_dir=self.data_dir,
                                          team_prefix=self.team_group_prefix,
                                          default_quota=Quota(**self.default_quota),
                                          workspace_root=self.workspace_root,
                                          default_grace_period=self.default_grace_period,
                                          notebook_gpu_limits=self.notebook_gpu_limits,
                                          max_lost_attempts=self.max_lost_attempts,
                                          prepare_workspace=accounts and accounts.ensure,
                                          job_tokens=self._job_tokens(),
                                          default_team=self.default_team,
                                          start_threads=self.start_threads,
                                          estimate_rollout_pending=self.estimate_rollout_pending,
                                          gpu_sharing=self.sharing,
                                          mps_pipe_directories=parse_mps(self.gpu_sharing),
                                          share_watch=MemoryWatch(grace_s=self.share_memory_grace),
                                          share_watch_interval=self.share_watch_interval))

    def _features(self) -> None:
        """What runs beside the loop: serving, the hub's API, what-if previews, schedules."""
        self.serving = serving_controller(self.engine,
                                         unready_seconds=self.replica_unready_seconds)
        self.serving.replica_resources = resource_spec(self.limits().requests["deployment"])
        self.engine.metrics.watch_serving(self.serving)
        self.hub = HubApi(self.group_cache_seconds)
        self.previews = Previews(self.engine.records, self.engine.cluster,
                                 functools.partial(operations.set_team, self.engine.steering),
                                 default_team=self.default_team,
                                 max_running=self.whatif_max_running,
                                 longest_s=self.whatif_max_days * 86400,
                                 restart_cost_s=self.whatif_restart_cost)
        self.previews.recover()
        self.schedules = Schedules(self.engine.records, self.engine.submissions, self.limits, self.schedule_late_grace)
        self.schedules.membership = HubMembership(self.hub.call, self.team_group_prefix,
                                                  self.default_team)

    def _team_spaces(self, accounts) -> Optional[SpaceSync]:
        """Each team's shared folder (service/teams/spaces.py), where users have
        accounts of their own (local backend) and ``team_spaces`` is on."""
        if not (self.team_spaces and isinstance(accounts, Accounts)):
            return None
        sync = SpaceSync(TeamSpaces(space_root(self.data_dir), self.hub_tag), accounts,
                         lambda team: self.hub.group_members(self.team_group_prefix + team,
                                                             strict=True),
                         lambda: [t for t in self.engine.teams.names() if t != self.default_team],
                         self.storage_ledger, self.storage_quotas.of)
        self.engine.launcher.team_dir = sync.team_dir
        self.engine.submitting.storage_refusal = sync.refusal
        self.engine.storage_view = sync.storage_view
        return sync

    def _datasets(self) -> Datasets:
        """Datasets (service/datasets/): checked at submit and at each start,
        mounted read-only, each use in the audit log."""
        datasets = Datasets(self.engine.records, self.engine.cluster, self.engine.teams.names,
                            self.engine.launcher.workspace_path, self.dataset_roots,
                            self.space_sync.team_dir if self.space_sync else lambda team: None,
                            self.storage_ledger)
        self.engine.submitting.dataset_check = datasets.check
        self.engine.submitting.dataset_nodes = datasets.node_rules
        self.engine.launcher.dataset_mounts = datasets.mounts
        return datasets

    def _storage_price(self) -> None:
        """Record ``storage_price_per_gb_month`` from now if it changed."""
        if self.storage_price_per_gb_month < 0:
            raise SystemExit(f"GPU Hub: GpuHubService.storage_price_per_gb_month must not be "
                             f"negative, got {self.storage_price_per_gb_month}")
        if self.datasets.ledger.set_price(self.storage_price_per_gb_month, self.engine.clock()):
            self.log.info("storage: %s %s per GB-month from now on",
                          self.storage_price_per_gb_month, self.currency)

    def _storage_quotas(self) -> dict[str, int]:
        """team -> its storage quota in bytes (``team_storage_quotas``), checked
        at start; the default of a team an admin gave none (teams/storage_quotas.py)."""
        try:
            quotas = {team: parse_memory(size, f"GpuHubService.team_storage_quotas[{team!r}]")
                      for team, size in self.team_storage_quotas.items()}
        except LimitError as e:
            raise SystemExit(f"GPU Hub: {e}")
        return quotas

    def _listen(self) -> list[socket.socket]:
        """Bind the service's port, waiting up to ``bind_wait_seconds`` for a
        previous service that still holds it to exit."""
        url = urlparse(self.service_url)
        deadline = time.monotonic() + self.bind_wait_seconds
        while True:
            try:
                return bind_sockets(url.port or 80, url.hostname)
            except OSError as e:
                if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                self.log.warning("port %s is still held (a previous service exiting?); "
                                 "waiting", url.port)
                time.sleep(0.2)

    # This host's, with the local backend; cluster backends enforce by their own means.
    enforcement: Optional[GpuEnforcement] = None

    def enforcement_report(self) -> dict:
        """How GPUs and memory/CPU limits are held (/health, the heat map, the
        log): this host's, and where other backends hold them."""
        elsewhere = [ENFORCED_ELSEWHERE[n] for n in self.backend_names if n in ENFORCED_ELSEWHERE]
        if self.enforcement is None:
            return {**elsewhere[0], "notes": [f"also: {e['gpu_enforcement']}"
                                              for e in elsewhere[1:]]}
        report = self.enforcement.report()
        return {**report, "notes": report["notes"] + self._sharing_notes() + [
            f"other pools: {e['gpu_enforcement']}" for e in elsewhere]}

    def _sharing_notes(self) -> list[str]:
        """What the memory watch of shared GPUs cannot do here."""
        if not getattr(self, "sharing", None) or self.enforcement.gpu_mode == CGROUP_V1:
            return []
        return [f"GPU shares ({', '.join(sorted(self.sharing))}) are watched only where their "
                f"processes can be found: without cgroups a notebook server's share is not "
                f"held to its memory"]

    @property
    def device_groups_file(self) -> str:
        return os.path.join(self.data_dir, "device-groups.json")

    def _accounts(self, slurm: Optional[SlurmBackend]):
        """The users' accounts when jobs run as them (local or Slurm backend,
        root), with the data directory made private; else None, said loudly."""
        if self.backend_names == ["kubernetes"]:
            self.users_isolated = None  # up to Kubernetes' own means
            return None
        self.users_isolated = self.user_accounts
        if not self.user_accounts:
            self.log.warning("GPU Hub: %s", NOT_ISOLATED.format(uid=os.geteuid()))
            return None
        if not isolating():
            raise SystemExit(f"GpuHubService.user_accounts needs root (this is uid "
                             f"{os.geteuid()}); set it False to run without isolation")
        secure_data_dir(self.data_dir)
        if self.db_url == f"sqlite:///{self.data_dir}/gpuhub.sqlite":
            private_file(os.path.join(self.data_dir, "gpuhub.sqlite"))
        if slurm is not None:
            accounts = slurm.make_accounts(self.account_prefix, self.workspace_path, self.hub_tag)
            self.log.info("users are isolated: Slurm jobs run as their users' accounts (%s)",
                          slurm.accounts_from)
            return accounts
        self.log.info("users are isolated: jobs run as system accounts %s<name>",
                      self.account_prefix)
        return Accounts(self.account_prefix, self.workspace_path, tag=self.hub_tag,
                        legacy_prefix=identity.LEGACY_PREFIX)

    def _hand_over_workspaces(self, accounts) -> None:
        """Every known workspace its account's now, not at its user's next
        submission (isolation/workspaces.py): after an upgrade."""
        with self.store.session() as s:
            users = set(s.scalars(select(WorkloadRow.user).distinct()))
        users.update(listed_users(self.workspace_root, self.data_dir))
        hand_over_all(accounts.ensure, users, self.workspace_path,
                      lambda account: account.uid, self.log.info)

    def _job_tokens(self) -> Optional[JobTokens]:
        """Each job's own user token, when the hub runs this service (it
        gives the service its API URL and token)."""
        hub_api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
        if not (hub_api and token):
            return None
        url = os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101").rstrip("/")
        return JobTokens(hub_api, token, url + self.service_prefix, store=self.store)

    def workspace_path(self, user: str) -> str:
        return self.workspace_root.format(data_dir=self.data_dir, username=user)

    def _sharing(self, wired) -> dict[str, int]:
        """``gpu_sharing`` checked: pool -> slots per GPU, each pool one of
        this host's (a cluster backend's GPUs are shared by its own means)."""
        try:
            sharing = parse_sharing(self.gpu_sharing)
        except ValueError as e:
            raise SystemExit(f"GpuHubService.{e}") from None
        local = {ln.node.pool for w in wired if w.name == "local" for ln in w.nodes}
        other = sorted(set(sharing) - local)
        if other:
            raise SystemExit(f"GpuHubService.gpu_sharing: pool(s) {', '.join(other)} are not "
                             f"GPUs of this host (its pools: {', '.join(sorted(local)) or 'none'}); "
                             f"on Kubernetes share GPUs with the device plugin's time-slicing")
        return sharing

    def _with_admin_state(self, nodes: list[LocalNode]) -> list[LocalNode]:
        """The nodes as admins left them: drains and GPUs taken out of
        service outlive restarts. Also prices the pools not priced yet."""
        with self.store.transaction() as s:
            drained = {n.name for n in s.scalars(select(NodeRow).where(NodeRow.drained))}
            marked = {(g.node, g.index) for g in s.scalars(select(GpuRow).where(GpuRow.admin_mark != ""))}
            for pool, price in self.gpu_hour_prices.items():
                row = s.get(PoolRow, pool)
                if row is not None and not row.price_per_gpu_hour:
                    # A pool's first price: it applies to all of its history.
                    row.price_per_gpu_hour = float(price)
                    s.add(PriceRow(pool=pool, since=0.0, price_per_gpu_hour=float(price)))
        out = []
        for ln in nodes:
            n = ln.node
            extra = frozenset(i for (node, i) in marked if node == n.name)
            out.append(LocalNode(replace(n, drained=n.name in drained,
                                         unhealthy_gpus=n.unhealthy_gpus | extra),
                                 ln.devices, ln.uuids))
        return out

    def _seed_teams(self) -> None:
        now = time.time()
        with self.store.transaction() as s:
            if self.default_team and not self.teams and s.scalars(select(TeamRow)).first() is None:
                # The first start: the default team (its quota: Engine._refresh_default_team).
                s.add(TeamRow(name=self.default_team, group="", weight=1.0, created_at=now))
            for name, spec in self.teams.items():
                if s.get(TeamRow, name) is not None:
                    continue
                s.add(TeamRow(name=name, group=self.team_group_prefix + name,
                              weight=float(spec.get("weight", 1.0)), created_at=now))
                s.flush()
                for pool, q in (spec.get("quotas") or {}).items():
                    cpus, memory = parse_ceilings(q, f"GpuHubService.teams.{name}.quotas.{pool}")
                    s.add(QuotaRow(team=name, pool=pool, nominal=q.get("nominal", 0),
                                   borrowing_limit=q.get("borrowing_limit"),
                                   lending_limit=q.get("lending_limit"),
                                   cpus=cpus, memory=memory))

    users_isolated: Optional[bool] = None  # set at start (_accounts)
    database_warnings: list[str] = []  # set at start (_database_warnings)

    def _database_warnings(self) -> list[str]:
        """A database every local account can log in to as a superuser
        (db_exposure.py), said at start: the log, /health, the admin panel."""
        warning = exposure_warning(self.db_url, self.users_isolated)
        if warning is None:
            return []
        self.log.warning("GPU Hub: %s", warning)
        return [warning]

    def isolation_notices(self) -> list[str]:
        """What the admin panel warns of on every page: isolation this
        deployment does not have."""
        notices = []
        if self.users_isolated is False:
            notices.append("Users are not isolated: every job and model replica runs as "
                           f"the service's own account (uid {os.geteuid()}) and can read the "
                           "others' files and the data directory. Run the hub as root to give "
                           "each user a system account.")
        return notices + self.database_warnings

    # ---- used by handlers ------------------------------------------------
    @property
    def service_prefix(self) -> str:
        """Where the proxy routes this service (the hub's base URL included)."""
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpuhub/")

    @property
    def api_prefix(self) -> str:
        return self.service_prefix + "api/v1/"

    def limits(self) -> Limits:
        if getattr(self, "_requests", None) is None:
            # What each kind asks for when it does not say (checked once).
            defaults = WorkloadResources(parent=self)
            self._requests = {k: defaults.default_for(k) for k in RESOURCE_KINDS}
        return Limits(max_time_limit=self.max_time_limit,
                      default_time_limit=self.default_time_limit,
                      default_pool=self.default_pool, requests=self._requests)

    def identity(self, model: dict, groups: list[str]):
        who = identity_from_model(model, groups, self.team_group_prefix)
        if not who.teams and self.has_default_team():
            who = replace(who, teams=frozenset({self.default_team}))
        return who

    def has_default_team(self) -> bool:
        if not self.default_team:
            return False
        with self.store.session() as s:
            return s.get(TeamRow, self.default_team) is not None

    async def reconcile_servers(self) -> list[str]:
        """Release notebook workloads whose server the hub no longer has."""
        now = time.time()
        with self.store.session() as s:
            rows = s.scalars(select(WorkloadRow).where(
                WorkloadRow.kind.in_(HUB_KINDS), WorkloadRow.state.in_(HOLDING_STATES),
                WorkloadRow.started_at < now - self.reconcile_grace)).all()
        released = []
        for row in rows:
            servers = await self.hub.servers_of(row.user)
            if servers is not None and row.name not in servers:  # None: decide nothing
                self.engine.release(SERVICE_IDENTITY, row.id,
                                    "the hub has no such server any more (reconciled)")
                released.append(row.id)
        return released

    def gpu_sample(self) -> dict:
        """device -> (utilisation %, memory MiB) of this host's GPUs (NVML, or
        the declared ones' file); cluster nodes report none here."""
        return self.inventory.sample() if "local" in self.backend_names else {}

    def openapi(self) -> dict:
        with open(OPENAPI) as f:
            return yaml.safe_load(f)

    # ---- serve -----------------------------------------------------------
    @property
    def cookie_secret(self) -> bytes:
        """Signs the OAuth and panel cookies; kept in the data directory so
        a restart does not log everyone out of the panel mid-form."""
        path = os.path.join(self.data_dir, "cookie_secret")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32).hex().encode())
        with open(path, "rb") as f:
            return f.read().strip()

    def make_app(self) -> web.Application:
        routes = [(route_regex(self.service_prefix + path), handler)
                  for path, handler in service_routes()]
        return web.Application(routes, engine=self.engine, gpuhub=self, serving=self.serving,
                               panel_templates=panel_environment(),
                               api_routes={cls: path for path, cls in API_ROUTES},
                               cookie_secret=self.cookie_secret, xsrf_cookies=False)

    async def _reconcile_loop(self) -> None:
        while self.reconcile_interval > 0:
            await asyncio.sleep(self.reconcile_interval)
            try:
                released = await self.reconcile_servers()
                if released:
                    self.log.warning("released GPUs of vanished servers: %s", released)
            except Exception:
                self.log.exception("reconciling notebook servers failed")

    async def _share_watch_loop(self) -> None:
        """The memory watch of shared GPUs (share_watch.py), off the event
        loop: NVML and /proc reads may take a while on a big host."""
        if not self.sharing:
            return
        watch = share_watch(self.engine, self.inventory.processes, self.enforcement,
                            watch=self.engine.config.share_watch)
        while True:
            await asyncio.sleep(self.share_watch_interval)
            try:
                await asyncio.get_running_loop().run_in_executor(None, watch.tick)
            except Exception:
                self.log.exception("watching shared GPUs' memory failed")

    async def _schedule_loop(self) -> None:
        while True:
            try:
                # Looked for in a worker thread: on the event loop every second,
                # PostgreSQL's round trips waited on a server busy with the
                # intake's commits (5% of the loop's time while a queue filled).
                owners = await asyncio.to_thread(self.schedules.due_owners)
                if owners:  # asked of the hub again (they may have left), then fired
                    await self.schedules.membership.refresh(owners)
                    self.schedules.fire_due()
            except Exception:
                self.log.exception("firing schedules failed")
            await asyncio.sleep(self.schedule_check_interval)

    async def cycle_done(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the next scheduling cycle to end:
        long polls answer as soon as a cycle changed what they wait on."""
        await self.driver.cycle_done(timeout)

    def _configure_hub_auth(self) -> None:
        """The handlers' HubOAuth (one per process) caches tokens for
        ``token_cache_seconds`` instead of JupyterHub's five minutes."""
        auth = HubOAuth.instance()
        auth.cache_max_age = self.token_cache_seconds
        auth.cache.max_age = auth.cache.purge_interval = self.token_cache_seconds

    def close(self) -> None:
        """Give back what ``initialize`` took (the listening sockets, the
        database pool) when the service is not started: tests and tools
        that build one in-process and then drop it."""
        for sock in getattr(self, "sockets", ()):
            sock.close()
        self.sockets = []
        if getattr(self, "store", None) is not None:
            self.store.close()

    @property
    def service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    def start(self) -> None:
        self._configure_hub_auth()
        server = HTTPServer(self.make_app(), max_body_size=max(self.max_body_size * 8, 1 << 24),
                            xheaders=True)
        server.add_sockets(self.sockets)
        pid_file = os.path.join(self.data_dir, "service.pid")
        with open(os.open(pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(str(os.getpid()))
        self.log.info("GPU Hub service on %s (inventory: %s; policy: %s; db: %s)",
                      self.service_url, self.source, self.policy, self.store.engine.url.drivername)
        report = self.enforcement_report()
        self.log.info("GPU enforcement: %s; limits: %s%s", report["gpu_enforcement"],
                      report["limits"], "".join(f"; {n}" for n in report["notes"]))
        loop = ioloop.IOLoop.current()
        loop.add_callback(self.driver.run)
        gc_pauses: deque = deque(maxlen=1000)
        watch_full_collections(gc_pauses.append)
        loop.add_callback(lag_probe, self.engine.metrics.loop_lag.observe, gc_pauses=gc_pauses,
                          observe_gc=self.engine.metrics.gc_full_pause.observe,
                          observe_causes=self.engine.metrics.observe_stall)
        self.engine.store.waited_for_turn = on_this_thread(
            self.engine.metrics.write_turn_wait.observe)
        # What is here now (the modules, the core rebuilt from the database)
        # lives as long as the process: leave it out of the later full
        # garbage collections but the complete ones (each stops the event loop).
        gc.freeze()
        # Nor does CPython make full collections any more: the service
        # makes them between requests (loop/full_collections.py).
        self.full_collections.take_over()
        loop.add_callback(self.full_collections.run)
        loop.add_callback(self._reconcile_loop)
        loop.add_callback(self._schedule_loop)
        if self.space_sync is not None:
            loop.add_callback(self.space_sync.run, self.team_space_sync_interval,
                              self.team_space_measure_interval)
        loop.add_callback(self.datasets.run, self.team_space_measure_interval)
        loop.add_callback(self._share_watch_loop)
        loop.add_callback(self.serving.run)
        loop.add_callback(exit_with_parent, loop.stop, self.hub_watch_interval)
        loop.add_callback(self.engine.backend.run)
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Jobs run on by design; state is in the database. Just stop.
            asyncio.get_event_loop().add_signal_handler(sig, loop.stop)
        loop.start()
        if self.enforcement is not None and self.enforcement.gpu_mode == DEVICE_GROUPS:
            # A clean stop gives the device nodes back as they were.
            GpuEnforcement.restore_device_groups(self.device_groups_file)
        self.engine.starter.close(wait=False)
        self.engine.intake.close()
        self.driver.close()
        self.store.close()


def main(argv: Optional[list[str]] = None) -> None:
    app = GpuHubService.instance()
    app.initialize(argv)
    app.start()
