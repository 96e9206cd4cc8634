"""The local backend, with real processes: short ``python -c`` commands.

Each test asserts what a user would notice: how the attempt is reported
(reason, returncode), what its output.log holds, which GPUs and variables
it sees, that a stop lets it checkpoint or kills everything it started, and
that a restarted service finds its attempts again. Nothing sleeps for long:
the tests poll with a deadline of a few seconds.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from dataclasses import replace

import pytest

from gpuspawner.backends.base import EXITED, LOST, STOPPED, TIME_LIMIT, LaunchSpec
from gpuspawner.backends.local import BackendError, LocalBackend
from gpuspawner.backends.runner import RUNNER_FILE, proc_stat

# Runs until a file named "go" appears in its cwd, then exits 5; a SIGTERM
# makes it checkpoint and exit 0.
WAIT_FOR_GO = """
import os, signal, sys, time
def term(*_):
    print("checkpointing")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready")
while not os.path.exists("go"):
    time.sleep(0.01)
sys.exit(5)
"""

# Ignores SIGTERM, and so does the grandchild it starts (SIG_IGN is inherited).
IGNORE_SIGTERM = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("grandchild", grandchild.pid)
time.sleep(60)
"""


# ---- helpers ---------------------------------------------------------------

def make_spec(tmp_path, code="", attempt=1, argv=None, **kw) -> LaunchSpec:
    return LaunchSpec("job", attempt, argv or (sys.executable, "-c", code),
                      str(tmp_path / f"attempt-{attempt}"), str(tmp_path), **kw)


def wait_until(predicate, timeout=5.0):
    """The first truthy value of predicate(), polled until the deadline."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


def output(spec) -> str:
    try:
        with open(LocalBackend.log_path(spec.attempt_dir)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_for_output(spec, text) -> str:
    """The output once a whole line holding text is there: the runner's
    Python is unbuffered, so print() writes its words one write at a time."""
    def whole_line():
        out = output(spec)
        return any(text in line for line in out.splitlines(keepends=True)
                   if line.endswith("\n")) and out
    return wait_until(whole_line)


def single_exit(backend):
    """Poll until the one attempt ends; it is reported once and untracked."""
    exits = wait_until(backend.poll)
    assert len(exits) == 1
    assert backend.running() == set() and backend.poll() == []
    return exits[0]


def gone(pid, start_ticks) -> bool:
    stat = proc_stat(pid)
    return stat is None or stat[0] == "Z" or stat[1] != start_ticks


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# ---- running ---------------------------------------------------------------

@pytest.mark.parametrize("argv, returncode, logged", [
    ((sys.executable, "-c", "import sys; print('out line'); print('err line', file=sys.stderr)"),
     0, ["out line", "err line"]),
    ((sys.executable, "-c", "import sys; print('out line'); print('err line', file=sys.stderr);"
                            " sys.exit(3)"),
     3, ["out line", "err line"]),
    (("/nonexistent/gpuhub-command",), 127, ["cannot start '/nonexistent/gpuhub-command'"]),
], ids=["exit-0", "exit-3", "not-found"])
def test_exit_is_reported_with_its_returncode_and_output(tmp_path, argv, returncode, logged):
    backend = LocalBackend()
    spec = make_spec(tmp_path, argv=argv)
    pid = int(backend.start(spec).ref)
    assert backend.running() == {("job", 1)} and pid > 0
    e = single_exit(backend)
    assert (e.workload_id, e.attempt, e.reason, e.returncode) == ("job", 1, EXITED, returncode)
    assert e.succeeded == (returncode == 0)
    for line in logged:
        assert line in output(spec)


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19


def test_a_start_yields_the_cpu_but_the_command_runs_at_the_services_priority(tmp_path):
    # A storm of starts (each a new interpreter) must not take the cores
    # from the service's API; what the job runs must not pay for that.
    backend = LocalBackend(start_niceness=7)
    spec = make_spec(tmp_path, "import os, time; print('nice', os.nice(0), flush=True); "
                               "time.sleep(30)")
    runner = int(backend.start(spec).ref)
    own = os.nice(0)
    assert f"nice {own}\n" in wait_for_output(spec, "nice ")
    # Only root can give the command its priority back: otherwise nothing is niced.
    assert nice_of(runner) == (own + 7 if os.geteuid() == 0 else own)
    backend.kill("job", 1)
    assert single_exit(backend).reason == STOPPED


U0 = "GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f"
U2 = "GPU-d9e8f7a6-b5c4-4d3e-a2f1-e0d9c8b7a6f5"
MIG = "MIG-6a2f1b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b"    # a MIG device (docs/gpus.md), host index 9


@pytest.mark.parametrize("gpus, uuids, visible, checkpoint", [
    ((0, 2), (), "0,2", True),            # UUIDs unknown (declared GPUs): by index
    ((0, 2), (U0, U2), f"{U0},{U2}", False),  # NVML's: by UUID, which a device cgroup keeps
    ((), (), "", False),   # no GPUs: none visible, not all of them
    ((9,), (MIG,), MIG, False),           # a MIG device: by its MIG- UUID, the only way CUDA names it
], ids=["two-gpus", "two-gpus-by-uuid", "no-gpus", "mig-device"])
def test_command_sees_exactly_its_gpus_and_attempt(tmp_path, monkeypatch, gpus, uuids, visible,
                                                     checkpoint):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # the service's own must not leak
    code = ("import json, os; print(json.dumps({'cwd': os.getcwd(), **{k: v for k, v in"
            " os.environ.items() if k.startswith(('GPUHUB_', 'CUDA_', 'NVIDIA_', 'MY_'))}}))")
    spec = make_spec(tmp_path, code, attempt=3, devices=gpus, device_uuids=uuids,
                     env={"MY_SETTING": "x"},
                     checkpoint_dir=str(tmp_path / "ckpt") if checkpoint else None)
    backend = LocalBackend()
    backend.start(spec)
    assert single_exit(backend).returncode == 0
    expected = {"cwd": str(tmp_path), "CUDA_VISIBLE_DEVICES": visible, "MY_SETTING": "x",
                "NVIDIA_VISIBLE_DEVICES": visible or "none",
                "GPUHUB_GPU_INDICES": ",".join(map(str, gpus)),
                "GPUHUB_WORKLOAD_ID": "job", "GPUHUB_ATTEMPT": "3",
                "GPUHUB_ATTEMPT_DIR": spec.attempt_dir}
    if checkpoint:
        expected["GPUHUB_CHECKPOINT_DIR"] = spec.checkpoint_dir
        assert os.path.isdir(spec.checkpoint_dir)
    assert json.loads(output(spec)) == expected


def test_python_in_a_job_is_the_services_environments(tmp_path, monkeypatch):
    """A service started as .venv/bin/gpuhub, venv not activated: a job's
    ``python`` is still the venv's (with what the notebooks have), unless
    the job sets its own PATH."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    backend = LocalBackend()
    spec = make_spec(tmp_path, argv=("python", "-c", "import sys; print(sys.prefix)"))
    backend.start(spec)
    assert single_exit(backend).returncode == 0
    assert output(spec).strip() == sys.prefix
    own = make_spec(tmp_path, attempt=2, env={"PATH": "/nowhere"},
                    argv=(sys.executable, "-c", "import os; print(os.environ['PATH'])"))
    backend.start(own)
    single_exit(backend)
    assert output(own).strip() == "/nowhere"


@pytest.mark.parametrize("code, returncode", [
    ("import time; time.sleep(30)", -signal.SIGTERM),
    ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)",
     -signal.SIGKILL),  # SIGKILLed once the grace period is over
], ids=["obeys-sigterm", "ignores-sigterm"])
def test_time_limit_ends_the_attempt(tmp_path, code, returncode):
    backend = LocalBackend()
    backend.start(make_spec(tmp_path, code, time_limit=0.5, grace_period=0.3))
    e = single_exit(backend)
    assert (e.reason, e.returncode) == (TIME_LIMIT, returncode)


@pytest.mark.parametrize("problem", ["same-attempt-twice", "attempt-dir-reused", "no-such-cwd"])
def test_start_refuses_what_it_cannot_run_cleanly(tmp_path, problem):
    backend = LocalBackend()
    spec = make_spec(tmp_path, "pass")
    if problem == "same-attempt-twice":
        backend.start(make_spec(tmp_path, WAIT_FOR_GO))
    elif problem == "attempt-dir-reused":
        backend.start(spec)
        single_exit(backend)
    else:
        spec = replace(spec, cwd=str(tmp_path / "missing"))
    with pytest.raises(BackendError):
        backend.start(spec)
    if problem == "same-attempt-twice":
        (tmp_path / "go").touch()
        assert single_exit(backend).returncode == 5


# ---- stopping --------------------------------------------------------------

def test_stop_lets_the_command_checkpoint(tmp_path):
    backend = LocalBackend()
    spec = make_spec(tmp_path, WAIT_FOR_GO)
    backend.start(spec)
    wait_for_output(spec, "ready")
    backend.stop("job", 1, grace=30)
    e = single_exit(backend)
    assert (e.reason, e.returncode) == (STOPPED, 0)
    assert "checkpointing" in output(spec)


def test_stop_kills_the_whole_group_once_the_grace_period_is_over(tmp_path):
    clock = FakeClock()
    backend = LocalBackend(clock)
    spec = make_spec(tmp_path, IGNORE_SIGTERM)
    pid = int(backend.start(spec).ref)
    grandchild = int(wait_for_output(spec, "grandchild").split()[1])
    processes = [(p, proc_stat(p)[1]) for p in (pid, grandchild)]
    backend.stop("job", 1, grace=10)
    backend.stop("job", 1, grace=60)  # again: harmless, and the deadline stays

    end = time.monotonic() + 0.2
    while time.monotonic() < end:  # within the grace period it keeps running
        assert backend.poll() == []
        time.sleep(0.02)
    clock.now += 10
    e = single_exit(backend)
    assert (e.reason, e.returncode) == (STOPPED, -signal.SIGKILL)  # by the runner, recorded
    wait_until(lambda: all(gone(*p) for p in processes), timeout=2)


# Leaves the job's process group and session as a daemon does (fork, setsid,
# fork), ignoring SIGTERM; then says "ready" and waits for "go" in its cwd,
# exiting 0 on SIGTERM.
ESCAPE = """
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(1, f"escaped {os.getpid()}\\n".encode())  # one write: the lines do not interleave
        time.sleep(600)
    os._exit(0)
os.wait()
if sys.argv[1] == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
os.write(1, b"ready\\n")
while not os.path.exists("go"):
    time.sleep(0.01)
"""


@pytest.mark.parametrize("ending, reason, returncode", [
    ("exits", EXITED, 0),
    ("stopped", STOPPED, 0),
    ("killed", STOPPED, -signal.SIGKILL),
    ("time-limit", TIME_LIMIT, -signal.SIGKILL),
])
def test_what_left_the_process_group_ends_with_the_attempt(tmp_path, ending, reason,
                                                            returncode):
    """No cgroup here: the runner, its subreaper, still finds a process that
    left the group and session, and kills it however the attempt ends."""
    backend = LocalBackend()
    argv = (sys.executable, "-c", ESCAPE,
            "ignore-sigterm" if ending == "time-limit" else "exit-on-sigterm")
    spec = make_spec(tmp_path, argv=argv, time_limit=3.0 if ending == "time-limit" else None,
                     grace_period=0.3)
    backend.start(spec)
    said = wait_until(lambda: "ready" in output(spec) and re.search(r"escaped (\d+)\n",
                                                                    output(spec)))
    escaped = int(said.group(1))
    ticks = proc_stat(escaped)[1]
    if ending == "exits":
        (tmp_path / "go").touch()
    elif ending == "stopped":
        backend.stop("job", 1, grace=30)
    elif ending == "killed":
        backend.kill("job", 1)
    e = single_exit(backend)
    assert (e.reason, e.returncode) == (reason, returncode)
    wait_until(lambda: gone(escaped, ticks), timeout=2)


# ---- restart of the service ------------------------------------------------

@pytest.mark.parametrize("ending, reason, returncode", [
    ("by-itself", EXITED, 5),
    ("stopped-by-new-service", STOPPED, 0),
])
def test_recover_adopts_a_running_attempt_and_reports_its_end(tmp_path, ending, reason,
                                                                returncode):
    old = LocalBackend()
    spec = make_spec(tmp_path, WAIT_FOR_GO)
    old.start(spec)
    wait_for_output(spec, "ready")

    new = LocalBackend()  # the restarted service: nothing in memory
    assert new.recover([spec]) == []
    assert new.running() == {("job", 1)} and new.poll() == []
    if ending == "by-itself":
        (tmp_path / "go").touch()
    else:
        new.stop("job", 1, grace=30)
    # The old backend never reaps it: to the new one it ends as a zombie.
    e = single_exit(new)
    assert (e.reason, e.returncode) == (reason, returncode)
    single_exit(old)


def never_started(tmp_path, backend):
    return make_spec(tmp_path, "pass")  # the service died before starting it


def runner_killed(tmp_path, backend):
    spec = make_spec(tmp_path, WAIT_FOR_GO)
    os.killpg(int(backend.start(spec).ref), signal.SIGKILL)
    assert single_exit(backend).reason == LOST  # nobody here stopped it
    return spec


def pid_reused(tmp_path, backend):
    # runner.json names a live process (this one) that started at another time.
    spec = make_spec(tmp_path, "pass")
    os.makedirs(spec.attempt_dir)
    with open(os.path.join(spec.attempt_dir, RUNNER_FILE), "w") as f:
        json.dump({"pid": os.getpid(), "pgid": os.getpgrp(),
                   "start_ticks": proc_stat(os.getpid())[1] - 1, "started_at": 0}, f)
    return spec


def finished(tmp_path, backend):
    spec = make_spec(tmp_path, "import sys; sys.exit(4)")
    backend.start(spec)
    single_exit(backend)
    return spec


@pytest.mark.parametrize("setup, reason, returncode", [
    (never_started, LOST, None),
    (runner_killed, LOST, None),
    (pid_reused, LOST, None),
    (finished, EXITED, 4),
], ids=lambda v: getattr(v, "__name__", None))
def test_recover_reports_attempts_that_are_no_longer_running(tmp_path, setup, reason,
                                                             returncode):
    spec = setup(tmp_path, LocalBackend())
    files = sorted(tmp_path.rglob("*"))
    new = LocalBackend()
    [e] = new.recover([spec])
    assert (e.workload_id, e.attempt, e.reason, e.returncode) == ("job", 1, reason, returncode)
    assert new.running() == set() and new.poll() == []
    assert sorted(tmp_path.rglob("*")) == files  # recover starts nothing


# ---- reporting -------------------------------------------------------------

def test_every_attempt_is_reported_exactly_once(tmp_path):
    backend = LocalBackend()
    specs = {n: make_spec(tmp_path, code, attempt=n) for n, code in [
        (1, "pass"), (2, "import sys; sys.exit(1)"), (3, WAIT_FOR_GO), (4, WAIT_FOR_GO),
        (5, "pass")]}
    for spec in specs.values():
        backend.start(spec)
    for n in (3, 4):
        wait_for_output(specs[n], "ready")
    backend.stop("job", 3, grace=30)
    backend.kill("job", 4)
    # A stop that comes after the command ended changes nothing.
    wait_until(lambda: os.path.exists(os.path.join(specs[5].attempt_dir, "exit.json")))
    backend.stop("job", 5, grace=30)

    reported = []
    wait_until(lambda: reported.extend(backend.poll()) or len(reported) >= len(specs))
    assert sorted(e.attempt for e in reported) == sorted(specs)  # each once
    assert {e.attempt: (e.reason, e.returncode) for e in reported} == {
        1: (EXITED, 0), 2: (EXITED, 1), 3: (STOPPED, 0), 4: (STOPPED, -signal.SIGKILL),
        5: (EXITED, 0)}
    assert backend.poll() == [] and backend.running() == set()
    backend.stop("job", 3, grace=30)  # already reported: nothing to do, no error
    backend.kill("job", 4)
    assert backend.poll() == []


def test_an_ended_attempt_is_reported_after_its_cgroups_are_removed_without_the_poll_waiting(
        tmp_path, monkeypatch):
    """The service polls on its event loop: removing an ended attempt's
    cgroups (which waits while processes are left in them) runs in a thread,
    and the attempt stays running until it is done, then is reported once."""
    import threading
    removing, release = threading.Event(), threading.Event()

    def slow_unplace(attempt_dir, why):
        removing.set()
        assert release.wait(10)
    monkeypatch.setattr(LocalBackend, "_unplace", staticmethod(slow_unplace))
    backend = LocalBackend()
    woken = []
    backend.set_wake(lambda: woken.append(threading.current_thread().name))
    spec = make_spec(tmp_path, "pass")
    backend.start(spec)
    wait_until(lambda: os.path.exists(os.path.join(spec.attempt_dir, "exit.json")))
    wait_until(lambda: backend.poll() == [] and removing.is_set())
    t0 = time.monotonic()
    assert backend.poll() == [] and backend.running() == {("job", 1)}
    assert time.monotonic() - t0 < 1.0 and not woken
    release.set()
    wait_until(lambda: woken)  # the service is asked for the poll that reports it
    assert woken[0].startswith("gpuhub-unplace")
    x = single_exit(backend)
    assert (x.reason, x.returncode) == (EXITED, 0)


def test_recover_right_after_start_adopts_instead_of_running_it_twice(tmp_path):
    """A service that restarts before the runner wrote runner.json must not
    call the attempt lost (it would be started a second time): start()
    leaves launch.json before it returns."""
    first = LocalBackend()
    spec = make_spec(tmp_path, WAIT_FOR_GO)
    first.start(spec)
    # The command runs (a kill before it starts ends the runner with no
    # exit code at all): runner.json is there, and goes as if the restart
    # came before the runner wrote it.
    wait_for_output(spec, "ready")
    os.remove(os.path.join(spec.attempt_dir, RUNNER_FILE))
    restarted = LocalBackend()
    assert restarted.recover([spec]) == []
    assert restarted.running() == {("job", 1)}
    restarted.kill("job", 1)
    e = single_exit(restarted)
    assert (e.reason, e.returncode) == (STOPPED, -signal.SIGKILL)


def test_a_jobs_runner_is_forked_from_a_server_without_the_scheduler_or_the_services_configuration():
    """Every job, replica and 0-GPU command runs under a runner of its own,
    a fork of the runner server: what the server imports is in every
    runner's memory, and a runner's copy of each page it touches is paid by
    every start, on the cores the service answers requests on. Started as
    the backend starts it (no site-packages), it needs the placement and
    the account switch, not the scheduler core, traitlets or the database
    layer, nor the standard library's heavier modules (argparse,
    dataclasses with inspect, tempfile, logging, hashlib)."""
    import subprocess
    from gpuspawner.backends.runner_server import SERVER_ARGV
    *interpreter, code = SERVER_ARGV
    assert "-S" in interpreter and code.endswith("; main()")
    code = code.removesuffix("main()") + "print(' '.join(sys.modules))"
    out = subprocess.run([*interpreter, code], capture_output=True, text=True, cwd="/",
                         check=True).stdout.split()
    assert "gpuspawner.backends.runner" in out
    heavy = sorted(m for m in out if m.split(".")[0] in (
        "traitlets", "sqlalchemy", "tornado", "argparse", "dataclasses", "inspect", "tempfile",
        "logging", "hashlib") or m.startswith(("gpuspawner.scheduler", "gpuspawner.service")))
    assert heavy == []


def test_modules_a_user_leaves_in_the_jobs_directory_do_not_run_in_the_root_runner(tmp_path):
    """The runner is root and runs the job's directory's command: modules
    named like the ones it imports, left where the user can write and put
    on the job's PYTHONPATH, are not imported by it (``-I -S``: no cwd, no
    PYTHON* variables, no site, no .pth files)."""
    mark = tmp_path / "imported-as-root"
    for name in ("json", "types", "subprocess", "signal", "sitecustomize", "usercustomize"):
        (tmp_path / f"{name}.py").write_text(f"open({str(mark)!r}, 'a').write('{name} ')\n")
    (tmp_path / "gpuspawner").mkdir()
    (tmp_path / "gpuspawner" / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write('pkg ')\n")
    backend = LocalBackend()
    backend.start(make_spec(tmp_path, argv=("/bin/true",),
                            env={"PYTHONPATH": str(tmp_path), "PYTHONSTARTUP": str(tmp_path / "json.py")}))
    e = single_exit(backend)
    assert (e.reason, e.returncode) == (EXITED, 0), output(make_spec(tmp_path))
    assert not mark.exists(), mark.read_text()
