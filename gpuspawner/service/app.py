"""The scheduler service: a JupyterHub service (tornado + HubOAuth) that runs
the scheduling loop and serves the REST API at /services/gpuhub/api/v1/.

Configured with traitlets from ``gpuhub_config.py``; started by the hub as a
managed service (``python -m gpuspawner.service -f gpuhub_config.py``).
"""
from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import time
from dataclasses import replace
from typing import Optional
from urllib.parse import urlparse

import yaml
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from sqlalchemy import select
from tornado import ioloop, web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode, default
from traitlets.config import Application

from ..backends.slurm import SlurmBackend
from ..hub.lifeline import exit_with_parent
from ..inventory import Inventory
from ..isolation import identity
from .db_exposure import exposure_warning
from ..isolation.cgroups import GpuEnforcement
from ..isolation.identity import HubIdentity
from ..isolation.gpu_rules import CGROUP_V1, DEVICE_GROUPS
from ..isolation.resources import KINDS as RESOURCE_KINDS, WorkloadResources
from ..isolation.resources import node_capacity, stored as resource_spec
from ..isolation.share_memory import MemoryWatch
from ..isolation.workspaces import hand_over_all, listed_users
from ..isolation.accounts import (NOT_ISOLATED, Accounts, isolating,
                                  private_file, secure_data_dir)
from ..scheduler.model import Quota
from ..scheduler.policy import get_policy
from ..store import GpuRow, NodeRow, PoolRow, PriceRow, QuotaRow, TeamRow, WorkloadRow
from ..store.db import open_store
from . import admin_api, endpoints, schedules_api, sweeps_api, whatif_api
from . import handlers as h
from ..backends.kubernetes.config import KubernetesJobs
from .engine import Engine, EngineConfig
from .launch import LocalNode
from .hub_api import HubApi
from .membership import HubMembership
from .identity import Identity, identity_from_model
from .kinds import KINDS
from .states import HOLDING_STATES
from .job_tokens import JobTokens
from .metrics import ServiceMetrics
from .panel.base import environment as panel_environment
from .panel.pages import PANEL_ROUTES, OverviewPage
from .schedules import Schedules
from .share_specs import parse_mps, parse_sharing
from .share_watch import ShareWatch
from .serving_controller import ServingController
from .specs import Limits
from .wiring import ENFORCED_ELSEWHERE, FACTORIES, combine, record_inventory
from .whatif import Previews

OPENAPI = os.path.join(os.path.dirname(__file__), "openapi.yaml")
# Kinds the hub's spawner runs: the hub says whether they still exist.
HUB_KINDS = tuple(k.name for k in KINDS.values() if not k.run_by_backend)
# A cycle gives the event loop back at least this often (seconds).
CYCLE_SLICE = 0.005


# The REST API, as the OpenAPI document names its paths.
API_ROUTES = [
    ("/me", h.MeHandler),
    ("/workloads", h.WorkloadsHandler),
    ("/workloads/{id}", h.WorkloadHandler),
    ("/workloads/{id}/cancel", h.CancelHandler),
    ("/workloads/{id}/release", h.ReleaseHandler),
    ("/workloads/{id}/events", h.EventsHandler),
    ("/workloads/{id}/hold", admin_api.HoldHandler),
    ("/workloads/{id}/unhold", admin_api.UnholdHandler),
    ("/workloads/{id}/priority", admin_api.PriorityHandler),
    ("/workloads/{id}/logs", h.LogsHandler),
    ("/sweeps", sweeps_api.SweepsHandler),
    ("/sweeps/{id}", sweeps_api.SweepHandler),
    ("/sweeps/{id}/cancel", sweeps_api.SweepCancelHandler),
    ("/sweeps/{id}/retry", sweeps_api.SweepRetryHandler),
    ("/pools", h.PoolsHandler),
    ("/pools/{name}", admin_api.PoolHandler),
    ("/nodes/{name}", admin_api.NodeHandler),
    ("/nodes/{name}/gpus/{index}", admin_api.NodeGpuHandler),
    ("/deployments", endpoints.DeploymentsHandler),
    ("/deployments/{team}/{name}", endpoints.DeploymentHandler),
    ("/deployments/{team}/{name}/metrics", endpoints.DeploymentMetricsHandler),
    ("/deployments/{team}/{name}/promote", endpoints.PromoteHandler),
    ("/deployments/{team}/{name}/rollback", endpoints.RollbackHandler),
    ("/deployments/{team}/{name}/traffic", endpoints.TrafficHandler),
    ("/deployments/{team}/{name}/scale", endpoints.ScaleHandler),
    ("/teams", h.TeamsHandler),
    ("/teams/{name}", h.TeamHandler),
    ("/usage", h.UsageHandler),
    ("/gpus", h.GpusHandler),
    ("/notices", h.NoticesHandler),
    ("/notices/{nid}", h.NoticeHandler),
    ("/audit", h.AuditHandler),
    ("/history/trace", whatif_api.TraceExportHandler),
    ("/whatif", whatif_api.PreviewsHandler),
    ("/whatif/{id}", whatif_api.PreviewHandler),
    ("/whatif/{id}/cancel", whatif_api.PreviewCancelHandler),
    ("/whatif/{id}/apply", whatif_api.PreviewApplyHandler),
    ("/schedules", schedules_api.SchedulesHandler),
    ("/schedules/{id}", schedules_api.ScheduleHandler),
    ("/schedules/{id}/pause", schedules_api.PauseHandler),
    ("/schedules/{id}/resume", schedules_api.ResumeHandler),
    ("/schedules/{id}/run", schedules_api.RunHandler),
    ("/openapi.json", h.OpenAPIHandler),
    ("/health", h.HealthHandler),
]
# Who the service is when it acts by itself (reconciliation).
SERVICE_IDENTITY = Identity("gpuhub-service", admin=True, can_submit=True)
PATH_PARAMS = {"{id}": r"([A-Za-z0-9_-]{1,32})", "{name}": r"([A-Za-z0-9._-]{1,128})",
               "{nid}": r"([0-9]{1,12})", "{index}": r"([0-9]{1,4})",
               "{team}": r"([A-Za-z0-9._-]{1,128})", "{deployment}": r"([a-z0-9-]{1,63})",
               "{path}": r"(.*)", "{rest}": r".*"}


def route_regex(path: str) -> str:
    out = path.replace(".", r"\.")
    for param, regex in PATH_PARAMS.items():
        out = out.replace(param, regex)
    return out


def service_routes() -> list[tuple[str, type]]:
    """Every route of the service, under its prefix, with its path
    parameters named as in PATH_PARAMS (``make_app`` turns them into
    regexes; tests fill them in to try each route)."""
    return ([("api/v1" + path, handler) for path, handler in API_ROUTES]
            + [("api/v1/{rest}", h.NoRouteHandler),
               ("oauth_callback", HubOAuthCallbackHandler),
               ("metrics", h.MetricsHandler)]
            + [("admin/" + path, handler) for path, handler in PANEL_ROUTES]
            + [("endpoints/{team}/{deployment}/{path}", endpoints.EndpointHandler),
               ("", OverviewPage)])


class GpuHubService(Application):
    name = "gpuhub-service"
    description = "GPU Hub scheduler service"
    classes = [Inventory, KubernetesJobs, SlurmBackend, GpuEnforcement, HubIdentity,
               WorkloadResources]
    aliases = {"f": "GpuHubService.config_file", "config": "GpuHubService.config_file"}
    flags = {"generate-config": ({"GpuHubService": {"generate_config": True}},
                                 "print a config file with every option and its help, then exit")}

    config_file = Unicode("gpuhub_config.py", help="""
        The traitlets config file to load (Python). It sits next to the hub's
        ``jupyterhub_config.py``. Example: ``-f /etc/gpuhub/gpuhub_config.py``.
        """).tag(config=True)

    data_dir = Unicode(help="""
        Where the service keeps its state: the SQLite database (by default),
        job logs and exit records, checkpoints and user workspaces.

        Example::

            c.GpuHubService.data_dir = "/var/lib/gpuhub"
        """).tag(config=True)

    @default("data_dir")
    def _data_dir_default(self):
        return os.environ.get("GPUHUB_DATA_DIR", os.path.abspath("gpuhub-data"))

    db_url = Unicode(help="""
        SQLAlchemy URL of the database. SQLite in ``data_dir`` by default; use
        PostgreSQL in production. Migrations run at every start.

        Example::

            c.GpuHubService.db_url = "postgresql://gpuhub@db.internal/gpuhub"
        """).tag(config=True)

    @default("db_url")
    def _db_url_default(self):
        return os.environ.get("GPUHUB_DB_URL") or f"sqlite:///{self.data_dir}/gpuhub.sqlite"

    policy = Unicode("gpuhub", help="""
        The scheduling policy: "gpuhub" (quotas, borrowing, fair share,
        backfill, preemption) or a baseline ("fifo", "backfill", "quota-fifo")
        for comparison. See docs/scheduler.md.
        """).tag(config=True)

    preemption_delay = Float(300.0, help="""
        Seconds a batch job waits for GPUs to free up by themselves before it
        may preempt (reclaim borrowed GPUs, or evict lower priority work).
        Notebooks and deployments preempt at once. Shorter: lenders get their
        quota back sooner; longer: fewer jobs are interrupted.
        """).tag(config=True)

    sweep_task_spacing = Float(60.0, help="""
        Seconds between the places of a sweep's tasks in their team's queue:
        task k is ordered as if submitted k times this after the sweep, so a
        big sweep interleaves with the team's other work instead of going
        first whole (0: all at the sweep's submit time). See docs/workflows.md.
        """).tag(config=True)

    team_group_prefix = Unicode("team-", help="""
        A team is a JupyterHub group whose name starts with this prefix; the
        team's name is the rest. Groups without it are not teams.

        Example: the group "team-vision" is the team "vision".
        """).tag(config=True)

    teams = Dict(help="""
        Teams and quotas to create at first start. Afterwards the database is
        the truth: admins change quotas through the API (``PUT
        /api/v1/teams/NAME``) and a restart does not undo them. A team named
        here that is not yet in the database is created at the next start.

        Example::

            c.GpuHubService.teams = {
                "vision": {"weight": 2, "quotas": {"a100": {"nominal": 4, "borrowing_limit": 4}}},
                "nlp": {"quotas": {"a100": {"nominal": 4, "lending_limit": 2}}},
            }
        """).tag(config=True)

    default_team = Unicode("", help="""
        A team for everyone in no other team, so that a first start gives the
        first admin (and every user an admin adds) GPUs before any team is
        made. Created at the first start when the database has no team and
        ``teams`` names none; its nominal quota in each pool is what the other
        teams do not own (the whole pool at first, less as admins give teams
        quotas on the admin panel's Teams & quotas page). Empty: no such team;
        a user in no team gets no GPU. The embedded hub sets "default".

        Example::

            c.GpuHubService.default_team = "default"
        """).tag(config=True)

    gpu_hour_prices = Dict(help="""
        The price of one GPU-hour per pool, for the admin panel's usage and
        cost page and its CSV export. Applied at start to pools that have no
        price yet; afterwards admins change prices on that page (audited).

        Example::

            c.GpuHubService.gpu_hour_prices = {"a100": 2.40, "t4": 0.35}
        """).tag(config=True)

    currency = Unicode("USD", help="""
        The currency of ``gpu_hour_prices``, shown next to every cost.
        """).tag(config=True)

    default_quota = Dict({"nominal": 0, "borrowing_limit": None, "lending_limit": None}, help="""
        The quota, in every pool, of a team that first appears through a
        submission (its group exists in the hub but no quota was declared).
        The default (nominal 0, no borrowing limit) lets such a team use idle
        GPUs only, first to be reclaimed.
        """).tag(config=True)

    cycle_interval = Float(1.0, help="""
        Seconds between scheduling cycles. A submission, cancellation or exit
        also wakes the loop at once, so this mostly bounds how late a time
        limit or a grace period is noticed.
        """).tag(config=True)

    default_time_limit = Float(24 * 3600.0, allow_none=True, help="""
        Time limit, in seconds, of a job submitted without one. Backfill can
        only plan around jobs with a limit; None allows unbounded jobs.
        """).tag(config=True)

    max_time_limit = Float(7 * 24 * 3600.0, help="""
        The longest time limit a job may ask for, in seconds; longer requests
        are refused with 400.
        """).tag(config=True)

    default_grace_period = Float(30.0, help="""
        Seconds between SIGTERM and SIGKILL when a job is preempted or
        cancelled, unless the job asks for its own ``grace_period``.
        """).tag(config=True)

    default_pool = Unicode("", help="""
        The pool of a job that names none. Empty: the only pool when there is
        one, otherwise jobs must name theirs.
        """).tag(config=True)

    max_body_size = Integer(1024 * 1024, help="""
        Largest request body accepted, in bytes; larger ones get 413, whether
        sent with a Content-Length or with Transfer-Encoding: chunked.
        """).tag(config=True)

    log_follow_timeout = Float(3600.0, help="""
        Longest a ``logs?follow=true`` stream stays open, in seconds; clients
        reconnect with Last-Event-ID to go on.
        """).tag(config=True)

    node_name = Unicode(help="""
        Name of this host's node in the scheduler (default: the host name).
        """).tag(config=True)

    @default("node_name")
    def _node_name_default(self):
        return socket.gethostname() or "localhost"

    node_resources = Dict(help="""
        This host's CPUs and memory, which the scheduler admits every
        workload's CPU and memory request against: ``{"cpus": 14, "memory":
        "120G"}`` (to keep some for the system), ``{"cpus": 0}`` to not count
        CPUs. Left out: the host's (its CPUs, MemTotal).
        """).tag(config=True)

    def node_capacity(self) -> tuple[float, int]:
        return node_capacity(dict(self.node_resources), "GpuHubService.node_resources")

    workspace_root = Unicode("{data_dir}/workspaces/{username}", help="""
        A user's workspace: where jobs run when they name no working_dir, and
        what a relative working_dir starts from. ``{username}`` and
        ``{data_dir}`` are filled in. With a notebook spawner that runs users
        in their home directories, point this at them.

        Example::

            c.GpuHubService.workspace_root = "/home/{username}"
        """).tag(config=True)

    user_accounts = Bool(help="""
        Run every job and model replica of the local backend as its user's
        own system account (``account_prefix`` + the hub name), created with
        useradd at the first submission, with the workspace handed to it
        (mode 0700); the data directory is kept out of users' reach. With the
        Slurm backend, every job runs as its user's cluster account
        (``sbatch --uid``; where the accounts come from:
        ``SlurmBackend.accounts_from``). Needs root; the default is on
        exactly when the service runs as root.
        Started as another user, the service says at start, in ``/health``
        and on the admin panel that users are not isolated.
        """).tag(config=True)

    @default("user_accounts")
    def _user_accounts_default(self):
        return isolating()

    account_prefix = Unicode(help="""
        What a hub user's system account name starts with: ``alice`` runs as
        ``gpuhub-<hub tag>-alice`` (the tag: ``HubIdentity.name``, else a hash
        of the data directory). A hub name that is not a valid account name is
        sanitised and gets a short hash (see docs/service.md). The hub's
        ``LocalGPUSpawner.account_prefix`` must be the same. Default:
        ``$GPUHUB_ACCOUNT_PREFIX`` (the embedded hub passes its own), else
        "gpuhub-<hub tag>-".
        """).tag(config=True)

    @default("account_prefix")
    def _account_prefix_default(self):
        return os.environ.get("GPUHUB_ACCOUNT_PREFIX") or identity.account_prefix(self.hub_tag)

    @property
    def hub_tag(self) -> str:
        """This hub's tag (isolation/identity.py): in its cgroups and accounts."""
        return HubIdentity(parent=self).tag(self.data_dir)

    notebook_gpu_limits = Dict(help="""
        The most GPUs one notebook server may hold, per team and pool, apart
        from the team's quota (which bounds all its work together). Keys are
        team names and pool names, "*" for any. The spawn form offers no more;
        a larger request is refused with 400.

        Example (everyone at most 2 GPUs per notebook; vision 1 on a100)::

            c.GpuHubService.notebook_gpu_limits = {"*": {"*": 2}, "vision": {"a100": 1}}
        """).tag(config=True)

    gpu_sharing = Dict(help="""
        Pools whose GPUs several notebooks (or jobs) may share, and in how
        many equal slots each GPU is split (2, 4, 8 or 16). A request then
        asks for ``gpu_share`` ("1/4") or ``gpu_memory`` ("35GiB"), rounded up
        to whole slots; a k/N share has k/N of the GPU's memory and counts
        k/N of a GPU against quota, fair share and cost. Whole-GPU work is
        never placed on a shared GPU. Memory is watched and a share above
        its part is stopped; compute is time-sliced unless an MPS daemon runs
        (docs/gpus.md, "Sharing a GPU"). Only for this host's GPUs (the
        local backend): on Kubernetes, share with the device plugin's
        time-slicing (``nvidia.com/gpu.shared``) instead. Change a pool's
        slots only while none of its GPUs is shared.

        ``mps_pipe_directory`` names where each GPU's MPS control daemon
        listens (``{uuid}``: the GPU's UUID; GPU Hub starts no daemon): a
        share is then an MPS client, held to its part of the SMs and of the
        memory, while every other share on its GPU is the same user's (one
        MPS server serves one user at a time); else it is time-sliced.

        Example (H200s in quarters, 35 GiB each; an MPS daemon per GPU)::

            c.GpuHubService.gpu_sharing = {
                "h200": {"share_units": 4, "mps_pipe_directory": "/run/gpuhub-mps/{uuid}"}}
        """).tag(config=True)

    share_watch_interval = Float(5.0, help="""
        Seconds between looks at the memory each share of a shared GPU uses
        (NVML's per-process accounting): how long a share may run above its
        memory before it is first warned.
        """).tag(config=True)

    share_memory_grace = Float(30.0, help="""
        Seconds a share may stay above its GPU memory after its warning
        before it is stopped (a job fails, a server is stopped) with the
        reason. Above 1.1 times its memory, or while the GPU is full, it is
        stopped at once: the next allocation of any share there would fail.
        """).tag(config=True)

    max_lost_attempts = Integer(3, help="""
        A job whose process vanishes without an exit record (the host
        rebooted, someone killed the supervisor) is requeued; after this many
        such losses it fails instead, so a job that kills its own supervisor
        cannot loop forever.
        """).tag(config=True)

    reconcile_interval = Float(60.0, help="""
        Seconds between checks that every notebook server holding GPUs still
        exists in the hub. A server that stopped while the service was down
        (a crash, or a JupyterHub that stops its services first) could not
        report it; this check releases its GPUs. 0 turns it off.
        """).tag(config=True)

    reconcile_grace = Float(120.0, help="""
        A notebook workload younger than this (seconds since it was admitted)
        is left alone by the reconciliation: its server may still be starting.
        """).tag(config=True)

    replica_unready_seconds = Float(30.0, help="""
        A model replica that served and then is not ready for this long (its
        model was unloaded, its runtime stopped answering ready while its
        server runs) is stopped and placed again as its next attempt, as a
        replica that crashed. 0 turns it off: such a replica only gets no
        requests.
        """).tag(config=True)

    group_cache_seconds = Float(10.0, help="""
        How long a user's JupyterHub groups (their teams) are cached.
        """).tag(config=True)

    token_cache_seconds = Integer(5, help="""
        How long the hub's answer about a token (whose it is, its scopes) is
        cached. It bounds how long a revoked token, or the token of a deleted
        user, keeps working here: JupyterHub's own default is 300 seconds.
        Each token is checked with the hub at most once per period.
        """).tag(config=True)

    job_token_max_follow_ups = Integer(10, help="""
        How many follow-up jobs one attempt of a job may submit with its own
        token (``GPUHUB_TOKEN``; pipelines submit their next steps so). Counted
        in the database: each follow-up's spec records the attempt that
        submitted it. A job's token can do nothing else but read its own
        workload and its follow-ups (service/job_scope.py).
        """).tag(config=True)

    job_token_max_pipeline = Integer(100, help="""
        How many follow-ups a pipeline may hold in all: follow-ups of
        follow-ups count against the job that began it, so jobs that each
        submit their limit cannot multiply without bound.
        """).tag(config=True)

    hub_watch_interval = Float(1.0, help="""
        Seconds between checks that the hub that started this service is still
        there. A hub killed without stopping its services (``kill -9``) leaves
        this service behind; it then exits, the jobs run on, and the next hub's
        service adopts them. 0 turns the check off (a service not started by
        the hub does not check anyway).
        """).tag(config=True)

    start_threads = Integer(2, help="""
        Threads that start jobs and replicas, off the event loop: a local start
        forks a supervisor and writes its cgroups, a Slurm one runs sbatch,
        and API requests would wait behind each. 0 starts them in the
        scheduling loop itself.
        """).tag(config=True)

    bind_wait_seconds = Float(20.0, help="""
        How long to wait for the service's port when another process holds it
        (the service of a hub that was killed, exiting), before giving up.
        The port is taken before the database is touched, so two services
        never schedule at once.
        """).tag(config=True)

    whatif_max_running = Integer(2, help="""
        How many what-if previews (the history replayed under proposed
        quotas, admin panel's Teams & quotas page) may run at once; each runs
        in a process of its own at a lower CPU priority. One more is refused
        with 409 until one ends or is cancelled.
        """).tag(config=True)

    whatif_max_days = Float(30.0, help="""
        The longest period, in days, a what-if preview replays and
        ``GET /api/v1/history/trace`` exports. A replay's time grows with the
        number of workloads in the period.
        """).tag(config=True)

    whatif_restart_cost = Float(60.0, help="""
        Seconds a job preempted in a what-if replay loses at each restart
        (starting again, and the work since its last checkpoint).
        """).tag(config=True)

    schedule_check_interval = Float(1.0, help="""
        Seconds between checks for schedules that are due (``/schedules``):
        about how late, at most, a firing is submitted.
        """).tag(config=True)

    schedule_late_grace = Float(60.0, help="""
        A schedule's firing found due at most this many seconds late is run
        as usual. Later than that, the service was down when it was due: a
        schedule with ``catch_up="once"`` runs its latest missed firing once
        (however many it missed), one with ``catch_up="skip"`` runs none and
        waits for the next.
        """).tag(config=True)

    generate_config = Bool(False, help="Print the default config file and exit.").tag(config=True)

    backend = Enum(["local", "kubernetes", "slurm"], "local", help="""
        Where jobs run. ``local``: processes on this host under a supervisor,
        on the GPUs NVML (or ``Inventory.declared``) reports. ``kubernetes``:
        batch/v1 Jobs on the cluster the service runs in (or $KUBECONFIG's),
        on the GPU nodes the cluster reports; configure with
        ``c.KubernetesJobs`` (docs/kubernetes-jobs.md). ``slurm``: batch jobs
        on a Slurm cluster, whose GPU nodes come from ``scontrol show node``;
        configure with ``c.SlurmBackend`` (docs/deploy-slurm.md).

        Example::

            c.GpuHubService.backend = "slurm"
            c.SlurmBackend.partitions = {"a100": "gpu"}
        """).tag(config=True)

    backends = List(Enum(["local", "kubernetes", "slurm"]), help="""
        Several backends at once (instead of ``backend``), each with the pools
        its nodes make up: work in a pool runs on that pool's backend. The
        hybrid a platform team runs: notebooks and serving on this host or on
        Kubernetes, large training on Slurm. A pool that two backends both
        report stops the start.

        Example::

            c.GpuHubService.backends = ["local", "slurm"]
            c.SlurmBackend.partitions = {"a100": "gpu"}
        """).tag(config=True)

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
        self.engine = Engine(self.store, backend, nodes, policy,
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
                                          gpu_sharing=self.sharing,
                                          mps_pipe_directories=parse_mps(self.gpu_sharing),
                                          share_watch=MemoryWatch(grace_s=self.share_memory_grace),
                                          share_watch_interval=self.share_watch_interval))
        self.engine.metrics = ServiceMetrics(self.engine)
        self.engine.start()
        self.serving = ServingController(self.engine,
                                         unready_seconds=self.replica_unready_seconds)
        self.serving.replica_resources = resource_spec(self.limits().requests["deployment"])
        self.engine.metrics.watch_serving(self.serving)
        self.hub = HubApi(self.group_cache_seconds)
        self.previews = Previews(self.engine, default_team=self.default_team,
                                 max_running=self.whatif_max_running,
                                 longest_s=self.whatif_max_days * 86400,
                                 restart_cost_s=self.whatif_restart_cost)
        self.previews.recover()
        self.schedules = Schedules(self.engine, self.limits, self.schedule_late_grace)
        self.schedules.membership = HubMembership(self.hub.call, self.team_group_prefix,
                                                  self.default_team)

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
        return JobTokens(hub_api, token, url + self.service_prefix)

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
                    s.add(QuotaRow(team=name, pool=pool, nominal=q.get("nominal", 0),
                                   borrowing_limit=q.get("borrowing_limit"),
                                   lending_limit=q.get("lending_limit")))

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
        watch = ShareWatch(self.engine, self.inventory.processes, self.enforcement,
                           self.engine.config.share_watch)
        while True:
            await asyncio.sleep(self.share_watch_interval)
            try:
                await asyncio.get_running_loop().run_in_executor(None, watch.tick)
            except Exception:
                self.log.exception("watching shared GPUs' memory failed")

    async def _schedule_loop(self) -> None:
        while True:
            try:
                # owners of due schedules, asked of the hub again (they may have left)
                await self.schedules.membership.refresh(self.schedules.due_owners())
                self.schedules.fire_due()
            except Exception:
                self.log.exception("firing schedules failed")
            await asyncio.sleep(self.schedule_check_interval)

    _cycled: Optional[asyncio.Event] = None

    async def cycle_done(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the next scheduling cycle to end:
        long polls answer as soon as a cycle changed what they wait on."""
        if self._cycled is None:
            self._cycled = asyncio.Event()
        try:
            await asyncio.wait_for(self._cycled.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            pass

    async def _loop(self) -> None:
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.engine.wake = wake.set
        self.engine.backend.set_wake(wake.set)   # a watch event that ends an attempt
        # Starts finish in worker threads: they wake the loop through it.
        self.engine.starter.wake = lambda: loop.call_soon_threadsafe(wake.set)
        while True:
            try:
                await self._cycle()
            except Exception:
                self.log.exception("scheduling cycle failed")
            if self._cycled is not None:
                self._cycled.set()  # wakes every waiter; the next ones wait anew
                self._cycled = None
            try:
                await asyncio.wait_for(wake.wait(), self.cycle_interval)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            # Let a burst of requests land before the next cycle.
            await asyncio.sleep(0.02)

    async def _cycle(self) -> None:
        """One scheduling cycle in slices of at most ``CYCLE_SLICE`` seconds,
        with API requests, log streams and the router served in between."""
        until = time.perf_counter() + CYCLE_SLICE
        for _ in self.engine.tick_steps():
            if time.perf_counter() > until:
                await asyncio.sleep(0)
                until = time.perf_counter() + CYCLE_SLICE

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
        loop.add_callback(self._loop)
        loop.add_callback(self._reconcile_loop)
        loop.add_callback(self._schedule_loop)
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
        self.store.close()


def main(argv: Optional[list[str]] = None) -> None:
    app = GpuHubService.instance()
    app.initialize(argv)
    app.start()
