"""One workload that cannot be launched or found again fails alone, with its
reason, and gives its GPUs back: it never stops a scheduling cycle or a
restart (issue 16, item 1). A real database (SQLite and PostgreSQL), real job
processes, and each step of the launch and of the recovery made to fail for
one workload only."""
from __future__ import annotations

import glob
import json
import os
import signal
import sys

import pytest
from sqlalchemy import select

from gpuspawner.backends.local import LocalBackend
from gpuspawner.service.loop import launch
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.launch import Launcher
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.store import Allocation, WorkloadRow

from test_engine_restart import ALICE, make_engine, run_until, state

BOB = Identity("bob", teams=frozenset({"b"}), can_submit=True)


def sleeper(seconds: float, gpus: int = 1):
    """A job that ignores SIGTERM (it stays stopping until its grace period
    ends) and says so in its attempt directory."""
    code = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(os.path.join(os.environ['GPUHUB_ATTEMPT_DIR'], 'ignoring'), 'w').close(); "
            f"time.sleep({seconds})")
    return parse_job({"command": [sys.executable, "-c", code], "gpus": gpus, "pool": "default"})


def ignoring_sigterm(eng: Engine, wid: str) -> bool:
    return os.path.exists(os.path.join(eng.launcher.attempt_dir(wid, 0), "ignoring"))


def allocations(engine: Engine, wid: str) -> int:
    with engine.store.session() as s:
        return len(s.scalars(select(Allocation).where(Allocation.workload_id == wid)).all())


class Injected(RuntimeError):
    pass


def fail_for(bad: set, original, key):
    """``original`` that raises for the workloads in ``bad``."""
    def wrapper(*args, **kw):
        if key(*args, **kw) in bad:
            raise Injected("injected failure")
        return original(*args, **kw)
    return wrapper


# Each step of a launch: (where, attribute, which argument names the workload).
LAUNCH_STEPS = {
    "launch spec": (Launcher, "launch_spec", lambda self, s, row: row.id),
    "command line": (launch, "job_argv", lambda spec, attempt_dir: attempt_dir.split("/")[-2]),
    "backend start": (LocalBackend, "start", lambda self, spec: spec.workload_id),
}
RECOVERY_STEPS = {
    "launch spec": LAUNCH_STEPS["launch spec"],
    "command line": LAUNCH_STEPS["command line"],
    "backend recover": (LocalBackend, "recover",
                        lambda self, specs: next((s.workload_id for s in specs
                                                  if s.workload_id in BAD), None)),
}
BAD: set = set()


@pytest.fixture(autouse=True)
def _cleanup(tmp_path):
    yield
    BAD.clear()
    # Jobs outlive an engine by design; a workload that could not be found
    # again leaves its process behind.
    for path in glob.glob(f"{tmp_path}/workloads/*/attempt-*/runner.json"):
        try:
            with open(path) as f:
                os.killpg(json.load(f)["pid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


@pytest.mark.parametrize("step", list(LAUNCH_STEPS))
def test_a_launch_that_fails_fails_alone(db_url, tmp_path, monkeypatch, step):
    eng = make_engine(db_url, tmp_path)
    where, name, key = LAUNCH_STEPS[step]
    monkeypatch.setattr(where, name, fail_for(BAD, getattr(where, name), key))
    bad = eng.submit(ALICE, sleeper(30, gpus=2)).id
    other = eng.submit(BOB, sleeper(0.2, gpus=2)).id
    BAD.add(bad)
    # Both are admitted in the same cycle: the one that cannot start fails,
    # the other team's job starts and ends.
    run_until(eng, lambda: state(eng, other).state == "succeeded")
    row = state(eng, bad)
    assert row.state == "failed"
    assert "could not start" in row.reason and "injected failure" in row.reason
    assert allocations(eng, bad) == 0 and bad not in eng.scheduler.state.running
    # Its GPUs are free: a 4-GPU job runs.
    BAD.clear()
    four = eng.submit(ALICE, sleeper(0.1, gpus=4)).id
    run_until(eng, lambda: state(eng, four).state == "succeeded")


@pytest.mark.parametrize("step", list(RECOVERY_STEPS))
def test_a_recovery_that_fails_fails_alone(db_url, tmp_path, monkeypatch, step):
    first = make_engine(db_url, tmp_path)
    bad = first.submit(ALICE, sleeper(60, gpus=2)).id
    good = first.submit(BOB, sleeper(60, gpus=2)).id
    run_until(first, lambda: state(first, bad).state == state(first, good).state == "running")
    # The service restarts; finding the bad one again fails.
    BAD.add(bad)
    where, name, key = RECOVERY_STEPS[step]
    monkeypatch.setattr(where, name, fail_for(BAD, getattr(where, name), key))
    second = make_engine(db_url, tmp_path)  # does not raise
    row = state(second, bad)
    assert row.state == "failed" and "injected failure" in row.reason, row.reason
    assert allocations(second, bad) == 0 and bad not in second.scheduler.state.running
    # The other job was adopted, running on: it holds its GPUs.
    assert state(second, good).state == "running" and good in second.scheduler.state.running
    assert allocations(second, good) == 2
    # The bad one's GPUs are free for new work.
    fits = second.submit(ALICE, sleeper(0.1, gpus=2)).id
    run_until(second, lambda: state(second, fits).state == "succeeded")
    second.cancel(BOB, good)
    run_until(second, lambda: state(second, good).state == "cancelled")


def test_a_stop_that_fails_at_restart_fails_alone(db_url, tmp_path, monkeypatch):
    first = make_engine(db_url, tmp_path)
    bad = first.submit(ALICE, sleeper(60, gpus=2)).id
    good = first.submit(BOB, sleeper(60, gpus=2)).id
    run_until(first, lambda: ignoring_sigterm(first, bad) and ignoring_sigterm(first, good))
    first.cancel(ALICE, bad)
    first.cancel(BOB, good)
    BAD.add(bad)
    monkeypatch.setattr(LocalBackend, "stop", fail_for(BAD, LocalBackend.stop,
                                                       lambda self, wid, attempt, grace: wid))
    second = make_engine(db_url, tmp_path)
    assert state(second, bad).state == "cancelled"
    assert allocations(second, bad) == 0
    run_until(second, lambda: state(second, good).state == "cancelled")


def test_a_stored_workload_that_cannot_run_does_not_keep_the_service_down(db_url, tmp_path):
    """The wedge of issue 16: a workload stored with an empty notebook path
    (what the API took before) and no command. Admitted, it fails alone;
    already running at a restart, it fails alone, and the restart goes on."""
    eng = make_engine(db_url, tmp_path)
    running = eng.submit(ALICE, sleeper(60, gpus=1)).id
    run_until(eng, lambda: state(eng, running).state == "running")
    broken_spec = {"command": None, "shell": False, "notebook": "", "parameters": {},
                   "working_dir": str(tmp_path), "env": {}, "checkpoint_dir": str(tmp_path)}
    with eng.store.transaction() as s:
        s.get(WorkloadRow, running).spec = broken_spec
    # Restart: the running one cannot be found again (no command line).
    second = make_engine(db_url, tmp_path)
    row = state(second, running)
    assert row.state == "failed" and "neither a command nor a notebook" in row.reason
    assert allocations(second, running) == 0
    # A queued one stored the same way: the cycle that admits it goes on.
    queued = second.submit(ALICE, sleeper(30, gpus=2)).id
    other = second.submit(BOB, sleeper(0.2, gpus=2)).id
    with second.store.transaction() as s:
        s.get(WorkloadRow, queued).spec = broken_spec
    run_until(second, lambda: state(second, other).state == "succeeded"
              and state(second, queued).state == "failed")
    assert "neither a command nor a notebook" in state(second, queued).reason
    assert not second.scheduler.state.running


def test_cancelling_a_stopping_workload_again_records_nothing(db_url, tmp_path):
    from gpuspawner.store import AuditEntry, EventRow
    eng = make_engine(db_url, tmp_path)
    wid = eng.submit(ALICE, sleeper(60)).id
    run_until(eng, lambda: ignoring_sigterm(eng, wid))
    eng.cancel(ALICE, wid)
    with eng.store.session() as s:
        before = (len(s.scalars(select(EventRow).where(EventRow.workload_id == wid)).all()),
                  len(s.scalars(select(AuditEntry).where(AuditEntry.target == wid)).all()))
    for _ in range(5):
        assert eng.cancel(ALICE, wid).state == "stopping"
    with eng.store.session() as s:
        after = (len(s.scalars(select(EventRow).where(EventRow.workload_id == wid)).all()),
                 len(s.scalars(select(AuditEntry).where(AuditEntry.target == wid)).all()))
    assert after == before
    run_until(eng, lambda: state(eng, wid).state == "cancelled")


def test_a_zero_gpu_job_waits_while_its_node_is_drained(db_url, tmp_path):
    from dataclasses import replace
    eng = make_engine(db_url, tmp_path)

    def drain(drained: bool) -> None:  # what PATCH /nodes/host does to the engine
        node = replace(eng.nodes["host"].node, drained=drained)
        eng.nodes["host"].node = node
        eng.scheduler.set_node(node)
    drain(True)
    wid = eng.submit(ALICE, sleeper(0.1, gpus=0)).id
    for _ in range(5):
        eng.tick()
    row = state(eng, wid)
    assert row.state == "queued" and "drained" in row.reason
    drain(False)
    run_until(eng, lambda: state(eng, wid).state == "succeeded")
