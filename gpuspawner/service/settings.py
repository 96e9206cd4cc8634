"""The scheduler service's options: every trait ``c.GpuHubService.<name>`` sets, with
its help and default. ``app.py``'s ``GpuHubService`` is these settings plus the
behaviour (start, loops, routes); config files and ``--generate-config`` name the
service's class, as before.
"""
from __future__ import annotations

import os
import socket

from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode, default
from traitlets.config import Application

from gpuspawner.isolation import identity
from gpuspawner.isolation.identity import HubIdentity
from gpuspawner.isolation.resources import node_capacity
from gpuspawner.isolation.accounts import isolating
from gpuspawner.scheduler.forecast import ROLLOUT_PENDING
from gpuspawner.service.teams.accounting import ResourcePrices


class ServiceSettings(Application):
    """The options of ``GpuHubService`` (see its class for what runs)."""

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

    team_spaces = Bool(True, help="""
        A shared folder for every team (``<data_dir>/teams/<team>``): its
        members read and write it, nobody else can reach it, and a member
        removed from the team loses access within ``team_space_sync_interval``
        seconds. Each member finds it at ``~/team`` (``~/teams/<team>`` for
        each of their teams), and a workload at ``$GPUHUB_TEAM_DIR``. Needs
        users' own accounts (``user_accounts``) and a filesystem with POSIX
        ACLs (ext4, XFS, btrfs); see docs/storage.md.
        Example: ``c.GpuHubService.team_spaces = False`` to have none.
        """).tag(config=True)

    team_space_sync_interval = Float(5.0, help="""
        How often (seconds) the team spaces are set to the hub's team groups:
        how long a member removed from a team may still open its files.
        Example: ``c.GpuHubService.team_space_sync_interval = 2``.
        """).tag(config=True)

    team_storage_quotas = Dict(help="""
        Each team space's storage quota, by team (``"*"``: every team not
        named). From 90 % the team's view warns; at 100 % the team's new jobs
        are refused, naming it, until files are removed (nothing is deleted;
        notebook servers still start). Counted as ``du`` does, every
        ``team_space_measure_interval`` seconds. Unset: no quota. The
        default only: a quota an admin sets for a team (the admin panel's
        Teams page, ``PUT /teams/NAME`` ``storage_quota``) wins, at once.
        Example: ``c.GpuHubService.team_storage_quotas = {"*": "1T", "vision": "200G"}``.
        """).tag(config=True)

    team_space_measure_interval = Float(300.0, help="""
        How often (seconds) every team space and dataset is measured, for
        the storage quota and the usage report's storage charge (each
        measurement counts until the next); a walk of 100,000 files takes
        about a second (docs/storage.md).
        Example: ``c.GpuHubService.team_space_measure_interval = 60``.
        """).tag(config=True)

    dataset_roots = List(Unicode(), help="""
        Folders where a team's lead may register datasets besides their own
        workspace and their team's space (``POST /api/v1/datasets``,
        ``gpuhub dataset create``; docs/storage.md). A dataset's path must
        resolve to a folder under one of them.
        Example: ``c.GpuHubService.dataset_roots = ["/srv/datasets"]``.
        """).tag(config=True)

    teams = Dict(help="""
        Teams and quotas to create at first start. Afterwards the database is
        the truth: admins change quotas through the API (``PUT
        /api/v1/teams/NAME``) and a restart does not undo them. A team named
        here that is not yet in the database is created at the next start.

        Example::

            c.GpuHubService.teams = {
                "vision": {"weight": 2, "quotas": {"a100": {"nominal": 4, "borrowing_limit": 4}}},
                "nlp": {"quotas": {"a100": {"nominal": 4, "lending_limit": 2,
                                            "cpus": 32, "memory": "256G"}}},
            }

        ``cpus`` and ``memory`` are ceilings on what the team's running work
        in the pool asks for together (left out: no limit).
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

    cpu_hour_price = Float(0.0, help="""
        The price of one CPU-hour (a CPU asked for, held for an hour), in
        every pool, added to the usage page's and CSV's cost beside
        GPU-hours. 0: CPUs are not charged. A change applies to all usage
        shown, earlier usage included (unlike a pool's GPU price).
        Example: ``c.GpuHubService.cpu_hour_price = 0.04``.
        """).tag(config=True)

    memory_gib_hour_price = Float(0.0, help="""
        The price of one GiB of memory held for an hour, in every pool, added
        to the cost beside GPU-hours and CPU-hours. 0: memory is not charged.
        Example: ``c.GpuHubService.memory_gib_hour_price = 0.005``.
        """).tag(config=True)

    storage_price_per_gb_month = Float(0.0, help="""
        The price of one GB (10^9 bytes) held for a month (30 days) in a team
        space or a dataset, charged to the team on the usage page, API and
        CSV beside GPU-hours, from each space's and dataset's measured size
        (every ``team_space_measure_interval`` seconds; docs/storage.md).
        0: storage is not charged. Recorded at start when it changed: a new
        price applies from then on and never reprices storage held before.
        Example: ``c.GpuHubService.storage_price_per_gb_month = 0.02``.
        """).tag(config=True)

    def resource_prices(self) -> ResourcePrices:
        """The CPU-hour and memory GiB-hour prices the usage reports apply."""
        return ResourcePrices(self.cpu_hour_price, self.memory_gib_hour_price)

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

    reasons_interval = Float(2.0, help="""
        Seconds between the cycles that also remake every queued workload's
        waiting reason ("waiting for 2 GPUs in a100", ...), which costs the
        most with a long queue; the cycles between decide the same without.
        0: every cycle. While nothing changed in the scheduler since the last
        such cycle (no submit, cancel, start, end, reservation or node change:
        a queue waiting behind busy GPUs), the next one waits 30 s, which is
        how stale a reason's "within 12 min" may then be.
        """).tag(config=True)

    estimate_rollout_pending = Integer(ROLLOUT_PENDING, help="""
        With at most this many workloads queued, start estimates run the
        scheduling policy itself forward on a copy of the queue (up to 400
        cycles, as if nothing more were submitted), which follows fair-share
        order, reclaims and aging as they will play out; with more, they come
        from the plan that books the queue in today's order. On issue 32's
        traces the rollout's median error was 0.23-0.28 of the wait against
        0.37-0.46 for the plan (exact time limits; docs/scheduler.md, "Start
        estimates"). It costs a copy of the state and those cycles, in the
        cycle's worker, on the cycles that also remake the waiting reasons:
        on 1,000 nodes with 300 queued, about 0.7 s more. 0: the plan alone.
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

    start_niceness = Integer(10, min=0, max=19, help="""
        How much lower than the service's own a job's start runs on this
        host's CPUs (local backend; the ``nice`` value its runner starts
        with). Each start forks a runner and starts the job's command, several
        ms of CPU: a storm of starts (a sweep of 2,000 small tasks) then takes
        the cores from the service's API. With 10, the API's requests
        come first and the starts take what is left; the job's command gets
        the service's own priority back before it runs, so what a job runs is
        never niced. Applies when the service runs as root (only root can give
        the priority back); 0 turns it off.
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
        workload and its follow-ups (service/access/job_scope.py).
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
