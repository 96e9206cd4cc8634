"""Runs attempts as processes on this machine, one supervising runner each.

Each attempt runs under ``runner.py`` in a session of its own, so it
survives a restart of the service, and everything it starts shares one
process group that ``stop`` and ``kill`` signal as a whole. Runners are
forked by a helper process that imported the runner once (runner_server.py:
an interpreter's start a job was most of a start's CPU, and the service's
own fork held its event loop's lock), and watched by pid and start time.
The runner's ``exit.json`` is the authority on how an attempt ended; a runner that is
gone without one was killed: STOPPED if this backend stopped or killed it,
else LOST.

An attempt is reported once its runner is gone, not as soon as exit.json
appears: by then the runner has also killed whatever the command left in
its group, so the GPUs really are free. Its cgroups are removed first, in a
thread of the backend's (the service polls on its event loop, and a removal
that finds processes left kills them and waits): the poll after that
reports it, and the backend asks the service for that poll (``set_wake``).

With a ``GpuEnforcement`` (gpuspawner/isolation/cgroups.py) each attempt
gets its placement before the runner starts: a cgroup that allows exactly
its GPUs' device nodes (or its GPUs' device groups), and cgroups holding it
to its CPU and memory request (capped by its team's or pool's limits) and
the pids limit. Its paths are kept in ``cgroup.json`` in the
attempt directory, so the cgroups are removed when the attempt is reported
ended, also by a service that restarted in between.

A stop in progress (its deadline) lives in memory only: after a restart
the service re-issues ``stop`` for attempts it was stopping. At the
deadline, and for ``kill``, the runner gets SIGUSR1: it SIGKILLs everything
under it, also what left the process group (runner.py), and records the
exit. A runner still there ``SWEEP_GRACE`` seconds later (it cannot be, but
a runner of an older release does not know SIGUSR1) gets SIGKILL with its
whole group.

With ``accounts`` (the service runs as root) the command runs as the
submitting user's system account, created on first use; the runner stays
root. The attempt directory is root's, group the account's, mode 1770: the
job writes its outputs there (a notebook's default output), but cannot
replace or remove the runner's records, and what it plants under the name
of one not yet written (a FIFO, a link, a forged exit.json or cgroup.json)
is not read as one: records are read through gpuspawner/safefiles.py. A
checkpoint directory outside the user's workspace is handed to the
account; one inside it is made by the account itself. Either way a job's environment is built from
base.ENV_KEEP only: none of the service's credentials reach it. And it
reaches the command only: the root runner starts with a fixed environment
(``runner_environment``) and the job's waits in ``env.json`` (root's, mode
0600) until the runner hands it to the command's exec, after the privilege
drop, so no LD_PRELOAD of a user's is ever loaded by root.
"""
from __future__ import annotations

import hashlib
import logging
import os
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from ..isolation import cgroups
from ..isolation.accounts import (Account, Accounts, account_env,
                                  prepare_checkpoint)
from ..isolation.attempt_pids import cgroup_pids, descendants
from ..isolation.gpu_rules import Limits, visible_devices
from ..isolation.placement import Placement
from ..isolation.user_env import user_path
from ..jsonfile import read_json, write_json
from ..safefiles import create_own
from .base import (LOST, STOPPED, AttemptExit, Backend, BackendError, LaunchSpec, Started,
                   account_of, kept_environment)
from .runner_server import RunnerServer
from .runner import ENV_FILE, EXIT_FILE, RUNNER_FILE, proc_stat
from ..vocab.datasets import MOUNT_ROOT as DATASETS_ROOT

LAUNCH_FILE = "launch.json"
CGROUP_FILE = "cgroup.json"
SWEEP_GRACE = 5.0
# The one thread (per process, whatever the backends) that removes ended
# attempts' cgroups: its first use starts it.
UNPLACING = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-unplace")
log = logging.getLogger(__name__)


def runner_environment(environ) -> dict:
    """The root runner's own environment (its server's, runner_server.py):
    fixed, and nothing of the job's. The service's LD_LIBRARY_PATH (its
    operator's, not a user's) goes along where the server's interpreter
    needs it to start."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    if environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = environ["LD_LIBRARY_PATH"]
    return env


@dataclass
class _Attempt:
    spec: LaunchSpec
    pid: int                         # the runner: also the process group id
    start_ticks: Optional[int]       # tells the runner from a later process with its pid
    stopped: bool = False            # stopped or killed by us
    kill_at: Optional[float] = None  # when a stop turns into a kill
    swept_at: Optional[float] = None  # when the runner was told to kill everything


class LocalBackend(Backend):
    """Attempts as process groups of this host, each under a supervisor
    (runner.py) that drops to its user's account and records its exit."""

    starts_off_loop = True
    names_attempt_pids = True

    def __init__(self, clock: Callable[[], float] = time.time,
                 enforcement: Optional[cgroups.GpuEnforcement] = None,
                 accounts: Optional[Accounts] = None, start_niceness: int = 0):
        self._clock = clock
        self.enforcement = enforcement
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        # Attempts whose runner is gone, while their cgroups are removed in
        # ``UNPLACING``'s thread (poll runs on the service's event loop, and a
        # removal that finds processes left waits for them): reported by the
        # first poll after. ``_wake`` asks the service for that poll.
        self._ending: dict[tuple[str, int], Future] = {}
        self._wake: Callable[[], None] = lambda: None
        self.accounts = accounts
        # Only root can give the command its priority back (runner.py).
        niceness = start_niceness if os.geteuid() == 0 else 0
        self.runner_server = RunnerServer(runner_environment(os.environ), niceness=niceness)
        # What a runner gives its command back: the service's own priority.
        self._command_niceness = os.getpriority(os.PRIO_PROCESS, 0) if niceness else None

    def running(self) -> set[tuple[str, int]]:
        return set(self._attempts)

    def start(self, spec: LaunchSpec) -> Started:
        """Launch the attempt's runner; ``ref``: its pid (= its process group id).

        A command that cannot be executed is not an error here: the runner
        records it as an exit with returncode 127 or 126 (see runner.py).
        """
        key = (spec.workload_id, spec.attempt)
        attempt_dir = self._new_attempt_dir(spec, key)
        account = account_of(self.accounts, spec)
        env = self._environment(spec, account, attempt_dir)
        if not os.path.isdir(spec.cwd):
            raise BackendError(f"attempt {key}: working directory {spec.cwd} does not exist")
        args = ["--dir", attempt_dir,
                "--cwd", os.path.abspath(spec.cwd), "--grace", str(spec.grace_period)]
        if spec.time_limit is not None:
            args += ["--time-limit", str(spec.time_limit)]
        if self._command_niceness is not None:
            args += ["--niceness", str(self._command_niceness)]
        try:
            os.makedirs(attempt_dir, exist_ok=True)
            args += self._place(spec, attempt_dir).runner_args()
            for name, folder in spec.datasets:  # read-only at /datasets/NAME (runner.py)
                args += ["--dataset", f"{name}={folder}"]
            if spec.checkpoint_dir:
                env["GPUHUB_CHECKPOINT_DIR"] = os.path.abspath(spec.checkpoint_dir)
            # The job's environment goes to the command at its exec, after the
            # privilege drop, never to the root runner (see runner.py).
            write_json(os.path.join(attempt_dir, ENV_FILE), env, mode=0o600, durable=False)
            # Made before the directory is the account's: no link of its own
            # can stand in its place. The runner and its command write to
            # this descriptor, never to the name.
            log = create_own(self.log_path(attempt_dir))
            try:
                if account is not None:
                    args += self._as_account(account, attempt_dir,
                                             env.get("GPUHUB_CHECKPOINT_DIR"))
                elif spec.checkpoint_dir:
                    os.makedirs(env["GPUHUB_CHECKPOINT_DIR"], exist_ok=True)
                # The runner's own complaints (bad arguments, import errors) land in it too.
                pid, start_ticks = self.runner_server.start_runner(
                    args + ["--", *spec.argv], log)
            finally:
                os.close(log)
        except OSError as e:
            self._unplace(attempt_dir, "its start failed")
            try:
                os.unlink(os.path.join(attempt_dir, ENV_FILE))  # it holds the job's token
            except FileNotFoundError:
                pass
            raise BackendError(f"cannot start attempt {key}: {e}") from e
        self._attempts[key] = _Attempt(spec, pid, start_ticks)
        # Written before start() returns, so a service that restarts before
        # the runner wrote runner.json still finds the process.
        if start_ticks is not None:
            write_json(os.path.join(attempt_dir, LAUNCH_FILE),
                       {"pid": pid, "pgid": pid, "start_ticks": start_ticks}, durable=False)
        return Started(spec.workload_id, spec.attempt, str(pid))

    def _new_attempt_dir(self, spec: LaunchSpec, key: tuple[str, int]) -> str:
        """The attempt's directory, absolute (the runner works in spec.cwd,
        where a relative one would resolve elsewhere), refused if this
        attempt runs or ran there already (its old exit.json would be taken
        for this run's)."""
        if key in self._attempts:
            raise BackendError(f"attempt {key} is already running")
        if not spec.argv:
            raise BackendError(f"attempt {key} has no command")
        attempt_dir = os.path.abspath(spec.attempt_dir)
        if any(os.path.exists(os.path.join(attempt_dir, f)) for f in (RUNNER_FILE, LAUNCH_FILE)):
            raise BackendError(f"attempt directory {attempt_dir} was already used")
        return attempt_dir

    @staticmethod
    def _environment(spec: LaunchSpec, account: Optional[Account], attempt_dir: str) -> dict:
        """What the command's environment holds: the login variables, a user's
        PATH (isolation/user_env.py: this environment's bin, so "python" and
        "gpuhub" as in the notebooks, then the system's; nothing of the
        service's own root-only dirs), the job's own variables, its GPUs (none
        visible when it has none, rather than all) and its attempt."""
        return {**kept_environment(os.environ, login=account is None),
                **(account_env(account) if account else {}),
                "PATH": user_path(),
                **spec.env,
                **visible_devices(spec.devices, spec.device_uuids),
                "GPUHUB_WORKLOAD_ID": spec.workload_id,
                "GPUHUB_ATTEMPT": str(spec.attempt),
                "GPUHUB_ATTEMPT_DIR": attempt_dir,
                **({"GPUHUB_DATASETS_DIR": DATASETS_ROOT} if spec.datasets else {})}

    def _place(self, spec: LaunchSpec, attempt_dir: str) -> Placement:
        """The attempt's cgroups (or device groups), recorded before the runner starts."""
        if self.enforcement is None:
            return Placement()
        digest = hashlib.sha1(attempt_dir.encode()).hexdigest()[:8]
        placement = self.enforcement.create(
            cgroups.safe_name("job", spec.workload_id, str(spec.attempt), digest),
            spec.devices, spec.team, spec.pool, spec.device_uuids, kind=spec.kind,
            request=Limits(spec.memory, spec.cpus))
        write_json(os.path.join(attempt_dir, CGROUP_FILE), placement.to_json(),
                   durable=False)
        return placement

    @staticmethod
    def _unplace(attempt_dir: str, why: str) -> None:
        path = os.path.join(attempt_dir, CGROUP_FILE)
        data = read_json(path)
        if data is None:
            return
        left = cgroups.remove(Placement.from_json(data), logger=log,
                              reason=f"the service ends attempt {attempt_dir}: {why}")
        if left:
            log.warning("could not remove the cgroups of %s: %s", attempt_dir, "; ".join(left))
        else:
            os.unlink(path)

    @staticmethod
    def _as_account(account: Account, attempt_dir: str, checkpoint: Optional[str]) -> list[str]:
        """The attempt directory and checkpoint set up for the account; the
        runner's options that run the command as it."""
        os.chown(attempt_dir, 0, account.gid)
        os.chmod(attempt_dir, 0o1770)
        options = ["--user", account.name]
        if checkpoint and prepare_checkpoint(checkpoint, account):
            options += ["--make-dir", checkpoint]
        return options

    def attempt_pids(self, workload_id: str, attempt: int) -> Optional[frozenset]:
        """The running attempt's processes (its command and all it started),
        for the memory watch of shared GPUs: its cgroups' members, or
        without cgroups the runner's descendants (isolation/attempt_pids.py).
        None when the attempt is not running here."""
        a = self._attempts.get((workload_id, attempt))
        if a is None or not self._alive(a):
            return None
        placement = Placement.from_json(
            read_json(os.path.join(os.path.abspath(a.spec.attempt_dir), CGROUP_FILE)))
        if placement.cgroups:
            return cgroup_pids(placement.cgroups)
        return frozenset(descendants(a.pid))

    def stop(self, workload_id: str, attempt: int, grace: float) -> None:
        """SIGTERM the attempt's group now, SIGKILL it at the first poll after grace."""
        a = self._attempts.get((workload_id, attempt))
        if a is None:
            return  # already reported, or never ours
        a.stopped = True
        deadline = self._clock() + grace
        if a.kill_at is None:
            # Only the first stop sends SIGTERM: a second might checkpoint twice.
            self._signal(a, signal.SIGTERM)
            a.kill_at = deadline
        else:
            a.kill_at = min(a.kill_at, deadline)

    def kill(self, workload_id: str, attempt: int) -> None:
        a = self._attempts.get((workload_id, attempt))
        if a is not None:
            a.stopped = True
            self._kill(a)

    def set_wake(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def poll(self) -> list[AttemptExit]:
        """Escalate stops past their deadline; report each ended attempt, once,
        when its cgroups are gone (removed off the caller's thread: the
        ended attempts of this poll are reported by the next)."""
        exits = []
        for key, a in list(self._attempts.items()):
            ending = self._ending.get(key)
            if ending is None:
                if self._alive(a):
                    if a.swept_at is not None or (a.kill_at is not None
                                                  and self._clock() >= a.kill_at):
                        self._kill(a)  # (again: the SIGKILL fallback)
                    continue
                if a.swept_at is not None:
                    # A runner that died of the SIGUSR1 (an older release's) may
                    # have left its command: the group goes now, the runner just gone.
                    self._killpg(a.pid)
                self._ending[key] = self._unplace_later(a)
                continue
            if not ending.done():
                continue
            del self._ending[key]
            if ending.exception() is not None:  # tried again at the next poll
                log.error("cannot end attempt %s: %s", key, ending.exception())
                continue
            exits.append(self._exit_record(a.spec, a.stopped))
            del self._attempts[key]
        return exits

    def _unplace_later(self, a: _Attempt) -> Future:
        ending = UNPLACING.submit(self._unplace, os.path.abspath(a.spec.attempt_dir),
                                  "it was stopped" if a.stopped else "its runner ended")
        ending.add_done_callback(lambda _: self._wake())
        return ending

    def _kill(self, a: _Attempt) -> None:
        """End the attempt now: the runner kills everything under it (SIGUSR1),
        or, if it has not SWEEP_GRACE seconds later, SIGKILL to its group."""
        if a.swept_at is None:
            a.swept_at = self._clock()
            self._signal(a, signal.SIGUSR1, group=False)
        elif self._clock() >= a.swept_at + SWEEP_GRACE:
            self._signal(a, signal.SIGKILL)

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        """Find the attempts a previous service started: adopt the live, report the ended.

        Starts nothing. An attempt with neither runner.json (written by the
        runner) nor launch.json (written by start() before it returns) is
        LOST: the service died before starting it.
        """
        exits = []
        for spec in specs:
            key = (spec.workload_id, spec.attempt)
            if key in self._attempts:
                continue
            info = (read_json(os.path.join(spec.attempt_dir, RUNNER_FILE))
                    or read_json(os.path.join(spec.attempt_dir, LAUNCH_FILE)))
            if info is not None:
                a = _Attempt(spec, info["pid"], info["start_ticks"])
                if self._alive(a):
                    self._attempts[key] = a
                    continue
            exits.append(self._exit(spec, stopped=False))
        return exits

    def _alive(self, a: _Attempt) -> bool:
        # Not our child (the runner server's, or a previous service's): a zombie
        # counts as gone, and a different start time means its pid now
        # belongs to someone else.
        stat = proc_stat(a.pid)
        return stat is not None and stat[0] != "Z" and stat[1] == a.start_ticks

    def _signal(self, a: _Attempt, signum: int, group: bool = True) -> None:
        # Only while the runner is alive: once it is gone its pid may be reused.
        if self._alive(a):
            try:
                (os.killpg if group else os.kill)(a.pid, signum)
            except ProcessLookupError:
                pass  # it ended between the check and the signal

    @staticmethod
    def _killpg(pgid: int) -> None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _exit(self, spec: LaunchSpec, stopped: bool) -> AttemptExit:
        # The runner is gone and killed its group: the cgroups are empty or about to be.
        self._unplace(os.path.abspath(spec.attempt_dir),
                      "it was stopped" if stopped else "its runner ended")
        return self._exit_record(spec, stopped)

    def _exit_record(self, spec: LaunchSpec, stopped: bool) -> AttemptExit:
        """How the attempt ended: its runner's exit.json, else STOPPED (we
        stopped it) or LOST."""
        record = read_json(os.path.join(spec.attempt_dir, EXIT_FILE))
        if record is None:
            return AttemptExit(spec.workload_id, spec.attempt, STOPPED if stopped else LOST,
                               None, self._clock())
        return AttemptExit(spec.workload_id, spec.attempt, record["reason"],
                           record["returncode"], record["finished_at"])
