"""The supervisor that runs one attempt and records how it ended.

    python -m gpuspawner.backends.runner --dir ATTEMPT_DIR [--cwd DIR]
        [--time-limit SECONDS] [--grace SECONDS] [--cgroup PATH]... [--groups GID,...]
        [--user ACCOUNT [--make-dir DIR]...] [--dataset NAME=PATH]... [--niceness N]
        -- ARGV...

The local backend starts it as the leader of a new session, so it outlives
the service, and its process group holds everything the attempt runs (a
fork of its runner server, runner_server.py, that goes straight to
``main``: the same process as this command line would start, without an
interpreter's start per attempt). It
leaves its traces in ATTEMPT_DIR, which is all a restarted service needs:

- ``env.json`` (the local backend's, mode 0600, read and removed before
  the command starts): the command's environment. The runner itself (root,
  with ``--user``) runs with a fixed environment of the backend's: were the
  job's its own, the dynamic loader would run the user's code as root
  before any privilege drop (LD_PRELOAD, LD_AUDIT, GCONV_PATH, ...). The
  command gets it at its exec, after the drop;
- ``runner.json`` before the command starts: pid, pgid and start_ticks
  (field 22 of /proc/<pid>/stat, which tells this runner from a later
  process that reuses its pid);
- ``output.log``: the command's stdout and stderr, appended. It is the
  runner's own stdout, opened by the backend before the directory became
  the account's: neither the runner nor the service opens it by name in a
  directory the job can write to;
- ``exit.json`` once the command has ended: returncode (negative: killed by
  that signal, as in ``subprocess``), reason (exited, time-limit, stopped)
  and finished_at. A runner killed with SIGKILL leaves none.

The runner stays in the caller's cgroups; the command joins each ``--cgroup``
(its GPUs' device cgroup, its memory and cpu limits) and takes the
supplementary ``--groups`` (device groups) first thing in its preexec step,
so everything it starts is held to them (gpuspawner/isolation/cgroups.py).
A placement that cannot be entered is a command that cannot be started.

With ``--user`` the runner stays root (its records can be trusted, and the
user cannot signal it) and starts the command as that system account: a
preexec step in the forked child drops its groups, gid and uid before it
executes the command (``preexec``: where the device cgroup join goes too,
before the drop). ``--make-dir`` directories are made after the drop, as
the account (a checkpoint directory inside the user's workspace), and the
command's ``--cwd`` is entered after it too: root never follows a path the
user may have changed.

Each ``--dataset`` (root only) is seen by the command, and only by it and
what it starts, read-only at ``/datasets/NAME``: the forked child enters a
mount namespace of its own before the drop (isolation/dataset_mounts.py).

The service may start the runner niced (``GpuHubService.start_niceness``:
starting a runner is work the API's requests go before); with
``--niceness`` the command gets that priority back, first thing in its
preexec step, while the runner is still root.

A command that cannot be executed at all ends as reason "exited" with the
shell's codes, 127 (not found) or 126 (not executable), and a line in
output.log saying why: to the user it is a command that failed.

A process that leaves the group (``setsid``, a daemon's double fork) is
still the runner's: the runner is its subreaper (PR_SET_CHILD_SUBREAPER),
so it stays among the runner's descendants, and every way an attempt ends
kills all of them (``_sweep``): when the command has ended, at the time
limit's SIGKILL, and on SIGUSR1, which is how the service ends an attempt
at once (it does not SIGKILL the runner, which could then sweep nothing).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Optional

from ..isolation.accounts import AccountError, compose, drop_privileges, from_passwd, telling
from ..isolation.attempt_pids import descendants
from ..isolation.placement import Placement, enter
from ..isolation import dataset_mounts
from ..jsonfile import read_json, write_json
from .exits import EXITED, STOPPED, TIME_LIMIT

ENV_FILE = "env.json"
RUNNER_FILE = "runner.json"
EXIT_FILE = "exit.json"
LOG_FILE = "output.log"
# A job's environment: at most 256 variables of 64 KiB each (vocab/specs.py), and ours.
MAX_ENV_FILE = 32 << 20


PR_SET_CHILD_SUBREAPER = 36


def proc_stat(pid: int) -> Optional[tuple[str, int]]:
    """(state, start_ticks) of a live or zombie process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[19])  # fields 3 and 22


# The runner's options: name -> (attribute, converter, default; a list
# default: repeatable). Parsed by hand, not with argparse: the service starts
# one runner per attempt, and importing argparse was a tenth of each start.
_OPTIONS = {
    "--dir": ("dir", str, None),             # the attempt directory (required)
    "--cwd": ("cwd", str, None),             # where the command runs (entered after the drop)
    "--time-limit": ("time_limit", float, None),
    "--grace": ("grace", float, 30.0),       # seconds between SIGTERM and SIGKILL at the limit
    "--cgroup": ("cgroup", str, []),         # a cgroup directory the command joins
    "--groups": ("groups", str, ""),         # comma-separated supplementary group ids
    "--user": ("user", str, None),           # the account the command runs as (runner: root)
    "--make-dir": ("make_dir", str, []),     # made as --user before the command starts
    "--dataset": ("dataset", str, []),       # NAME=PATH: read-only at /datasets/NAME
    "--niceness": ("niceness", int, None),   # the command's nice value (the runner's may be higher)
}


class UsageError(Exception):
    pass


def parse_options(argv: list[str]) -> tuple[SimpleNamespace, list[str]]:
    """The options before ``--`` and the command after it (UsageError: what is wrong)."""
    if "--" not in argv:
        raise UsageError("the command must follow --")
    split = argv.index("--")
    args = SimpleNamespace(**{attr: list(default) if isinstance(default, list) else default
                              for attr, _convert, default in _OPTIONS.values()})
    options = iter(argv[:split])
    for word in options:
        name, eq, value = word.partition("=")
        if name not in _OPTIONS:
            raise UsageError(f"unrecognized argument: {word}")
        attr, convert, default = _OPTIONS[name]
        if not eq:
            value = next(options, None)
            if value is None:
                raise UsageError(f"{name} expects a value")
        try:
            value = convert(value)
        except ValueError:
            raise UsageError(f"{name}: not a number: {value!r}") from None
        if isinstance(default, list):
            getattr(args, attr).append(value)
        else:
            setattr(args, attr, value)
    if args.dir is None:
        raise UsageError("--dir is required")
    if not argv[split + 1:]:
        raise UsageError("no command after --")
    if args.make_dir and not args.user:
        raise UsageError("--make-dir goes with --user")
    try:
        args.dataset = dataset_mounts.parse(args.dataset)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return args, argv[split + 1:]


def _parse(argv: list[str]) -> tuple[SimpleNamespace, list[str]]:
    try:
        args, command = parse_options(argv)
        if os.getpgrp() != os.getpid():
            # Signals go to the whole group; in someone else's group they would hit them too.
            raise UsageError("must lead its own process group (start it with setsid)")
    except UsageError as e:
        usage = __doc__.split("\n\n")[1]
        print(f"usage:\n{usage}\ngpuspawner runner: error: {e}", file=sys.stderr)
        sys.exit(2)
    return args, command


class _Cause:
    """Why the command is ending, when something ends it: the first cause wins."""

    reason: Optional[str] = None
    killed = False      # SIGUSR1: the service ends the attempt now
    launching = False   # the command is being started, or runs

    def note(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


def main(argv: Optional[list[str]] = None) -> None:
    args, command = _parse(sys.argv[1:] if argv is None else argv)
    cause = _Cause()

    def on_sigterm(signum, frame):
        # The service signals the whole group: the command gets this SIGTERM too.
        # The runner only notes it and stays to record the exit.
        cause.note(STOPPED)

    def on_sigusr1(signum, frame):
        # The service ends the attempt now: everything under the runner goes,
        # the command's wait returns, and the exit is recorded as stopped.
        cause.note(STOPPED)
        cause.killed = True
        if not cause.launching:
            os.kill(os.getpid(), signal.SIGKILL)  # nothing of the job's runs yet
        _sweep(reap=False)

    # A SIGTERM or SIGUSR1 before this point kills the runner (no exit.json:
    # the service knows it stopped it); one before the command starts is not
    # passed on, and the service's SIGUSR1 at the end of the grace period ends
    # the attempt.
    _become_subreaper()
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGUSR1, on_sigusr1)
    write_json(os.path.join(args.dir, RUNNER_FILE), {
        "pid": os.getpid(), "pgid": os.getpgrp(),
        "start_ticks": proc_stat(os.getpid())[1], "started_at": time.time()}, durable=False)

    env = _job_environment(args.dir)
    placement = Placement(args.cgroup, [int(g) for g in args.groups.split(",") if g])
    if env is None:
        _say(f"cannot start the command: no {ENV_FILE} of the service's in {args.dir}")
        _finish(args.dir, 126, EXITED)
        return
    if args.dataset:
        try:
            dataset_mounts.prepare(args.dataset, "the service (and so this runner)")
        except OSError as e:
            _say(f"cannot start the command: {e}")
            _finish(args.dir, 126, EXITED)
            return
    cause.launching = True
    try:
        # stdout and stderr: the runner's own, the log.
        child = subprocess.Popen(command, stderr=subprocess.STDOUT,
                                 env={**env, "PYTHONUNBUFFERED": "1"},
                                 preexec_fn=preexec(args, placement))
    except (subprocess.SubprocessError, AccountError) as e:  # no such account, or
        # the preexec step failed (cgroup join, privilege drop): the command never ran
        _say(f"cannot start the command: {e}")
        _finish(args.dir, 126, EXITED)
        return
    except OSError as e:
        _say(f"cannot start {command[0]!r}: {e}")
        _finish(args.dir, 127 if isinstance(e, FileNotFoundError) else 126, EXITED)
        return
    if cause.killed:  # it came while the command was being started
        _sweep(reap=False)
    returncode = _wait(child, args.time_limit, args.grace, cause)
    _finish(args.dir, returncode, cause.reason or EXITED)


def _say(line: str) -> None:
    os.write(sys.stdout.fileno(), f"gpuspawner: {line}\n".encode())


def _job_environment(attempt_dir: str) -> Optional[dict]:
    """The command's environment from the service's env.json, removed once
    read (it holds the job's token)."""
    path = os.path.join(attempt_dir, ENV_FILE)
    env = read_json(path, max_bytes=MAX_ENV_FILE)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    if env is None or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return None
    return env


def preexec(args: SimpleNamespace, placement: Placement):
    """What the forked child does before it executes the command, in this
    order: take the command's priority (the runner's may be lower: the
    service starts runners niced), join the attempt's cgroups, become the
    account (keeping the placement's device groups), make its directories as
    the account, go to its working directory."""
    niceness = getattr(args, "niceness", None)
    prioritize = ((lambda: os.setpriority(os.PRIO_PROCESS, 0, niceness))
                  if niceness is not None else None)
    enter_placement = ((lambda: enter(placement))
                       if placement.cgroups or placement.gids else None)
    enter_placement = compose(prioritize, enter_placement)
    if getattr(args, "dataset", None):
        enter_placement = compose(enter_placement, dataset_mounts.mount_step(args.dataset))
    cwd = args.cwd
    go_to_cwd = (lambda: os.chdir(cwd)) if cwd else None
    if not args.user:
        return telling(compose(enter_placement, go_to_cwd))
    dirs = list(args.make_dir)

    def make_dirs() -> None:
        for d in dirs:
            os.makedirs(d, exist_ok=True)
    return telling(compose(enter_placement,
                           drop_privileges(from_passwd(args.user), extra_gids=placement.gids),
                           make_dirs, go_to_cwd))


def _wait(child: subprocess.Popen, time_limit: Optional[float], grace: float,
          cause: _Cause) -> int:
    """Wait for the command, enforcing the time limit: SIGTERM, then SIGKILL after grace."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    terminated = False
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return child.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        if not terminated:
            cause.note(TIME_LIMIT)
            # The whole group, as the service does when it stops an attempt.
            os.killpg(os.getpid(), signal.SIGTERM)
            terminated, deadline = True, time.monotonic() + grace
        else:
            # Not the group: that would kill the runner before it records the exit.
            _sweep(reap=False)
            deadline = None


def _finish(attempt_dir: str, returncode: int, reason: str) -> None:
    write_json(os.path.join(attempt_dir, EXIT_FILE), {
        "returncode": returncode, "reason": reason, "finished_at": time.time()})
    # The attempt is over and its GPUs go to the next one: nothing it left
    # behind, in its group or out of it, may keep running. The runner goes last.
    _sweep(reap=True)
    os.killpg(os.getpid(), signal.SIGKILL)


_libc: Optional[ctypes.CDLL] = None


def libc() -> ctypes.CDLL:
    """This process's C library (loaded once: the runner server loads it
    before it forks, and its runners share it)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _become_subreaper() -> None:
    if libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _sweep(reap: bool, timeout: float = 10.0) -> None:
    """SIGKILL everything under this runner until nothing is left (what forks
    meanwhile is caught by the next round). ``reap``: collect the zombies
    too (not while the command's own wait is pending: it must get its code)."""
    deadline = time.monotonic() + timeout
    while True:
        if reap:
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                pass
        live = descendants(os.getpid())
        if not live or time.monotonic() > deadline:
            return
        for p in live:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


if __name__ == "__main__":
    main()
