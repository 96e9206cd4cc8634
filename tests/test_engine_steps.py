"""The engine's cycle in steps, and what may happen between them: requests
are served while a cycle is planned, their changes to the core wait until it
is applied, and a decision about a workload that changed meanwhile is
dropped. Also the kinds table, the end of an attempt (``exits.ending``) and
starts off the event loop (``Starter``). A real database (SQLite and
PostgreSQL); a backend that runs nothing, so that the test says what ends."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy import select

from gpuspawner.backends.base import EXITED, LOST, STOPPED, TIME_LIMIT, AttemptExit, Backend
from gpuspawner.scheduler.model import Node
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.exits import Asked, ending
from gpuspawner.service.access.identity import Identity
from gpuspawner.scheduler.kinds import BACKEND_KINDS, KINDS, kind
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.vocab.specs import parse_job
from gpuspawner.service.loop.starts import Starter
from gpuspawner.store import Allocation, Attempt, Store, WorkloadRow

ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)


class Scripted(Backend):
    """Starts nothing; records what it was asked."""

    def __init__(self):
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.exits: list[AttemptExit] = []

    def start(self, spec):
        self.started.append(spec.workload_id)

    def stop(self, wid, attempt, grace):
        self.stopped.append(wid)

    def kill(self, wid, attempt):
        self.stopped.append(wid)

    def poll(self):
        out, self.exits = self.exits, []
        return out

    def recover(self, specs):
        return []


def make_engine(url, tmp_path, gpus=4):
    engine = Engine(Store(url), Scripted(), [LocalNode(Node("host", "default", gpus),
                                                       list(range(gpus)))],
                    get_policy("gpuhub"), EngineConfig(data_dir=str(tmp_path)))
    engine.start()
    return engine


def job(gpus=1):
    return parse_job({"command": [sys.executable, "-c", "pass"], "gpus": gpus,
                      "pool": "default"})


def row_of(engine, wid) -> WorkloadRow:
    with engine.store.session() as s:
        return s.get(WorkloadRow, wid)


def test_a_long_cycle_gives_the_loop_back_and_changes_wait_for_its_end(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    engine.submit(ALICE, job(gpus=4))  # holds the pool
    engine.tick()
    for _ in range(300):
        engine.submit(ALICE, job())
    steps = engine.tick_steps()
    next(steps)  # the cycle is being planned now: a request comes in
    late = engine.submit(ALICE, job()).id
    assert late not in engine.scheduler.state.pending  # not yet: the cycle walks the queue
    yielded = 1 + sum(1 for _ in steps)
    assert yielded > 1, "a 300-workload cycle should give the loop back more than once"
    assert late in engine.scheduler.state.pending  # made once the cycle was applied
    engine.store.close()


def test_a_workload_cancelled_while_its_admission_was_planned_does_not_start(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=8)
    engine.submit(ALICE, job(gpus=4))
    engine.tick()
    for _ in range(100):  # enough waiting work that the cycle steps
        engine.submit(ALICE, job(gpus=5))
    fits = engine.submit(ALICE, job(gpus=2)).id
    steps = engine.tick_steps()
    next(steps)
    engine.cancel(ALICE, fits)  # between the plan and its application
    for _ in steps:
        pass
    row = row_of(engine, fits)
    assert row.state == "cancelled"
    with engine.store.session() as s:
        assert s.scalars(select(Attempt).where(Attempt.workload_id == fits)).all() == []
        assert s.scalars(select(Allocation).where(Allocation.workload_id == fits)).all() == []
    assert fits not in engine.backend.started
    assert fits not in engine.scheduler.state.pending and fits not in engine.scheduler.state.running
    # Its GPUs were never taken: a job as large fits.
    other = engine.submit(ALICE, job(gpus=2)).id
    engine.tick()
    assert row_of(engine, other).state == "running"
    engine.store.close()


# ---- the kinds table -----------------------------------------------------------
def test_every_kind_is_described_and_only_backend_kinds_are_run_by_the_backend():
    assert set(KINDS) == {"job", "notebook", "deployment"}
    assert set(BACKEND_KINDS) == {"job", "deployment"}
    assert kind("job").refusal("w1", admin=False) is None
    assert "stop it where it was started" in kind("notebook").refusal("w1", admin=True)
    assert "scale or delete the deployment" in kind("deployment").refusal("w1", admin=False)
    assert kind("deployment").refusal("w1", admin=True) is None


# ---- what the end of an attempt means -----------------------------------------------
JOB, NOTEBOOK, REPLICA = kind("job"), kind("notebook"), kind("deployment")


@pytest.mark.parametrize("rules,attempt,reason,code,asked,lost_before,expected", [
    (JOB, 0, EXITED, 0, Asked(), 0, (False, "succeeded", "succeeded", "exited with code 0")),
    (JOB, 0, EXITED, 3, Asked(), 0, (False, "failed", "failed", "exited with code 3")),
    (JOB, 0, EXITED, -9, Asked(), 0, (False, "failed", "failed", "killed by signal 9")),
    (JOB, 0, TIME_LIMIT, -15, Asked(), 0,
     (False, "failed", "failed", "killed at its time limit of 60 s")),
    (JOB, 1, STOPPED, -15, Asked(cancelled=True), 0,
     (False, "cancelled", "cancelled", "cancelled; stopped")),
    # cancelled wins over preempted: the user asked
    (JOB, 1, STOPPED, -15, Asked(cancelled=True, preempted_for="w9"), 0,
     (False, "cancelled", "cancelled", "cancelled; stopped")),
    (JOB, 1, STOPPED, -15, Asked(preempted_for="w9"), 0,
     (True, None, "preempted", "preempted for w9; requeued as attempt 2")),
    (JOB, 0, LOST, None, Asked(), 0,
     (True, None, "lost", "attempt 0 was lost; requeued as attempt 1")),
    (JOB, 2, LOST, None, Asked(), 2,
     (False, "failed", "lost", "attempt 2 was lost; lost 3 times, so it is not requeued again")),
    (REPLICA, 0, EXITED, 1, Asked(), 0,
     (True, None, "failed", "replica ended (exited with code 1); replaced by attempt 1")),
    (REPLICA, 0, STOPPED, -15, Asked(replaced="served, then was not ready for 30 s"), 0,
     (True, None, "failed",
      "replica ended (served, then was not ready for 30 s); replaced by attempt 1")),
    (REPLICA, 4, EXITED, 1, Asked(), 0,
     (False, "failed", "failed", "replica ended (exited with code 1) 5 times; not restarted "
                                 "again")),
    (NOTEBOOK, 0, EXITED, 0, Asked(), 0, (False, "succeeded", "succeeded", "exited with code 0")),
    # Stopped by the service for good (a share above its GPU memory): failed
    # with the reason, even when the job exits 0 on the SIGTERM.
    (JOB, 0, STOPPED, 0, Asked(stopped="GPU memory 41.0 GiB above this share's 35.1 GiB"), 0,
     (False, "failed", "failed", "GPU memory 41.0 GiB above this share's 35.1 GiB")),
    (REPLICA, 0, STOPPED, -15, Asked(stopped="GPU memory above its share"), 0,
     (True, None, "failed", "replica ended (GPU memory above its share); replaced by attempt 1")),
])
def test_the_end_of_an_attempt(rules, attempt, reason, code, asked, lost_before, expected):
    end = ending(rules, attempt, reason, code, asked, lost_before=lost_before, time_limit=60,
                 max_replica_restarts=5, max_lost_attempts=3)
    assert (end.requeue, end.state, end.outcome, end.message) == expected


# ---- starts off the loop ---------------------------------------------------------------
class Slow(Scripted):
    starts_off_loop = True

    def __init__(self):
        super().__init__()
        self.go = threading.Event()
        self.failing: set[str] = set()
        self.specs = []

    def start(self, spec):
        assert self.go.wait(10)
        if spec.workload_id in self.failing:
            raise RuntimeError("no such command")
        self.specs.append(spec)
        super().start(spec)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def spec_of(wid):
    from gpuspawner.backends.base import LaunchSpec
    return LaunchSpec(wid, 0, ("true",), "/tmp", "/tmp")


def test_a_stop_asked_while_the_start_runs_is_carried_out_once_it_has_started():
    backend = Slow()
    woke = threading.Event()
    starter = Starter(backend, threads=1, wake=woke.set)
    starter.start(spec_of("w1"))
    starter.stop("w1", 0, 5.0)  # the start is still blocked in its thread
    assert backend.stopped == []
    backend.go.set()
    assert woke.wait(10)
    assert starter.take() == [] and backend.stopped == ["w1"]
    starter.close()


def test_a_start_that_fails_in_its_thread_is_reported_at_the_next_take():
    backend = Slow()
    backend.failing.add("w2")
    woke = threading.Event()
    starter = Starter(backend, threads=1, wake=woke.set)
    backend.go.set()
    starter.start(spec_of("w2"))
    assert woke.wait(10)
    [(wid, attempt, why)] = starter.take()
    assert (wid, attempt) == ("w2", 0) and "no such command" in why
    starter.close()


def test_a_backend_whose_start_does_not_block_starts_inline():
    backend = Scripted()  # starts_off_loop is False
    starter = Starter(backend, threads=2)
    starter.start(spec_of("w3"))
    assert backend.started == ["w3"]
    starter.close()


def test_launches_built_in_a_worker_start_there_and_one_that_cannot_be_built_fails_by_itself():
    backend = Slow()
    backend.go.set()
    woke = threading.Event()
    starter = Starter(backend, threads=1, wake=woke.set)
    built_in = []

    def build(wids):
        built_in.append(threading.current_thread().name)
        return {wid: spec_of(wid) if wid != "w5" else FileNotFoundError("notebook.ipynb is gone")
                for wid in wids}
    starter.start_built([("w4", 0), ("w5", 0), ("w7", 0)], build)
    assert woke.wait(10)
    wait_for(lambda: sorted(backend.started) == ["w4", "w7"])
    assert built_in == ["gpuhub-start_0"]  # once for all, not in the caller's (the loop's) thread
    [(wid, attempt, why)] = starter.take()
    assert (wid, attempt) == ("w5", 0) and "notebook.ipynb is gone" in why
    starter.close()


def test_a_launch_built_in_a_worker_for_a_backend_that_starts_on_the_loop_starts_at_take():
    backend = Scripted()  # starts_off_loop is False: its start runs on the loop
    woke = threading.Event()
    starter = Starter(backend, threads=1, wake=woke.set)
    starter.start_built([("w6", 0)], lambda wids: {w: spec_of(w) for w in wids})
    assert woke.wait(10) and backend.started == []
    assert starter.take() == [] and backend.started == ["w6"]
    starter.close()


def test_the_launches_job_tokens_are_made_together_and_each_start_gets_its_own():
    from gpuspawner.service.access.job_tokens import JobTokens
    backend = Slow()
    backend.go.set()
    tokens = JobTokens("http://127.0.0.1:1/hub/api", "unused", "http://gpuhub")
    made_for = []
    env_for_all = tokens.env_for_all
    tokens.env_for_all = lambda specs: made_for.append([s.workload_id for s in specs]) or \
        env_for_all(specs)
    starter = Starter(backend, tokens, threads=2)
    starter.start_built([(f"w{i}", 0) for i in range(5)],
                        lambda wids: {w: replace(spec_of(w), user="alice") for w in wids})
    wait_for(lambda: len(backend.started) == 5)
    assert made_for == [[f"w{i}" for i in range(5)]]
    given = {s.workload_id: s.env["GPUHUB_TOKEN"] for s in backend.specs}
    assert len(set(given.values())) == 5
    assert {w: tokens.holder(t).job.workload for w, t in given.items()} == {w: w for w in given}
    starter.close()


def test_ends_polled_together_are_recorded_together_and_one_that_cannot_be_does_not_lose_the_others(
        db_url, tmp_path, monkeypatch):
    engine = make_engine(db_url, tmp_path)
    wids = [engine.submit(ALICE, job()).id for _ in range(4)]
    engine.tick()
    assert all(row_of(engine, w).state == "running" for w in wids)
    sessions = []
    recorded = engine._record_exit

    def spy(s, x, *rest):
        sessions.append(s)
        return recorded(s, x, *rest)
    monkeypatch.setattr(engine, "_record_exit", spy)
    engine.backend.exits = [AttemptExit(w, 0, EXITED, 0, engine.clock()) for w in wids[:2]]
    engine.tick()
    assert [row_of(engine, w).state for w in wids[:2]] == ["succeeded", "succeeded"]
    assert len(sessions) == 2 and sessions[0] is sessions[1]  # one transaction for both

    # One of the next two cannot be recorded (its row breaks): the other still is.
    def record(s, x, *rest):
        if x.workload_id == wids[2]:
            raise RuntimeError("the database refused this one")
        return spy(s, x, *rest)
    monkeypatch.setattr(engine, "_record_exit", record)
    engine.backend.exits = [AttemptExit(w, 0, EXITED, 1, engine.clock()) for w in wids[2:]]
    engine.tick()
    assert row_of(engine, wids[3]).state == "failed"  # exit code 1
    assert row_of(engine, wids[2]).state == "running"  # not recorded, and not lost by the core
    assert wids[3] not in engine.scheduler.state.running
    engine.store.close()
