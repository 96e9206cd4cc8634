"""The process that forks the local backend's runners (backends/runner_server.py).

A forked runner must be what a runner started as a program was: its own
session, stdin /dev/null, stdout and stderr the log, ``/`` as cwd, the
server's fixed environment, no descriptor of the server's, a fresh
interpreter's signal dispositions; and its command must get what the
runner's ``Popen`` gives it. And the server must not be what a start
depends on: one that died is replaced, one that is closed leaves its
runners running, and the runners it started are reaped.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from gpuspawner.backends.runner import EXIT_FILE, proc_stat
from gpuspawner.backends.runner_server import SERVER_ARGV, RunnerServer, RunnerServerError
from test_local_backend import wait_until

RUNNERS_ENV = {"PATH": "/usr/bin:/bin", "ONLY": "this"}

# What the command reports of itself and of its runner (its parent), as one JSON line.
REPORT = """
import json, os, sys
runner = os.getppid()
def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v, 16) for k, v in (l.split(":\\t") for l in f.read().splitlines())
                if k in ("SigIgn", "SigBlk", "SigCgt")}
print(json.dumps({
    "pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(), "env": dict(os.environ),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "stdin": os.readlink("/proc/self/fd/0"), "signals": status("self"),
    "runner": {"pid": runner, "sid": os.getsid(runner),
               "name": open(f"/proc/{runner}/comm").read().strip(), "cwd": os.readlink(f"/proc/{runner}/cwd"),
               "fds": {f: os.readlink(f"/proc/{runner}/fd/{f}")
                       for f in os.listdir(f"/proc/{runner}/fd")},
               "signals": status(runner)}}), flush=True)
print("to stderr", file=sys.stderr)
"""


@pytest.fixture
def server():
    server = RunnerServer(RUNNERS_ENV)
    yield server
    server.close()


def gone(pid: int) -> bool:
    """Gone, not a zombie: its parent reaped it."""
    return proc_stat(pid) is None


def start(server, tmp_path, command, env=None, name="attempt") -> tuple[int, str]:
    """Start a runner of ``command``; its pid and its attempt directory."""
    attempt = tmp_path / name
    attempt.mkdir()
    (attempt / "env.json").write_text(json.dumps(env or {"ONLY": "the job's"}))
    fd = os.open(attempt / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        pid, ticks = server.start_runner(
            ["--dir", str(attempt), "--cwd", str(tmp_path), "--grace", "1", "--", *command], fd)
    finally:
        os.close(fd)
    assert ticks is not None
    return pid, str(attempt)


def run(server, tmp_path, command, **kw) -> tuple[str, dict, int]:
    """What the runner and its command wrote, the exit record, the runner's pid."""
    pid, attempt = start(server, tmp_path, command, **kw)
    wait_until(lambda: gone(pid))
    with open(os.path.join(attempt, "output.log")) as f:
        log = f.read()
    with open(os.path.join(attempt, EXIT_FILE)) as f:
        return log, json.load(f), pid


def test_a_forked_runner_is_what_a_started_one_was_and_so_is_its_command(server, tmp_path):
    log, exit_record, pid = run(server, tmp_path, [sys.executable, "-I", "-c", REPORT])
    first, rest = log.split("\n", 1)
    seen = json.loads(first)
    runner = seen["runner"]
    assert runner["pid"] == pid == runner["sid"], "the runner leads a session of its own"
    assert runner["cwd"] == "/"
    assert runner["name"] == "gpuhub-runner", "what an operator's ps -C shows"
    log_path = f"{tmp_path}/attempt/output.log"
    assert runner["fds"] == {"0": "/dev/null", "1": log_path, "2": log_path}, \
        "nothing of the server's"
    terminate, usr1, chld = (1 << (s - 1) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD))
    assert runner["signals"]["SigCgt"] & (terminate | usr1) == terminate | usr1
    assert not runner["signals"]["SigCgt"] & chld, "the server's SIGCHLD handler is undone"
    # Its command: in the runner's session and group, in --cwd, the job's environment.
    assert seen["sid"] == pid and seen["cwd"] == str(tmp_path)
    assert {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"} == {
        "ONLY": "the job's", "PYTHONUNBUFFERED": "1"}
    assert seen["fds"] == [0, 1, 2, 3], "0-2 and the listing's own"
    assert seen["stdin"] == "/dev/null"
    assert rest.strip() == "to stderr", "stderr goes to the log too"
    assert exit_record["returncode"] == 0 and exit_record["reason"] == "exited"


def test_the_runner_has_the_servers_environment_not_the_services(server, tmp_path):
    log, _, _ = run(server, tmp_path, [sys.executable, "-I", "-c", (
        "import os; print(open(f'/proc/{os.getppid()}/environ').read().replace(chr(0), ' '))")])
    assert sorted(log.split()) == ["ONLY=this", "PATH=/usr/bin:/bin"]


def test_a_command_ignores_and_blocks_what_popen_would_have_it(server, tmp_path):
    # Python ignores SIGPIPE and SIGXFSZ for itself (the runner is Python);
    # a command gets the defaults, or `yes | head` would never end. What the
    # service itself was started ignoring stays ignored, as with its own Popen.
    log, _, _ = run(server, tmp_path, ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"])
    with open("/proc/self/status") as f:
        ours = signal_masks(f.read())
    python_own = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
    assert signal_masks(log) == {"SigIgn": ours["SigIgn"] & ~python_own, "SigBlk": 0}


def signal_masks(status: str) -> dict[str, int]:
    return {k: int(v, 16) for k, v in (line.split(":\t") for line in status.splitlines())
            if k in ("SigIgn", "SigBlk")}


@pytest.mark.parametrize("args, says", [
    (["--grace", "1", "--", "true"], "error: --dir is required"),
    (["--dir", "/nonexistent/attempt", "--", "true"], "FileNotFoundError"),  # it crashes
], ids=["usage", "crash"])
def test_a_runner_that_fails_says_why_in_its_log_as_its_program_would(server, tmp_path,
                                                                       args, says):
    log = tmp_path / "log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        pid, _ = server.start_runner(args, fd)
    finally:
        os.close(fd)
    wait_until(lambda: gone(pid))
    program = [*SERVER_ARGV[:-1], SERVER_ARGV[-1].replace("runner_server import", "runner import")]
    done = subprocess.run([*program, *args], capture_output=True, text=True, cwd="/",
                          start_new_session=True)
    assert says in done.stderr and says in log.read_text()


def test_the_start_time_it_answers_is_the_runners(server, tmp_path):
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    (attempt / "env.json").write_text("{}")
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        pid, ticks = server.start_runner(["--dir", str(attempt), "--", "/bin/sleep", "5"], fd)
    finally:
        os.close(fd)
    try:
        assert proc_stat(pid)[1] == ticks
    finally:
        os.kill(pid, signal.SIGUSR1)  # as the service ends an attempt
    wait_until(lambda: gone(pid))


def test_the_runners_group_can_be_signalled_as_soon_as_the_server_answers(server, tmp_path):
    """The service stops an attempt by signalling its group (pgid = the
    runner's pid): right after a fork the child is still in the server's
    group, and a stop sent then would be lost."""
    for n in range(30):
        pid, _ = start(server, tmp_path, ["/bin/sleep", "30"], name=f"a{n}")
        try:
            os.killpg(pid, signal.SIGKILL)  # the runner and its command, if it started
        except ProcessLookupError:
            os.kill(pid, signal.SIGKILL)
            raise


def test_a_server_that_died_is_replaced_at_the_next_start(server, tmp_path):
    run(server, tmp_path, ["/bin/true"], name="first")
    first = server.server_pid
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: server._server.poll() is not None)
    log, exit_record, _ = run(server, tmp_path, ["/bin/echo", "again"], name="second")
    assert server.server_pid not in (None, first)
    assert log == "again\n" and exit_record["returncode"] == 0


def test_closing_it_ends_the_server_and_leaves_its_runners_running(server, tmp_path):
    pid, _ = start(server, tmp_path, ["/bin/sleep", "30"])
    process = server.server_pid
    server.close()
    try:
        assert gone(process), "the server ends when the service's end of its socket closes"
        assert proc_stat(pid)[0] in "SR", "a runner outlives the server, as it outlives the service"
    finally:
        os.kill(pid, signal.SIGUSR1)  # as the service ends an attempt
    wait_until(lambda: proc_stat(pid) is None or proc_stat(pid)[0] == "Z")


def test_the_server_reaps_what_it_started(server, tmp_path):
    pids = [start(server, tmp_path, ["/bin/true"], name=f"a{n}")[0] for n in range(20)]
    wait_until(lambda: all(gone(p) for p in pids))  # a zombie would still be in /proc


def test_a_command_line_too_long_is_refused_before_the_server_hears_of_it(server, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(RunnerServerError, match="too long"):
            server.start_runner(["--dir", str(tmp_path), "--", "echo", "x" * (17 * 2**20)], fd)
        assert server.server_pid is None
    finally:
        os.close(fd)


def test_a_command_that_cannot_be_entered_says_why_in_its_log(server, tmp_path):
    """What fails between the fork and the command (its working directory,
    its cgroups, its account) is written to the log: Popen itself says only
    "Exception occurred in preexec_fn"."""
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    (attempt / "env.json").write_text(json.dumps({"ONLY": "the job's"}))
    fd = os.open(attempt / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    missing = tmp_path / "no-such-directory"
    try:
        pid, _ = server.start_runner(
            ["--dir", str(attempt), "--cwd", str(missing), "--grace", "1", "--", "true"], fd)
    finally:
        os.close(fd)
    wait_until(lambda: gone(pid))
    log = (attempt / "output.log").read_text()
    assert f"before the command: FileNotFoundError: [Errno 2] No such file or directory: " \
           f"'{missing}'" in log, log
    assert "cannot start the command" in log
    with open(attempt / EXIT_FILE) as f:
        assert json.load(f)["returncode"] == 126
