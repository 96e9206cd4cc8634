"""The engine across restarts, without the hub: a real database (SQLite and
PostgreSQL), real job processes, and a new Engine standing in for the
restarted service."""
from __future__ import annotations

import sys
import time
from dataclasses import replace

import pytest
from sqlalchemy import func, select

from gpuspawner.backends.local import LocalBackend
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.scheduler.steps import drain
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.identity import Identity, JobRef
from gpuspawner.vocab.specs import parse_job
from gpuspawner.store import Allocation, Attempt, Store, WorkloadRow

ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)


class NeverStarts(LocalBackend):
    """A service that dies after persisting an admission, before the process
    starts (the window 'persist, then act' leaves open)."""

    def start(self, spec):
        return None


def make_engine(url, data_dir, backend=None) -> Engine:
    engine = Engine(Store(url), backend or LocalBackend(),
                    [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    replace(get_policy("gpuhub"), preemption_delay=0),
                    EngineConfig(data_dir=str(data_dir), default_grace_period=2))
    engine.start()
    return engine


def run_until(engine: Engine, done, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.tick()
        if done():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def state(engine: Engine, wid: str) -> WorkloadRow:
    with engine.store.session() as s:
        return s.get(WorkloadRow, wid)


def job(seconds: float, gpus: int = 1):
    return parse_job({"command": [sys.executable, "-c", f"import time; time.sleep({seconds})"],
                      "gpus": gpus, "pool": "default"})


def test_restart_adopts_running_jobs_and_records_those_that_ended(db_url, tmp_path):
    first = make_engine(db_url, tmp_path)
    short = first.submit(ALICE, job(0.3)).id
    long = first.submit(ALICE, job(60, gpus=2)).id
    run_until(first, lambda: state(first, long).state == "running"
              and state(first, short).state == "running")
    # The service dies (nothing is cleaned up); the short job ends meanwhile.
    time.sleep(1.0)
    second = make_engine(db_url, tmp_path)
    assert state(second, short).state == "succeeded"
    assert state(second, short).attempt == 0
    row = state(second, long)
    assert (row.state, row.attempt) == ("running", 0)
    assert set(second.scheduler.state.running) == {long}
    # Its two GPUs stay booked: a 3-GPU job must wait, a 2-GPU job runs.
    waits = second.submit(ALICE, job(0.1, gpus=3)).id
    fits = second.submit(ALICE, job(0.1, gpus=2)).id
    run_until(second, lambda: state(second, fits).state == "succeeded")
    assert state(second, waits).state == "queued"
    with second.store.session() as s:
        long_gpus = {tuple(p) for p in
                     [(n, g) for n, gs in s.get(Attempt, (long, 0)).placement for g in gs]}
        fit_gpus = {(n, g) for n, gs in s.get(Attempt, (fits, 0)).placement for g in gs}
    assert not long_gpus & fit_gpus
    # The adopted process is stopped like any other.
    second.cancel(ALICE, long)
    run_until(second, lambda: state(second, waits).state == "succeeded")
    assert state(second, long).state == "cancelled"
    with second.store.session() as s:
        assert s.scalar(select(func.count()).select_from(Allocation)) == 0
        assert s.scalar(select(func.count()).select_from(Attempt)) == 4
    assert not second.scheduler.state.running and second.backend.running() == set()


def test_admission_persisted_but_never_started_is_requeued(db_url, tmp_path):
    crashed = make_engine(db_url, tmp_path, backend=NeverStarts())
    wid = crashed.submit(ALICE, job(0.1)).id
    crashed.tick()
    assert state(crashed, wid).state == "running"
    restarted = make_engine(db_url, tmp_path)
    row = state(restarted, wid)
    assert (row.state, row.attempt) == ("queued", 1)
    run_until(restarted, lambda: state(restarted, wid).state == "succeeded")
    with restarted.store.session() as s:
        attempts = s.scalars(select(Attempt).where(Attempt.workload_id == wid)
                             .order_by(Attempt.number)).all()
    assert [a.state for a in attempts] == ["lost", "succeeded"]


def test_preempted_job_stopping_at_restart_is_stopped_and_requeued(db_url, tmp_path):
    """A victim inside its grace period when the service dies is still
    stopped after the restart, requeued, and its preemptor then runs."""
    engine = make_engine(db_url, tmp_path)
    admin = Identity("root", admin=True)
    set_team(engine.steering, admin, "a", None, {"default": Quota(0, None, None)})
    set_team(engine.steering, admin, "b", None, {"default": Quota(4, 0, None)})
    victim = engine.submit(ALICE, parse_job({
        "command": [sys.executable, "-c", "import signal, time\n"
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"],
        "gpus": 4, "pool": "default", "grace_period": 3})).id
    run_until(engine, lambda: state(engine, victim).state == "running")
    bob = Identity("bob", teams=frozenset({"b"}), can_submit=True)
    lender = engine.submit(bob, job(0.1, gpus=2)).id
    run_until(engine, lambda: state(engine, victim).state == "stopping")
    restarted = make_engine(db_url, tmp_path)
    run_until(restarted, lambda: state(restarted, lender).state == "succeeded", timeout=30)
    row = state(restarted, victim)
    assert row.attempt == 1 and row.state in ("queued", "running")
    with restarted.store.session() as s:
        assert s.get(Attempt, (victim, 0)).state == "preempted"
    restarted.cancel(ALICE, victim)
    run_until(restarted, lambda: state(restarted, victim).state == "cancelled")


def test_a_job_lost_again_and_again_fails_instead_of_looping(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, backend=NeverStarts())
    wid = engine.submit(ALICE, job(0.1)).id
    for attempt in range(3):
        engine.tick()
        assert (state(engine, wid).state, state(engine, wid).attempt) == ("running", attempt)
        engine = make_engine(db_url, tmp_path, backend=NeverStarts())  # restart: lost
    row = state(engine, wid)
    assert row.state == "failed" and "lost 3 times" in row.reason
    with engine.store.session() as s:
        assert [a.state for a in s.scalars(select(Attempt).where(Attempt.workload_id == wid)
                                           .order_by(Attempt.number))] == ["lost"] * 3


@pytest.mark.parametrize("ending", [2, 40])
def test_a_cycles_decisions_and_a_polls_ends_are_written_in_a_few_statements(
        db_url, tmp_path, ending):
    """A cycle's decisions, and a poll's ends, are written in one transaction
    each: every one is recorded (the start and its GPUs; the attempt's end,
    its usage, its run time learned, its GPUs and its job token gone), and
    the workloads are read together, not again for each, and written in a
    statement or two per table, not several per workload (a start storm's
    ends and decisions were a third of the service's interpreter)."""
    from sqlalchemy import event
    from gpuspawner.backends.base import EXITED, AttemptExit, LaunchSpec
    from gpuspawner.scheduler.steps import drain
    from gpuspawner.service.access.job_tokens import JobTokens
    from gpuspawner.store import JobTokenRow, UsageRow
    engine = make_engine(db_url, tmp_path, backend=NeverStarts())
    tokens = JobTokens("http://127.0.0.1:1/hub/api", "unused", "http://gpuhub", store=engine.store)
    engine.config = replace(engine.config, job_tokens=tokens)
    with_gpu = min(4, ending // 2)  # the engine's node has 4
    ids = [engine.submit(ALICE, parse_job({"command": ["true"], "gpus": int(i < with_gpu),
                                           "pool": "default"})).id for i in range(ending)]
    reads, writes = [], []

    def count(conn, cursor, statement, parameters, context, executemany):
        (reads if statement.lstrip().upper().startswith("SELECT") else writes).append(statement)
    event.listen(engine.store.engine, "before_cursor_execute", count)
    try:
        now = engine.clock()
        planned = drain(engine.planned_steps(now, explain=False))
    finally:
        event.remove(engine.store.engine, "before_cursor_execute", count)
    engine.apply_cycle(planned, now)
    assert {state(engine, i).state for i in ids} == {"running"}
    with engine.store.session() as s:
        assert sorted(a.workload_id for a in s.scalars(select(Allocation))) == sorted(ids[:with_gpu])
    assert len(reads) <= 1, reads  # the rows
    # SQLite inserts the events one by one (their ids), the rest in one statement a table.
    assert len(writes) <= ending + 6, writes
    made = [tokens.env_for(LaunchSpec(i, 0, ("true",), str(tmp_path), str(tmp_path), user="alice"))
            ["GPUHUB_TOKEN"] for i in ids]  # as each start makes its job's token
    assert all(tokens.holder(t) is not None for t in made)
    reads.clear()
    writes.clear()
    learned = {}
    engine.estimates.finished = lambda row, run_s: learned.__setitem__(row.id, run_s)
    event.listen(engine.store.engine, "before_cursor_execute", count)
    try:
        engine.on_exits([AttemptExit(i, 0, EXITED, 0, time.time()) for i in ids])
    finally:
        event.remove(engine.store.engine, "before_cursor_execute", count)
    assert {state(engine, i).state for i in ids} == {"succeeded"}
    with engine.store.session() as s:
        assert s.scalar(select(func.count()).select_from(UsageRow)) == ending
        assert s.scalar(select(func.count()).select_from(Allocation)) == 0
        assert s.scalar(select(func.count()).select_from(JobTokenRow)) == 0
        ran = {i: a.ended_at - a.started_at for i in ids for a in [s.get(Attempt, (i, 0))]}
    assert all(tokens.holder(t) is None for t in made)
    # Nor after a restart: the service reads the live tokens from the database.
    restarted = JobTokens("http://127.0.0.1:1/hub/api", "unused", "http://gpuhub",
                          store=engine.store)
    assert all(restarted.holder(t) is None for t in made)
    assert learned == pytest.approx(ran) and min(ran.values()) >= 0
    assert len(reads) <= 3, reads  # the rows, their attempts
    assert len(writes) <= ending + 8, writes


class Recording(LocalBackend):
    """Starts nothing (off the loop, as the local backend does); keeps what
    each start was given."""
    starts_off_loop = True

    def __init__(self):
        super().__init__()
        self.specs = []

    def start(self, spec):
        self.specs.append(spec)


@pytest.mark.parametrize("starting", [2, 40])
def test_a_cycles_starts_read_their_workloads_and_write_their_tokens_in_a_few_statements(
        db_url, tmp_path, starting):
    """The launches of a cycle's admissions are built in a start thread from
    their rows and attempts read together, and their job tokens' rows are
    written in one transaction: one by one, they were two thirds of what a
    job's start cost the service's interpreter on PostgreSQL."""
    from sqlalchemy import event
    from gpuspawner.service.access.job_tokens import JobTokens
    from gpuspawner.store import JobTokenRow
    backend = Recording()
    engine = Engine(Store(db_url), backend, [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    get_policy("gpuhub"),
                    EngineConfig(data_dir=str(tmp_path), start_threads=2))
    tokens = JobTokens("http://127.0.0.1:1/hub/api", "unused", "http://gpuhub", store=engine.store)
    engine.starter.job_tokens = tokens
    engine.start()
    # alice's and bob's (a team-mate's) jobs in one cycle, one batch of tokens.
    bob = Identity("bob", teams=frozenset({"a"}), can_submit=True)
    owners = [ALICE if i % 2 == 0 else bob for i in range(starting)]
    ids = [engine.submit(who, parse_job({"command": ["true"], "gpus": int(i < 4),
                                         "pool": "default"})).id
           for i, who in enumerate(owners)]
    user_of = {i: who.name for i, who in zip(ids, owners)}
    now = engine.clock()
    planned = drain(engine.planned_steps(now, explain=False))
    reads, writes = [], []

    def count(conn, cursor, statement, parameters, context, executemany):
        (reads if statement.lstrip().upper().startswith("SELECT") else writes).append(statement)
    event.listen(engine.store.engine, "before_cursor_execute", count)
    try:
        engine.apply_cycle(planned, now)
        deadline = time.monotonic() + 20
        while len(backend.specs) < starting and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        event.remove(engine.store.engine, "before_cursor_execute", count)
        engine.starter.close()
    started = {spec.workload_id: spec for spec in backend.specs}
    assert sorted(started) == sorted(ids)
    assert all(len(started[i].devices) == int(i in ids[:4]) for i in ids)  # their placements
    # Each its own token, acting for its own user and attempt only, kept
    # across a restart: none of bob's jobs was given one that acts for alice.
    given = {i: started[i].env["GPUHUB_TOKEN"] for i in ids}
    restarted = JobTokens("http://127.0.0.1:1/hub/api", "unused", "http://gpuhub",
                          store=engine.store)
    assert {i: (restarted.holder(t).user, restarted.holder(t).job) for i, t in given.items()} \
        == {i: (user_of[i], JobRef(i, 0)) for i in ids}
    assert len(set(given.values())) == starting
    with engine.store.session() as s:
        assert s.scalar(select(func.count()).select_from(JobTokenRow)) == starting
    assert len(reads) <= 2, reads  # the rows, their attempts
    assert len(writes) <= 2, writes  # the tokens' rows: old ones dropped, new ones added


def test_an_end_that_cannot_be_recorded_keeps_no_other_from_being_recorded(tmp_path):
    """A poll's ends are written together; when that fails, each is written
    alone, and only the one that fails is left (with its GPUs)."""
    from gpuspawner.backends.base import EXITED, AttemptExit
    engine = make_engine(f"sqlite:///{tmp_path}/db.sqlite", tmp_path, backend=NeverStarts())
    ids = [engine.submit(ALICE, job(1, gpus=1)).id for _ in range(3)]
    engine.tick()
    assert {state(engine, i).state for i in ids} == {"running"}
    record_exit = engine._record_exit

    def failing(s, x, *args):
        if x.workload_id == ids[1]:
            raise RuntimeError("a row that cannot be written")
        return record_exit(s, x, *args)
    engine._record_exit = failing
    engine.on_exits([AttemptExit(i, 0, EXITED, 0, time.time()) for i in ids])
    assert [state(engine, i).state for i in ids] == ["succeeded", "running", "succeeded"]
    with engine.store.session() as s:
        assert [a.workload_id for a in s.scalars(select(Allocation))] == [ids[1]]


def test_restart_keeps_the_fair_share_history(db_url, tmp_path):
    """A team that just used many GPU-hours is not forgiven by a restart."""
    first = make_engine(db_url, tmp_path)
    ids = [first.submit(ALICE, job(0.5, gpus=2)).id for _ in range(2)]
    long = first.submit(ALICE, job(30, gpus=1)).id
    run_until(first, lambda: all(state(first, i).state == "succeeded" for i in ids)
              and state(first, long).state == "running")
    now = time.time()
    before = first.scheduler.state.team_usage(now)["a"]["default"]
    second = make_engine(db_url, tmp_path)
    after = second.scheduler.state.team_usage(now)["a"]["default"]
    assert before > 0.5 and after == pytest.approx(before, rel=0.02)
    assert second.scheduler.state.usage[("a", "default")].rate == 1  # the long job
    second.cancel(ALICE, long)
    run_until(second, lambda: state(second, long).state == "cancelled")


SPAWNER = Identity("gpuhub-spawner", admin=True, can_submit=True)


def running_notebook(engine: Engine) -> str:
    """Alice's notebook server of one GPU, asked for by the hub's spawner, running."""
    from gpuspawner.vocab.specs import parse_server
    wid = engine.submit(SPAWNER, parse_server({"kind": "notebook", "user": "alice", "team": "a",
                                               "pool": "default", "gpus": 1}),
                        on_behalf_of="alice").id
    run_until(engine, lambda: state(engine, wid).state == "running")
    return wid


def test_a_stopped_notebook_gives_its_gpus_back_and_its_run_time_is_learned(db_url, tmp_path):
    """Its spawner releases it: it ends, its GPUs are free, and how long it
    ran joins the run-time history (the forecast's), as a job's does."""
    engine = make_engine(db_url, tmp_path)
    wid = running_notebook(engine)
    learned = {}
    engine.estimates.finished = lambda row, run_s: learned.__setitem__(row.id, run_s)
    engine.release(SPAWNER, wid, "stopped by its user")
    assert state(engine, wid).state == "stopped"
    with engine.store.session() as s:
        a = s.get(Attempt, (wid, 0))
        assert learned == {wid: pytest.approx(a.ended_at - a.started_at)}
        assert s.scalar(select(func.count()).select_from(Allocation)) == 0


def test_a_notebook_on_failed_hardware_is_stopped_not_requeued(db_url, tmp_path):
    """Its spawner must stop the server: the scheduler does not quietly give
    the notebook other GPUs while the old process may still run."""
    engine = make_engine(db_url, tmp_path)
    wid = running_notebook(engine)
    with engine.store.session() as s:
        [(node, [gpu])] = s.get(Attempt, (wid, 0)).placement
    engine.scheduler.set_node(Node("host", "default", 4, unhealthy_gpus=frozenset({gpu})))
    engine.tick()
    row = state(engine, wid)
    assert row.state == "stopped" and "stopped:" in row.reason
    assert wid not in engine.scheduler.state.pending and wid not in engine.scheduler.state.running
    engine.tick()
    assert state(engine, wid).state == "stopped"
    with engine.store.session() as s:
        assert s.get(Attempt, (wid, 0)).state == "evicted"
        assert s.scalar(select(func.count()).select_from(Allocation)) == 0
