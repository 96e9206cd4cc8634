"""``SlurmBackend``: submits, watches and cancels the jobs that
``commands`` describes."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from traitlets import Bool, Dict, Enum, Float, List, Unicode
from traitlets.config import LoggingConfigurable

from ...inventory import slurm as slurm_inventory
from ...isolation.accounts import (Account, AccountError, Accounts, DirectoryAccounts,
                                   prepare_checkpoint)
from ...jsonfile import read_json, write_json
from ...safefiles import create_own
from ...scheduler.model import Node
from ...serving.replica import bind_to
from ..base import (LOST, STOPPED, AttemptExit, Backend, BackendError, LaunchSpec, Started,
                    account_of)
from .commands import (JOB_FILE, LOG_FILE, SACCT_FIELDS, SCRIPT_FILE, SQUEUE_FORMAT, JobInfo,
                       Runner, SlurmError, batch_script, exit_from_state,
                       job_name, parse_job_name, parse_sacct, parse_scontrol_job, parse_squeue,
                       run_command, sbatch_args)


# ---- the backend -------------------------------------------------------------
@dataclass
class _Job:
    spec: LaunchSpec
    job_id: str
    stopped: bool = False
    kill_at: Optional[float] = None  # when a stop turns into a hard cancel
    pending_since: Optional[float] = None
    warned_pending: bool = False
    state: str = ""                  # as the last look at the queue saw it
    misplaced: bool = False          # Slurm ran it off its placement: cancelled, LOST
    user: str = ""                   # the account it runs as ("": the service's own)


class SlurmBackend(LoggingConfigurable, Backend):
    """Runs jobs on a Slurm cluster. The service uses it with
    ``c.GpuHubService.backend = "slurm"``."""

    starts_off_loop = True  # sbatch is a process to wait for

    partitions = Dict(help="""
        The Slurm partition of each pool, ``{pool: partition}``. A pool not named
        here goes to the partition of the same name; with pools taken from the
        GPU type (``SlurmBackend.pool_from = "gres-type"``) name each pool's
        partition here.

        Example::

            c.SlurmBackend.partitions = {"a100": "gpu", "l4": "inference"}
        """).tag(config=True)

    pool_from = Enum(["partition", "gres-type"], "partition", help="""
        How a Slurm node's pool is named when the service reads the nodes:
        "partition" (the node's partition, through ``partitions`` read
        backwards) or "gres-type" (the GPU type of ``Gres=gpu:TYPE:N``, e.g.
        "a100"; "gpu" for untyped GRES).

        Example::

            c.SlurmBackend.pool_from = "gres-type"
        """).tag(config=True)

    sbatch_args = List(Unicode(), help="""
        Extra sbatch options for every job, for what the site requires:
        account, QOS, constraints, a reservation.

        Example::

            c.SlurmBackend.sbatch_args = ["--account=ml", "--qos=gpuhub"]
        """).tag(config=True)

    warn_before_time_limit = Bool(False, help="""
        False (the default): at a job's time limit Slurm sends SIGTERM, then
        SIGKILL after the cluster's ``KillWait`` (slurm.conf), and the job ends
        as "time-limit".

        True: each job gets its own grace period before its limit instead:
        sbatch ``--signal=B:TERM@<grace_period>`` with the Slurm limit
        extended by that grace. A job that exits on this SIGTERM (after writing
        its checkpoint) ends with its own exit code rather than "time-limit".
        Slurm may send the signal up to a minute early.
        """).tag(config=True)

    team_space_path = Unicode("", help="""
        Each team's shared folder on the cluster's shared filesystem, with
        ``{team}`` for the team's name: a job gets it as ``$GPUHUB_TEAM_DIR``
        (the team it runs for). The site makes each folder, owned by the
        team's Unix group (from its directory service) and mode 2770, so
        that members read and write it and nobody else reaches it; a job
        whose node cannot write its team's folder says so in its log and
        runs on (docs/storage.md). Empty (the default): no team space.

        Example::

            c.SlurmBackend.team_space_path = "/shared/teams/{team}"
        """).tag(config=True)

    slurm_conf = Unicode("", help="""
        The slurm.conf the Slurm commands read (sets ``SLURM_CONF`` for them).
        Empty: the commands' default (``/etc/slurm/slurm.conf`` on Debian).

        Example::

            c.SlurmBackend.slurm_conf = "/etc/slurm/slurm.conf"
        """).tag(config=True)

    command_timeout = Float(30.0, help="""
        Seconds a Slurm command (sbatch, squeue, scontrol, scancel) may take
        before it counts as failed. A failed squeue skips one poll; a failed
        sbatch fails the attempt.
        """).tag(config=True)

    poll_interval = Float(2.0, help="""
        Fewest seconds between two looks at the queue (one squeue each):
        how soon an ended job is noticed, against load on slurmctld.
        """).tag(config=True)

    pending_warning = Float(120.0, help="""
        A job Slurm still holds PENDING this many seconds after submission is
        logged once with Slurm's reason: the scheduler counted its GPUs as
        in use, so Slurm and the hub disagree about the node (a job from
        outside the hub, a reservation, a node not really idle).
        """).tag(config=True)

    node_refresh_interval = Float(30.0, help="""
        Seconds between looks at the nodes (one ``scontrol show node``): a
        node that goes DOWN is unhealthy (its work is requeued elsewhere), a
        DRAIN node is drained (no new work), and back again when Slurm says so.
        """).tag(config=True)

    accounts_from = Enum(["useradd", "directory"], "useradd", help="""
        Where the accounts that users' jobs run as come from, when the service
        runs them as their users (``GpuHubService.user_accounts``, the default
        as root).

        "useradd": the service creates each hub user's account on this host
        as for the local backend (``GpuHubService.account_prefix`` + the hub
        name, useradd), for a cluster whose nodes share this host's accounts
        (a single-host Slurm, or accounts synchronised from here).
        "directory": the accounts exist already on every node (LDAP, SSSD):
        a hub user's is ``user_map[name]``, else ``user_template``; a job of a
        user without one fails to start, saying so.

        Example::

            c.SlurmBackend.accounts_from = "directory"
        """).tag(config=True)

    user_map = Dict(Unicode(), help="""
        With ``accounts_from = "directory"``: the cluster account of a hub
        user whose hub name is not their account name, ``{hub name: account}``.

        Example::

            c.SlurmBackend.user_map = {"alice@example.org": "asmith"}
        """).tag(config=True)

    user_template = Unicode("{username}", help="""
        With ``accounts_from = "directory"``: a hub user's cluster account when
        ``user_map`` does not name one, from ``{username}`` (the hub name): the
        hub name itself by default, as with an LDAP authenticator.

        Example::

            c.SlurmBackend.user_template = "{username}"
        """).tag(config=True)

    def __init__(self, run: Optional[Runner] = None, clock: Callable[[], float] = time.time,
                 accounts=None, **kwargs):
        super().__init__(**kwargs)
        # Accounts or DirectoryAccounts (make_accounts): None runs every job
        # as the service's own user.
        self.accounts = accounts
        self._run_fn = run
        self._clock = clock
        self._jobs: dict[tuple[str, int], _Job] = {}
        self._last_poll = float("-inf")
        self._nodes: dict = {}
        self._nodes_read_at = float("-inf")
        self._addrs: dict[str, str] = {}
        self._reasons: dict[str, str] = {}
        self._switches: Optional[dict] = None

    def make_accounts(self, prefix: str, home_for: Callable[[str], str], tag: str = ""):
        """The accounts jobs run as, from ``accounts_from``; kept as ``accounts``."""
        if self.accounts_from == "directory":
            self.accounts = DirectoryAccounts(self.user_map, self.user_template, home_for)
        else:
            self.accounts = Accounts(prefix, home_for, tag=tag)
        return self.accounts

    # ---- commands ----------------------------------------------------------
    def _run(self, argv: Sequence[str]) -> str:
        if self._run_fn is not None:
            return self._run_fn(argv, self.command_timeout)
        env = {"SLURM_CONF": self.slurm_conf} if self.slurm_conf else None
        return run_command(argv, self.command_timeout, env)

    @staticmethod
    def log_path(attempt_dir: str) -> str:
        return os.path.join(attempt_dir, LOG_FILE)

    def running(self) -> set[tuple[str, int]]:
        return set(self._jobs)

    def replica_address(self, workload_id: str, attempt: int, port: int) -> Optional[str]:
        """The replica's node's address (NodeAddr), which it binds (``start``)."""
        j = self._jobs.get((workload_id, attempt))
        if j is None or not j.spec.nodes:
            return None
        return f"{self.node_address(j.spec.nodes[0])}:{port}"

    def node_reason(self, node: str) -> str:
        return self._reasons.get(node, "")

    def node_address(self, node: str) -> str:
        """The node's ``NodeAddr`` as Slurm last said; its name where Slurm
        did not say (a name the cluster's DNS resolves)."""
        return self._addrs.get(node) or node

    def job_id(self, workload_id: str, attempt: int) -> Optional[str]:
        j = self._jobs.get((workload_id, attempt))
        return j.job_id if j else None

    def discover(self) -> list:
        """The cluster's GPU nodes as ``[(scheduler Node, [Gpu, ...]), ...]``."""
        nodes = slurm_inventory.parse_nodes(self._run(["scontrol", "show", "node", "--oneliner"]))
        found = slurm_inventory.to_scheduler(nodes, self.pool_from, self.partitions, self.log,
                                             self._read_switches())
        self._addrs = {n.name: n.addr for n in nodes if n.addr}
        self._nodes = {n.name: n for n, _ in found}
        self._reasons = {n.name: gpus[0].health_reason for n, gpus in found if gpus}
        self._nodes_read_at = self._clock()
        return found

    def _read_switches(self) -> dict:
        """Each node's switches (``scontrol show topology``), read once: the tree
        is slurm.conf's, fixed while slurmctld runs. {} without a topology plugin."""
        if self._switches is None:
            try:
                self._switches = slurm_inventory.parse_topology(
                    self._run(["scontrol", "show", "topology"]))
            except SlurmError as e:
                self.log.info("no Slurm topology (%s): nodes have no switches", e)
                self._switches = {}
        return self._switches

    def take_node_changes(self) -> list[Node]:
        """Nodes whose health or drain changed since the last look (at most
        one ``scontrol`` per ``node_refresh_interval``), for the engine."""
        if self._clock() - self._nodes_read_at < self.node_refresh_interval:
            return []
        before = self._nodes
        try:
            self.discover()
        except SlurmError as e:
            self.log.warning("cannot read the nodes, trying again later: %s", e)
            self._nodes_read_at = self._clock()
            return []
        return [n for name, n in self._nodes.items() if name in before and
                (before[name].healthy, before[name].drained) != (n.healthy, n.drained)]

    # ---- the Backend contract ----------------------------------------------
    def team_dir(self, team: str) -> str:
        """The team's folder (``team_space_path``), or "" for none."""
        return self.team_space_path.replace("{team}", team) if self.team_space_path and team \
            else ""

    def start(self, spec: LaunchSpec) -> Started:
        """Submit the attempt; its ``ref`` is its Slurm job id."""
        key = (spec.workload_id, spec.attempt)
        if key in self._jobs:
            raise BackendError(f"attempt {key} is already running")
        if not spec.argv:
            raise BackendError(f"attempt {key} has no command")
        attempt_dir = os.path.abspath(spec.attempt_dir)
        if os.path.exists(os.path.join(attempt_dir, JOB_FILE)):
            raise BackendError(f"attempt directory {attempt_dir} was already used")
        account = account_of(self.accounts, spec)
        args = sbatch_args(spec, self.partitions, self.sbatch_args, self.warn_before_time_limit,
                           account=account)
        try:
            os.makedirs(attempt_dir, exist_ok=True)
            script = os.path.join(attempt_dir, SCRIPT_FILE)
            with os.fdopen(create_own(script, 0o600), "w") as f:  # it holds the job's token
                f.write(batch_script(spec, account, self._addrs, self.team_dir(spec.team)))
            self._prepare(spec, attempt_dir, account)
            if spec.serving:
                # A replica listens on its node's address, where the router reaches it.
                bind_to(spec.cwd, self.node_address(spec.nodes[0]))
        except OSError as e:
            raise BackendError(f"cannot prepare attempt {key}: {e}") from e
        try:
            out = self._run(["sbatch", *args, script])
            job_id = out.strip().split(";")[0]  # --parsable: "id" or "id;cluster"
            if not job_id.isdigit():
                raise SlurmError(f"sbatch answered {out.strip()!r}, not a job id")
        except SlurmError:
            # An sbatch that timed out may still have queued the job: the attempt
            # fails, so no such job may run unaccounted for.
            owner = f"--user={account.name}" if account is not None else "--me"
            try:
                self._run(["scancel", owner, f"--name={job_name(*key)}"])
            except SlurmError as e:
                self.log.warning("could not make sure attempt %s/%s is not queued: %s", *key, e)
            raise
        self._jobs[key] = _Job(spec, job_id, pending_since=self._clock(),
                               user=account.name if account is not None else "")
        write_json(os.path.join(attempt_dir, JOB_FILE),
                    {"job_id": job_id, "name": job_name(*key), "submitted_at": self._clock()})
        self.log.info("attempt %s/%s is Slurm job %s", *key, job_id)
        return Started(spec.workload_id, spec.attempt, job_id)

    @staticmethod
    def _prepare(spec: LaunchSpec, attempt_dir: str, account: Optional[Account]) -> None:
        """The log, made before the attempt directory is handed to the account
        (group-writable: slurmstepd opens it as the account), and the checkpoint."""
        log = create_own(os.path.join(attempt_dir, LOG_FILE), 0o644 if account is None else 0o660)
        try:
            if account is not None:
                os.fchown(log, -1, account.gid)
        finally:
            os.close(log)
        if account is None:
            if spec.checkpoint_dir:
                os.makedirs(spec.checkpoint_dir, exist_ok=True)
            return
        os.chown(attempt_dir, -1, account.gid)
        os.chmod(attempt_dir, 0o1770)
        # One in the workspace the script makes (mkdir -p), as the account.
        if spec.checkpoint_dir:
            prepare_checkpoint(os.path.abspath(spec.checkpoint_dir), account)

    def stop(self, workload_id: str, attempt: int, grace: float) -> None:
        """SIGTERM to the job's processes now; a hard cancel at the first poll after grace."""
        j = self._jobs.get((workload_id, attempt))
        if j is None:
            return
        j.stopped = True
        deadline = self._clock() + grace
        if j.state == "PENDING":
            # Nothing runs yet, so nothing to checkpoint: out of the queue at once.
            # --state: only if still pending; one that started meanwhile gets the TERM below.
            self._scancel(j, ["--state=PENDING"])
        if j.kill_at is None:
            # --full: the batch step too (our script execs the command there).
            self._scancel(j, ["--signal=TERM", "--full"])
            j.kill_at = deadline
        else:
            j.kill_at = min(j.kill_at, deadline)

    def kill(self, workload_id: str, attempt: int) -> None:
        j = self._jobs.get((workload_id, attempt))
        if j is not None:
            j.stopped = True
            self._hard_cancel(j)

    def poll(self) -> list[AttemptExit]:
        """Escalate stops past their deadline; report each ended job, once."""
        now = self._clock()
        if not self._jobs or now - self._last_poll < self.poll_interval:
            return []
        self._last_poll = now
        try:
            seen = {j.job_id: j for j in self._squeue({j.user for j in self._jobs.values()})}
        except SlurmError as e:
            self.log.warning("cannot read the queue, trying again at the next poll: %s", e)
            return []
        exits = []
        for key, j in list(self._jobs.items()):
            info = seen.get(j.job_id)
            if info is not None and info.alive:
                j.state = info.state
                if info.state == "RUNNING" and not j.misplaced:
                    self._check_placement(j, info)
                if j.kill_at is not None and now >= j.kill_at:
                    self._hard_cancel(j)
                    j.kill_at = float("inf")  # once; Slurm finishes the kill
                self._watch_pending(j, info, now)
                continue
            x = self._ended(j.spec, j.job_id, info, j.stopped)
            if x is not None and j.misplaced:
                x = AttemptExit(x.workload_id, x.attempt, LOST, x.returncode, x.finished_at)
            if x is not None and x.reason == LOST:
                # Its node may have failed (NODE_FAIL): look at the nodes now, so
                # the requeued attempt is not placed on that node again.
                self._nodes_read_at = float("-inf")
            if x is not None:
                exits.append(x)
                del self._jobs[key]
        return exits

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        """Find the jobs a previous service submitted: adopt the live, report the ended.

        Starts nothing. A job that Slurm does not know by name or id is LOST
        (the service died before sbatch, or Slurm forgot it and has no accounting).
        """
        users = {(spec.workload_id, spec.attempt): self._account_name(spec) for spec in specs}
        exits = []
        by_name: dict[tuple[str, str], JobInfo] = {}
        for info in self._squeue(set(users.values())):
            # The newest of a name wins (ids only grow); with accounts, only
            # the job of the attempt's own account (anyone may name a job so).
            who = info.user if self.accounts is not None else ""
            old = by_name.get((info.name, who))
            if old is None or int(info.job_id) > int(old.job_id):
                by_name[(info.name, who)] = info
        for spec in specs:
            key = (spec.workload_id, spec.attempt)
            if key in self._jobs:
                continue
            info = by_name.get((job_name(*key), users[key]))
            recorded = read_json(os.path.join(spec.attempt_dir, JOB_FILE)) or {}
            job_id = info.job_id if info is not None else recorded.get("job_id")
            if info is not None and info.alive:
                self._jobs[key] = _Job(spec, info.job_id, state=info.state,
                                       pending_since=recorded.get("submitted_at"),
                                       user=users[key])
                self.log.info("adopted Slurm job %s (%s) for attempt %s/%s", info.job_id,
                              info.state, *key)
                continue
            if not job_id:
                exits.append(AttemptExit(spec.workload_id, spec.attempt, LOST, None,
                                         self._clock()))
                continue
            x = self._ended(spec, job_id, info, stopped=False)
            if x is None:
                # Slurm could not say yet: watch it like a live one, poll decides.
                self._jobs[key] = _Job(spec, job_id, user=users[key])
            else:
                exits.append(x)
        return exits

    # ---- helpers -------------------------------------------------------------
    def _account_name(self, spec: LaunchSpec) -> str:
        """The account an attempt runs as; "" for the service's own, or when
        it cannot be found now (then the job is followed by its recorded id)."""
        if self.accounts is None:
            return ""
        try:
            return self.accounts.ensure(spec.user).name
        except (AccountError, OSError, ValueError) as e:
            self.log.warning("attempt %s/%s: no account for user %r: %s", spec.workload_id,
                             spec.attempt, spec.user, e)
            return ""

    def _squeue(self, users: set[str]) -> list[JobInfo]:
        """Our jobs: the service's own, or with accounts those of ``users``."""
        users = {u for u in users if u}
        if self.accounts is None:
            who = "--me"
        elif users:
            who = "--user=" + ",".join(sorted(users))
        else:
            return []
        # --states=all: ended jobs too, while slurmctld remembers them (MinJobAge).
        out = self._run(["squeue", who, "--states=all", "--noheader",
                         f"--format={SQUEUE_FORMAT}"])
        return [j for j in parse_squeue(out) if parse_job_name(j.name)]

    def _ended(self, spec: LaunchSpec, job_id: str, info: Optional[JobInfo], stopped: bool
               ) -> Optional[AttemptExit]:
        """The exit of an ended (or vanished) job; None if Slurm cannot say now."""
        detail = None
        try:
            detail = parse_scontrol_job(self._run(["scontrol", "show", "job", "--oneliner",
                                                   job_id]))
        except SlurmError as e:
            if "Invalid job id" not in str(e):
                self.log.warning("cannot ask Slurm about job %s: %s", job_id, e)
                return None
        if detail is not None and detail.alive:
            return None  # squeue and scontrol crossed: look again next poll
        if detail is None:
            detail = self._sacct(job_id) or (info if info and not info.alive else None)
        if detail is None:
            self.log.warning("Slurm has no record of job %s (attempt %s/%s)", job_id,
                             spec.workload_id, spec.attempt)
            return AttemptExit(spec.workload_id, spec.attempt, STOPPED if stopped else LOST,
                               None, self._clock())
        return exit_from_state(spec.workload_id, spec.attempt, detail, stopped, self._clock())

    def _sacct(self, job_id: str) -> Optional[JobInfo]:
        try:
            rows = parse_sacct(self._run(["sacct", "--parsable2", "--noheader", "--jobs", job_id,
                                          f"--format={SACCT_FIELDS}"]))
        except SlurmError as e:
            self.log.debug("no accounting record of job %s: %s", job_id, e)
            return None
        return next((r for r in rows if r.job_id == job_id), None)

    def _scancel(self, j: _Job, options: list[str]) -> None:
        try:
            self._run(["scancel", *options, j.job_id])
        except SlurmError as e:
            # Usually "already completed" or "pending"; the next poll reports how it ended.
            self.log.info("scancel of job %s: %s", j.job_id, e)

    def _hard_cancel(self, j: _Job) -> None:
        # SIGKILL now (scancel alone waits KillWait after its SIGTERM), then
        # cancel, which also takes a job that is still pending.
        self._scancel(j, ["--signal=KILL", "--full"])
        self._scancel(j, [])

    def _check_placement(self, j: _Job, info: JobInfo) -> None:
        """Slurm must run a job exactly where the scheduler placed it; else the
        hub's GPU bookkeeping is wrong. Such a job is cancelled and reported LOST
        (the engine requeues it, and fails it when it keeps happening)."""
        try:
            ran = set(slurm_inventory.expand_hostlist(info.nodes))
        except ValueError:  # a host list this parser does not know: do not act on a guess
            self.log.debug("cannot read Slurm's node list %r of job %s", info.nodes, j.job_id)
            return
        if ran and ran != set(j.spec.nodes):
            self.log.error("Slurm runs job %s (attempt %s/%s) on %s, not on its placement %s: "
                           "cancelling it (is every scheduler node a Slurm NodeName?)",
                           j.job_id, j.spec.workload_id, j.spec.attempt, info.nodes,
                           ",".join(j.spec.nodes))
            j.misplaced = True
            self._hard_cancel(j)

    def _watch_pending(self, j: _Job, info: JobInfo, now: float) -> None:
        if info.state != "PENDING" or j.warned_pending or j.pending_since is None:
            return
        if now - j.pending_since >= self.pending_warning:
            j.warned_pending = True
            self.log.warning("Slurm job %s (attempt %s/%s) is still PENDING after %.0f s: %s "
                             "(see docs/deploy-slurm.md)", j.job_id, j.spec.workload_id,
                             j.spec.attempt, now - j.pending_since, info.reason)

