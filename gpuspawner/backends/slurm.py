"""Runs attempts as Slurm batch jobs: sbatch, squeue, scontrol/sacct, scancel.

The scheduler decides and Slurm places exactly there: every job is pinned
with ``--nodelist`` to the nodes of its placement and asks for the placed
number of GPUs per node (``--gres=gpu:N``). Which of a node's GPUs Slurm
binds is Slurm's choice (the GPUs of a pool are interchangeable); Slurm sets
``CUDA_VISIBLE_DEVICES`` for the job and this backend leaves it alone.

A job is found again by its name, ``gpuhub.<workload>.<attempt>``, and by
the job id kept in ``slurm-job.json`` in the attempt directory. Slurm's own
requeue is off (``--no-requeue``): a requeue is the scheduler's decision and
makes a new attempt, never a silent rerun of an old one.

How an attempt ended comes from Slurm's job state (see ``exit_from_state``):
``scontrol show job`` while slurmctld remembers the job (``MinJobAge``),
``sacct`` after that where accounting is on.

As in the local backend, a stop in progress (its hard-cancel deadline) lives
in memory only: after a restart the service re-issues ``stop``.

With users' accounts (``GpuHubService.user_accounts``: the service runs as
root) each job runs as its hub user's cluster account: root submits it with
``sbatch --uid --gid``, so slurmd starts the script as that account and
everything in the job is that user's, as a job submitted by them would be.
The account is made with useradd as for the local backend, or comes from the
directory (LDAP) through ``user_map``/``user_template``. The attempt
directory is root's, group the account's, mode 1770; the script (it holds
the job's token) is root's, mode 0600, read by sbatch only, and Slurm shows
a job's script to its owner and to operators only; the log is made by root,
group-writable for the account, before the directory is handed over.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional, Sequence

from traitlets import Bool, Dict, Enum, Float, List, Unicode
from traitlets.config import LoggingConfigurable

from ..inventory import slurm as slurm_inventory
from ..inventory.slurm import parse_oneliner
from ..isolation.accounts import (Account, AccountError, Accounts, DirectoryAccounts,
                                  account_env, prepare_checkpoint)
from ..jsonfile import read_json, write_json
from ..safefiles import create_own
from .base import (EXITED, LOST, STOPPED, TIME_LIMIT, AttemptExit, Backend, BackendError,
                   LaunchSpec, kept_environment, local_replica_address)

JOB_FILE = "slurm-job.json"
SCRIPT_FILE = "slurm-job.sh"
LOG_FILE = "output.log"  # the same name as the local backend's: the logs API reads it
NAME_PREFIX = "gpuhub"

# Job states (squeue %T, scontrol JobState, sacct State's first word).
ALIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                          "STOPPED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
                          "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT"})


class SlurmError(BackendError):
    """A Slurm command failed or could not be run; the message has its argv and stderr."""


# ---- running commands -------------------------------------------------------
Runner = Callable[[Sequence[str], float], str]


def run_command(argv: Sequence[str], timeout: float, env: Optional[dict] = None) -> str:
    """Run one Slurm command; its stdout, or SlurmError saying what failed."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                             env=None if env is None else {**os.environ, **env},
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise SlurmError(f"{argv[0]} not found: is Slurm's client installed and on PATH? "
                         f"({e})") from e
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"`{shlex.join(argv)}` did not answer within {timeout:.0f} s "
                         f"(is slurmctld up? `scontrol ping`)") from e
    if out.returncode != 0:
        raise SlurmError(f"`{shlex.join(argv)}` failed with exit code {out.returncode}: "
                         f"{(out.stderr or out.stdout).strip() or '(no output)'}")
    return out.stdout


# ---- pure: what to submit ---------------------------------------------------
def job_name(workload_id: str, attempt: int) -> str:
    return f"{NAME_PREFIX}.{workload_id}.{attempt}"


def parse_job_name(name: str) -> Optional[tuple[str, int]]:
    """``(workload id, attempt)`` of one of our job names, else None."""
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != NAME_PREFIX or not parts[2].isdigit() or not parts[1]:
        return None
    return parts[1], int(parts[2])


def time_limit_minutes(seconds: float) -> int:
    """Slurm's time limits are whole minutes: round up, never below one."""
    return max(1, math.ceil(seconds / 60.0))


def sbatch_args(spec: LaunchSpec, partitions: dict, extra: Sequence[str] = (),
                warn_before_limit: bool = False, environ=None,
                account: Optional[Account] = None) -> list[str]:
    """The sbatch options for one attempt (the script is a separate file),
    run as ``account`` when one is given (root submits it).

    At the time limit Slurm itself sends SIGTERM, then SIGKILL ``KillWait``
    seconds later, and the job ends TIMEOUT. ``warn_before_limit`` instead
    gives the job its own grace period: ``--signal=B:TERM@grace`` with the
    limit extended by the grace, so the TERM comes at the job's limit (Slurm
    sends it up to a minute early). A job that exits on that TERM ends as it
    exits, not TIMEOUT: it finished before Slurm's limit.
    """
    if not spec.placement:
        raise BackendError(f"attempt {spec.workload_id}/{spec.attempt} has no placement: "
                           f"the scheduler places every Slurm job")
    per_node = spec.gpus_per_node or len(spec.placement[0][1])
    attempt_dir = os.path.abspath(spec.attempt_dir)
    args = ["--parsable",
            f"--job-name={job_name(spec.workload_id, spec.attempt)}",
            f"--nodes={len(spec.placement)}",
            f"--nodelist={','.join(spec.nodes)}",
            "--ntasks-per-node=1",
            f"--output={os.path.join(attempt_dir, LOG_FILE)}",
            "--open-mode=append",
            f"--chdir={spec.cwd}",
            # The scheduler requeues (as a new attempt); Slurm must not rerun it.
            "--no-requeue",
            "--kill-on-invalid-dep=yes",
            f"--comment={job_comment(spec)}",
            # sbatch passes its whole environment by default, the service's
            # hub token and database URL with it: only these names go; the
            # script sets the job's own (batch_script), an account's login
            # variables included.
            "--export=" + ",".join(sorted(kept_environment(
                os.environ if environ is None else environ, login=account is None)))]
    if account is not None:
        args += [f"--uid={account.uid}", f"--gid={account.gid}"]
    if per_node:
        args.append(f"--gres=gpu:{per_node}")
    partition = partitions.get(spec.pool, spec.pool)
    if partition:
        args.append(f"--partition={partition}")
    if spec.time_limit is not None:
        grace = max(1, min(65535, math.ceil(spec.grace_period)))
        if warn_before_limit:
            args.append(f"--time={time_limit_minutes(spec.time_limit + grace)}")
            # B: the batch step only, which is the command (the script execs it).
            args.append(f"--signal=B:TERM@{grace}")
        else:
            args.append(f"--time={time_limit_minutes(spec.time_limit)}")
    return args + list(extra)


def job_comment(spec: LaunchSpec) -> str:
    # Whose it is, for `squeue -o %k` and sacct, without accounting setup.
    fields = (("gpuhub", spec.workload_id), ("team", spec.team), ("user", spec.user),
              ("pool", spec.pool), ("priority", spec.priority))
    return " ".join(f"{k}={v}" for k, v in fields if v)


def job_env(spec: LaunchSpec) -> dict:
    """What the job sees on top of what ``--export`` lets through of the
    submitting service's environment."""
    env = {**spec.env, "GPUHUB_WORKLOAD_ID": spec.workload_id,
           "GPUHUB_ATTEMPT": str(spec.attempt),
           "GPUHUB_ATTEMPT_DIR": os.path.abspath(spec.attempt_dir)}
    if spec.checkpoint_dir:
        env["GPUHUB_CHECKPOINT_DIR"] = os.path.abspath(spec.checkpoint_dir)
    return env


def batch_script(spec: LaunchSpec, account: Optional[Account] = None) -> str:
    """A POSIX sh script that sets the job's environment and execs its command.

    exec: the command *is* the batch step, so ``--signal=B:TERM`` and
    ``scancel --full`` reach it directly and its exit code is the job's.
    CUDA_VISIBLE_DEVICES is Slurm's for a GPU job; a job without GPUs gets
    it empty (none visible), as in the local backend.
    """
    env = {**(account_env(account) if account is not None else {}), **job_env(spec)}
    lines = ["#!/bin/sh", f"# GPU Hub workload {spec.workload_id}, attempt {spec.attempt}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())
              if k != "CUDA_VISIBLE_DEVICES"]
    if not (spec.gpus_per_node or any(g for _, g in spec.placement)):
        lines.append("export CUDA_VISIBLE_DEVICES=")
    if spec.checkpoint_dir:
        lines.append('mkdir -p "$GPUHUB_CHECKPOINT_DIR"')
    lines.append("exec " + shlex.join(spec.argv))
    return "\n".join(lines) + "\n"


# ---- pure: what Slurm says --------------------------------------------------
@dataclass(frozen=True)
class JobInfo:
    job_id: str
    name: str
    state: str                       # first word: "CANCELLED by 0" -> "CANCELLED"
    exit_code: Optional[str] = None  # "rc:signal"
    end_time: Optional[float] = None
    reason: str = ""
    nodes: str = ""                  # Slurm hostlist where it runs: "gpu[01-02],gpu07"
    user: str = ""                   # whose job it is (squeue %u)

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES


SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%u"


def parse_squeue(text: str) -> list[JobInfo]:
    """Lines of ``squeue --noheader --format='%i|%j|%T|%r|%N|%u'``."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 3:
            raise ValueError(f"unexpected squeue line {line!r}")
        jobs.append(JobInfo(parts[0].strip(), parts[1], _state(parts[2]),
                            reason=parts[3] if len(parts) > 3 else "",
                            nodes=parts[4].strip() if len(parts) > 4 else "",
                            user=parts[5].strip() if len(parts) > 5 else ""))
    return jobs


def parse_scontrol_job(text: str) -> Optional[JobInfo]:
    """``scontrol show job --oneliner ID`` output, or None for an unknown job."""
    fields = parse_oneliner(text.strip().splitlines()[0]) if text.strip() else {}
    if "JobId" not in fields:
        return None
    return JobInfo(fields["JobId"], fields.get("JobName", ""), _state(fields.get("JobState", "")),
                   fields.get("ExitCode"), _slurm_time(fields.get("EndTime")),
                   fields.get("Reason", ""))


SACCT_FIELDS = "JobID,JobName,State,ExitCode,End"


def parse_sacct(text: str) -> list[JobInfo]:
    """``sacct --parsable2 --noheader --format=JobID,JobName,State,ExitCode,End``:
    the job lines only (``123``, not its steps ``123.batch``)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or "." in parts[0]:
            continue
        jobs.append(JobInfo(parts[0], parts[1], _state(parts[2]), parts[3] or None,
                            _slurm_time(parts[4])))
    return jobs


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list: ``gpu[01-03,07],cpu1`` -> gpu01, gpu02, gpu03, gpu07, cpu1."""
    names = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", hostlist):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{n:0{len(lo)}d}{suffix}")
    return names


def _state(text: str) -> str:
    return text.strip().split(" ")[0].rstrip("+").upper()


def _slurm_time(text: Optional[str]) -> Optional[float]:
    """Slurm prints local times, ``2026-11-30T00:24:55``; Unknown/None -> None."""
    try:
        return datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def returncode_of(exit_code: Optional[str]) -> Optional[int]:
    """``rc:signal`` -> rc, or -signal when a signal ended it (subprocess's convention)."""
    if not exit_code or ":" not in exit_code:
        return None
    rc, sig = exit_code.split(":", 1)
    try:
        rc_i, sig_i = int(rc), int(sig)
    except ValueError:
        return None
    return -sig_i if sig_i else rc_i


def exit_from_state(workload_id: str, attempt: int, job: JobInfo, stopped: bool,
                    now: float) -> AttemptExit:
    """How an ended job's attempt ended.

    COMPLETED/FAILED -> EXITED with its code; TIMEOUT/DEADLINE -> TIME_LIMIT;
    NODE_FAIL/BOOT_FAIL -> LOST (its node died under it); PREEMPTED -> STOPPED
    (Slurm's own preemption: the scheduler requeues it); CANCELLED -> STOPPED
    if we stopped it, else LOST (someone ran scancel behind the hub's back).
    Anything that ends after we stopped it is STOPPED, as in the local backend.
    """
    rc = returncode_of(job.exit_code)
    finished = job.end_time or now
    state = job.state
    if state in ("TIMEOUT", "DEADLINE"):
        reason = TIME_LIMIT
    elif stopped or state == "PREEMPTED":
        reason = STOPPED
    elif state == "COMPLETED":
        reason, rc = EXITED, 0
    elif state in ("FAILED", "OUT_OF_MEMORY"):
        reason = EXITED
        if not rc:
            rc = -9 if state == "OUT_OF_MEMORY" else 1  # failed, yet no code said so
    else:  # CANCELLED, NODE_FAIL, BOOT_FAIL, REVOKED, unknown
        reason = LOST
    return AttemptExit(workload_id, attempt, reason, rc, finished)


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

    def make_accounts(self, prefix: str, home_for: Callable[[str], str]):
        """The accounts jobs run as, from ``accounts_from``; kept as ``accounts``."""
        if self.accounts_from == "directory":
            self.accounts = DirectoryAccounts(self.user_map, self.user_template, home_for)
        else:
            self.accounts = Accounts(prefix, home_for)
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
        # Replicas bind to the loopback address: serving through Slurm needs
        # slurmd on the service's host (as in the one-host harness).
        return local_replica_address(port)

    def job_id(self, workload_id: str, attempt: int) -> Optional[str]:
        j = self._jobs.get((workload_id, attempt))
        return j.job_id if j else None

    def discover(self) -> list:
        """The cluster's GPU nodes as ``[(scheduler Node, [Gpu, ...]), ...]``."""
        found = slurm_inventory.discover(self._run, self.pool_from, self.partitions, self.log)
        self._nodes = {n.name: n for n, _ in found}
        self._nodes_read_at = self._clock()
        return found

    def take_node_changes(self) -> list:
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
    def start(self, spec: LaunchSpec) -> str:
        """Submit the attempt; returns its Slurm job id."""
        key = (spec.workload_id, spec.attempt)
        if key in self._jobs:
            raise BackendError(f"attempt {key} is already running")
        if not spec.argv:
            raise BackendError(f"attempt {key} has no command")
        attempt_dir = os.path.abspath(spec.attempt_dir)
        if os.path.exists(os.path.join(attempt_dir, JOB_FILE)):
            raise BackendError(f"attempt directory {attempt_dir} was already used")
        account = None
        if self.accounts is not None:
            try:
                account = self.accounts.ensure(spec.user)
            except (AccountError, OSError, ValueError) as e:
                raise BackendError(f"attempt {key}: no account for user {spec.user!r}: {e}") from e
        args = sbatch_args(spec, self.partitions, self.sbatch_args, self.warn_before_time_limit,
                           account=account)
        try:
            os.makedirs(attempt_dir, exist_ok=True)
            script = os.path.join(attempt_dir, SCRIPT_FILE)
            with os.fdopen(create_own(script, 0o600), "w") as f:  # it holds the job's token
                f.write(batch_script(spec, account))
            self._prepare(spec, attempt_dir, account)
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
        return job_id

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
            ran = set(expand_hostlist(info.nodes))
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

