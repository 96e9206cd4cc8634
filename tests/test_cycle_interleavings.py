"""A cycle runs while requests come in: the service plans it in a worker
thread (service/loop/driver.py) while submits, cancels and exits are served
on the event loop, their changes to the core waiting until the plan is
applied. Here the same phases (``Engine.tick_steps``, which yields while it
plans and while it writes reasons and estimates) are interleaved with
requests in every order hypothesis can think of, and whatever the order,
nothing is lost and nothing is admitted twice: the database, the core and
the backend agree on every workload, no GPU is given twice, and a workload
cancelled while queued never starts, and one cancelled once its admission
was committed (before or after its start) is stopped. A real SQLite database (PostgreSQL
runs the same code; the engine's step tests cover both)."""
from __future__ import annotations

import shutil
import sys
import tempfile
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from gpuspawner.backends.base import EXITED, AttemptExit, Backend
from gpuspawner.scheduler.cycle import admission
from gpuspawner.scheduler.model import Node
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.store import Allocation, Attempt, Store, WorkloadRow
from gpuspawner.vocab.specs import parse_job
from gpuspawner.vocab.states import FINAL_STATES, QUEUED, RUNNING, STOPPING

ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"b"}), can_submit=True)
GPUS = 4


class Scripted(Backend):
    """Starts nothing; exits what the test says, when it says."""

    def __init__(self):
        self.started: list[tuple[str, int]] = []
        self.stopped: list[tuple[str, int]] = []
        self.calls: list[tuple[str, tuple[str, int]]] = []  # in order: ("start"|"stop", key)
        self.exits: list[AttemptExit] = []

    def start(self, spec):
        self.started.append((spec.workload_id, spec.attempt))
        self.calls.append(("start", (spec.workload_id, spec.attempt)))

    def stop(self, wid, attempt, grace):
        self.stopped.append((wid, attempt))
        self.calls.append(("stop", (wid, attempt)))

    def kill(self, wid, attempt):
        self.stop(wid, attempt, 0.0)

    def poll(self):
        out, self.exits = self.exits, []
        return out

    def recover(self, specs):
        return []


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([ALICE, BOB]), st.integers(0, GPUS)),
    st.tuples(st.just("cancel"), st.integers(0, 3)),   # of the newest (0: the last)
    st.tuples(st.just("exit"), st.integers(0, 3)),
    st.tuples(st.just("step"), st.integers(1, 4)),
), min_size=1, max_size=60)


class World:
    def __init__(self, tmp: str, template: str):
        shutil.copy(template, f"{tmp}/gpuhub.sqlite")  # migrated once for all examples
        store = Store(f"sqlite:///{tmp}/gpuhub.sqlite", run_migrations=False)
        self.engine = Engine(store, Scripted(),
                             [LocalNode(Node("host", "default", GPUS), list(range(GPUS)))],
                             get_policy("gpuhub"), EngineConfig(data_dir=tmp))
        self.engine.start()
        self.ids: list[str] = []
        self.cancelled_queued: set[str] = set()
        self.cycle = None
        self.now = 1000.0
        self.engine.clock = lambda: self.now

    def act(self, action) -> None:
        what = action[0]
        self.now += 1.0
        if what == "submit":
            spec = parse_job({"command": [sys.executable, "-c", "pass"], "gpus": action[2],
                              "pool": "default"})
            self.ids.append(self.engine.submit(action[1], spec).id)
        elif what == "cancel" and self.ids:
            self.cancel(self.ids[-1 - action[1] % len(self.ids)])
        elif what == "exit":
            running = [(w, a) for w, a in self.engine.backend.started if self.holds(w, a)]
            if running:
                wid, attempt = running[action[1] % len(running)]
                self.engine.backend.exits.append(AttemptExit(wid, attempt, EXITED, 0, self.now))
        elif what == "step":
            for _ in range(action[1]):
                self.step()

    def cancel(self, wid: str) -> None:
        row = self.row(wid)
        if row.state in FINAL_STATES or row.state == STOPPING:
            return
        was = row.state
        row = self.engine.cancel(ALICE if row.team == "a" else BOB, wid)
        if was == QUEUED:
            self.cancelled_queued.add(wid)

    def step(self) -> None:
        """One step of the cycle under way (a new one when none is)."""
        if self.cycle is None:
            self.cycle = self.engine.tick_steps()
        try:
            next(self.cycle)
        except StopIteration:
            self.cycle = None

    def settle(self) -> None:
        while self.cycle is not None:
            self.step()
        for _ in range(3):
            self.engine.tick()

    def row(self, wid: str) -> WorkloadRow:
        with self.engine.store.session() as s:
            return s.get(WorkloadRow, wid)

    def holds(self, wid: str, attempt: int) -> bool:
        row = self.row(wid)
        return row.state in (RUNNING, STOPPING) and row.attempt == attempt


def check(world: World) -> None:
    engine = world.engine
    state = engine.scheduler.state
    with engine.store.session() as s:
        rows = {r.id: r for r in s.scalars(select(WorkloadRow))}
        attempts = Counter((a.workload_id, a.number) for a in s.scalars(select(Attempt)))
        slots = [(a.node, a.gpu, a.slot) for a in s.scalars(select(Allocation))]
    assert set(rows) == set(world.ids), "every submitted workload has its row"
    for wid, row in rows.items():
        where = ("pending" if wid in state.pending else
                 "running" if wid in state.running else "neither")
        expected = {QUEUED: "pending", RUNNING: "running", STOPPING: "running"}.get(
            row.state, "neither")
        assert where == expected, f"{wid} is {row.state} in the database but {where} in the core"
    started = Counter(world.engine.backend.started)
    assert max(started.values(), default=1) == 1, f"started twice: {started.most_common(1)}"
    assert max(attempts.values(), default=1) == 1
    assert len(slots) == len(set(slots)), "a GPU slot is given twice"
    held = [g for r in state.running.values() for _n, gpus in r.placement for g in gpus]
    assert len(held) == len(set(held)) and len(held) <= GPUS, "the core gives a GPU twice"
    for wid in world.cancelled_queued:
        assert rows[wid].state == "cancelled"
        assert not any(w == wid for w, _a in started), f"{wid} started after its cancel"
    calls = world.engine.backend.calls
    for key in started:
        wid, attempt = key
        if rows[wid].cancel_requested and rows[wid].attempt == attempt:
            assert ("stop", key) in calls[calls.index(("start", key)):], \
                f"{wid} was cancelled while running but not stopped after its start"
    counted = Counter()
    for w in state.pending.values():
        counted[(w.team, w.pool, w.kind)] += 1
    assert {k: v[0] for k, v in state.pending_counts.items()} == dict(counted)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS)
# Cancelled between its admission's plan and the plan's application.
@example(actions=[("submit", ALICE, 1), ("step", 1), ("cancel", 0), ("step", 2)])
# Cancelled once its admission was committed, before the core (and the
# backend) heard of it: stopped once started.
@example(actions=[("submit", ALICE, 1), ("step", 3), ("cancel", 0), ("step", 2)])
# Its attempt exits while a cycle that preempts for another is planned.
@example(actions=[("submit", ALICE, 4), ("step", 3), ("submit", BOB, 4), ("step", 1),
                  ("exit", 0), ("step", 4), ("step", 4)])
def test_submits_cancels_and_exits_during_a_cycle_lose_nothing_and_admit_nothing_twice(
        actions, one_step_cycles, migrated):
    with tempfile.TemporaryDirectory() as tmp:
        world = World(tmp, migrated)
        try:
            for action in actions:
                world.act(action)
            world.settle()
            check(world)
        finally:
            world.engine.store.close()



@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """A database at this release's schema, copied for each example."""
    path = str(tmp_path_factory.mktemp("template") / "gpuhub.sqlite")
    Store(f"sqlite:///{path}").close()
    return path


@pytest.fixture(scope="module")
def one_step_cycles():
    """The cycle yields after every workload it considers (64 in the
    service): every point of the plan is a point where a request may land."""
    was = admission.STEP
    admission.STEP = 1
    yield
    admission.STEP = was
