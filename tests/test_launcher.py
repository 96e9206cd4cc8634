"""The helper that starts the local backend's runners (backends/launcher.py).

What a started program sees must be what ``subprocess.Popen(...,
start_new_session=True)`` gave it: its own session, stdin /dev/null, stdout
and stderr the log, ``/`` as cwd, only the given environment, no descriptor
of the service's, default signal dispositions. And the helper must not be
what a start depends on: one that died is replaced, one that is closed
leaves its runners running, and the runners it started are reaped.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import sys

import pytest

from gpuspawner.backends.launcher import Launcher, LauncherError
from gpuspawner.backends.runner import proc_stat
from test_local_backend import wait_until

# What a started program reports of itself, as one JSON line on stdout.
REPORT = """
import json, os, sys
print(json.dumps({"pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(),
                  "env": dict(os.environ), "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
                  "stdin": os.readlink("/proc/self/fd/0")}), flush=True)
print("to stderr", file=sys.stderr)
"""


@pytest.fixture
def launcher():
    launcher = Launcher()
    yield launcher
    launcher.close()


def gone(pid: int) -> bool:
    """Gone, not a zombie: its parent reaped it."""
    return proc_stat(pid) is None


def run(launcher, tmp_path, argv, env) -> tuple[str, int]:
    """What ``argv`` wrote once it ended, and its pid."""
    log = tmp_path / "output.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        pid, ticks = launcher.spawn(argv, env, fd)
    finally:
        os.close(fd)
    assert ticks is not None
    wait_until(lambda: gone(pid))
    return log.read_text(), pid


def run_report(launcher, tmp_path) -> tuple[dict, str]:
    text, pid = run(launcher, tmp_path, [sys.executable, "-I", "-c", REPORT], {"ONLY": "this"})
    lines = text.splitlines()
    return json.loads(lines[0]) | {"spawned": pid}, "\n".join(lines[1:])


def test_a_started_program_sees_what_a_session_leaders_popen_gave_it(launcher, tmp_path):
    seen, rest = run_report(launcher, tmp_path)
    assert seen["pid"] == seen["spawned"] == seen["sid"], "a session of its own"
    assert seen["cwd"] == "/"
    assert {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"} == {"ONLY": "this"}
    assert seen["fds"] == [0, 1, 2, 3], "0-2 and the listing's own: nothing of the service's"
    assert seen["stdin"] == "/dev/null"
    assert rest == "to stderr", "stderr goes to the log too"


def signal_masks(status: str) -> dict[str, int]:
    return {k: int(v, 16) for k, v in (line.split(":\t") for line in status.splitlines())
            if k in ("SigIgn", "SigBlk")}


def test_a_started_program_ignores_and_blocks_what_popen_would_have_it(launcher, tmp_path):
    # Python ignores SIGPIPE and SIGXFSZ for itself (the helper is Python);
    # a program gets the defaults, or `yes | head` would never end. What the
    # service itself was started ignoring stays ignored, as with its own Popen.
    text, _ = run(launcher, tmp_path, ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"], {})
    with open("/proc/self/status") as f:
        ours = signal_masks(f.read())
    python_own = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
    assert signal_masks(text) == {"SigIgn": ours["SigIgn"] & ~python_own, "SigBlk": 0}


def test_the_start_time_it_answers_is_the_programs(launcher, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    pid, ticks = launcher.spawn(["/bin/sleep", "5"], {}, fd)
    os.close(fd)
    try:
        assert proc_stat(pid)[1] == ticks
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid))


def test_a_program_that_cannot_be_started_says_why(launcher, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(LauncherError) as e:
            launcher.spawn([str(tmp_path / "no-such-program")], {}, fd)
        assert e.value.errno == errno.ENOENT
        assert "no-such-program" in str(e.value)
        # and the helper goes on
        pid, _ = launcher.spawn(["/bin/true"], {}, fd)
    finally:
        os.close(fd)
    wait_until(lambda: gone(pid))


def test_a_helper_that_died_is_replaced_at_the_next_start(launcher, tmp_path):
    seen, _ = run_report(launcher, tmp_path)
    first = launcher.helper_pid
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: launcher._helper.poll() is not None)
    seen, _ = run_report(launcher, tmp_path)
    assert launcher.helper_pid not in (None, first)
    assert seen["env"]["ONLY"] == "this"


def test_closing_it_ends_the_helper_and_leaves_its_runners_running(launcher, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    pid, _ = launcher.spawn(["/bin/sleep", "30"], {}, fd)
    os.close(fd)
    helper = launcher.helper_pid
    launcher.close()
    try:
        assert gone(helper), "the helper ends when the service's end of its socket closes"
        assert proc_stat(pid)[0] in "SR", "a runner outlives the helper, as it outlives the service"
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_helper_reaps_what_it_started(launcher, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        pids = [launcher.spawn(["/bin/true"], {}, fd)[0] for _ in range(20)]
    finally:
        os.close(fd)
    wait_until(lambda: all(gone(p) for p in pids))  # a zombie would still be in /proc


def test_a_command_line_too_long_is_refused_before_the_helper_hears_of_it(launcher, tmp_path):
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(LauncherError, match="too long"):
            launcher.spawn(["/bin/echo", "x" * (17 * 2**20)], {}, fd)
        assert launcher.helper_pid is None
    finally:
        os.close(fd)
