"""The pure half of the Slurm backend: the job names, sbatch arguments and
batch scripts it submits, and how it reads squeue, scontrol and sacct (and
run_command, the one place a command runs)."""
from __future__ import annotations

import math
import os
import shlex
import subprocess
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional, Sequence

from ...inventory.slurm import parse_oneliner
from ...isolation.accounts import Account, account_env
from ..base import EXITED, LOST, STOPPED, TIME_LIMIT, AttemptExit, BackendError, LaunchSpec, \
    kept_environment


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
    args += cpu_memory_args(spec)
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


def cpu_memory_args(spec: LaunchSpec) -> list[str]:
    """What the workload asked for besides GPUs, per node as cons_tres
    counts it (one task per node): ``--cpus-per-task`` in whole CPUs,
    rounded up (Slurm allocates whole cores), and ``--mem`` in MiB, rounded
    up. None: an attempt stored before requests, Slurm's defaults. A site's
    own ``SlurmBackend.sbatch_args`` come later and win."""
    args = []
    if spec.cpus:
        args.append(f"--cpus-per-task={max(1, math.ceil(spec.cpus - 1e-9))}")
    if spec.memory:
        args.append(f"--mem={max(1, -(-spec.memory // (1 << 20)))}M")
    return args


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


RENDEZVOUS_PORT_BASE = 20000  # a gang's MASTER_PORT: this + its Slurm job id % 10000


def batch_script(spec: LaunchSpec, account: Optional[Account] = None,
                 addresses: Optional[dict] = None, team_dir: str = "") -> str:
    """A POSIX sh script that sets the job's environment and execs its command.

    exec: the command *is* the batch step, so ``--signal=B:TERM`` and
    ``scancel --full`` reach it directly and its exit code is the job's.
    CUDA_VISIBLE_DEVICES is Slurm's for a GPU job; a job without GPUs gets
    it empty (none visible), as in the local backend.

    A gang (several nodes) execs ``srun`` instead, one task per node, each
    with its rank (``gang_rank_script``); ``addresses`` ({node: NodeAddr})
    gives MASTER_ADDR, the address of the placement's first node (rank 0).
    ``team_dir``: the team's shared folder (``$GPUHUB_TEAM_DIR``), "" for none.
    """
    env = {**(account_env(account) if account is not None else {}), **job_env(spec)}
    if team_dir:
        env["GPUHUB_TEAM_DIR"] = team_dir
    if len(spec.placement) > 1:
        env.update(gang_env(spec, addresses or {}))
    lines = ["#!/bin/sh", f"# GPU Hub workload {spec.workload_id}, attempt {spec.attempt}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())
              if k != "CUDA_VISIBLE_DEVICES"]
    if not (spec.gpus_per_node or any(g for _, g in spec.placement)):
        lines.append("export CUDA_VISIBLE_DEVICES=")
    if spec.checkpoint_dir:
        lines.append('mkdir -p "$GPUHUB_CHECKPOINT_DIR"')
    if team_dir:
        lines.append('[ -d "$GPUHUB_TEAM_DIR" ] && [ -w "$GPUHUB_TEAM_DIR" ] || echo "gpuhub: the '
                     'team space $GPUHUB_TEAM_DIR cannot be written on node '
                     '${SLURMD_NODENAME:-$(hostname)} (is the account in the team\'s group?)" >&2')
    lines += dataset_lines(spec)
    if len(spec.placement) > 1:
        lines.append(f'export MASTER_PORT=$(({RENDEZVOUS_PORT_BASE} + SLURM_JOB_ID % 10000))')
        lines.append('export GPUHUB_MASTER_PORT="$MASTER_PORT"')
        # --export=ALL: sbatch's --export list (SLURM_EXPORT_ENV) would strip the above.
        # --kill-on-bad-exit: one rank failing ends them all, as a gang.
        lines.append("exec srun --export=ALL --kill-on-bad-exit=1 --nodes="
                     f"{len(spec.placement)} --ntasks-per-node=1 /bin/sh -c "
                     + shlex.quote(gang_rank_script(spec, addresses or {}))
                     + " gpuhub-rank " + shlex.join(spec.argv))
    else:
        lines.append("exec " + shlex.join(spec.argv))
    return "\n".join(lines) + "\n"


# The exit status of a job whose dataset cannot be read where it runs
# (sysexits' EX_NOINPUT: an input file did not exist or was not readable).
DATASET_UNREADABLE = 66


def dataset_lines(spec: LaunchSpec) -> list[str]:
    """Slurm mounts nothing for a job: each dataset is checked on the node
    where the job starts (its registered folder is there, on the shared
    filesystem, and the account may list and read it), then linked at
    ``$GPUHUB_DATASETS_DIR/NAME`` (in the attempt's directory) so that jobs
    find their datasets the same way on every platform. A dataset that fails
    the check ends the job before its command, with a line in its log that
    names it, the folder and the node."""
    if not spec.datasets:
        return []
    lines = ['export GPUHUB_DATASETS_DIR="$GPUHUB_ATTEMPT_DIR/datasets"',
             'mkdir -p "$GPUHUB_DATASETS_DIR"']
    for name, folder in spec.datasets:
        q = shlex.quote(folder)
        why = shlex.quote(f"gpuhub: dataset {name}: {folder} cannot be read on node ")
        lines.append(f'if [ -d {q} ] && [ -r {q} ] && [ -x {q} ]; then '
                     f'ln -sfn {q} "$GPUHUB_DATASETS_DIR"/{shlex.quote(name)}; '
                     f'else echo {why}"${{SLURMD_NODENAME:-$(hostname)}}" >&2; '
                     f'exit {DATASET_UNREADABLE}; fi')
    return lines


def gang_env(spec: LaunchSpec, addresses: dict) -> dict:
    """What every rank of a gang shares: where rank 0 listens and how many
    there are (MASTER_PORT is set in the script, from the job id)."""
    master = addresses.get(spec.nodes[0]) or spec.nodes[0]
    n = str(len(spec.placement))
    return {"MASTER_ADDR": master, "GPUHUB_MASTER_ADDR": master, "WORLD_SIZE": n,
            "GPUHUB_NUM_NODES": n,
            "GPUHUB_NODE_ADDRS": ",".join(addresses.get(node) or node for node in spec.nodes)}


def gang_rank_script(spec: LaunchSpec, addresses: dict) -> str:
    """Run by srun on each node: its rank is its place in the placement
    (rank 0 on the first node, MASTER_ADDR's), then exec the command."""
    cases = " ".join(f"{shlex.quote(node)}) r={i} a={shlex.quote(addresses.get(node) or node)};;"
                     for i, node in enumerate(spec.nodes))
    return (f'case "$SLURMD_NODENAME" in {cases} '
            '*) echo "gpuhub: node $SLURMD_NODENAME is not in the placement" >&2; exit 97;; esac; '
            'export RANK=$r NODE_RANK=$r GPUHUB_NODE_RANK=$r LOCAL_RANK=0 GPUHUB_NODE_ADDR=$a; '
            'exec "$@"')


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
