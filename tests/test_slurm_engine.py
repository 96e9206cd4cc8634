"""The real Engine with SlurmBackend and Slurm-discovered nodes: the hub's
quotas decide, Slurm runs (real Slurm from slurm_harness.py, SQLite)."""
from __future__ import annotations

import os
import time
from dataclasses import replace

from sqlalchemy import select

from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.scheduler.model import Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.store import Attempt, Store, WorkloadRow
from slurm_harness import PARTITION, slurm  # noqa: F401  (the fixture)

ADMIN = Identity("root", admin=True)
ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"b"}), can_submit=True)


def make_engine(cluster, tmp_path, **backend_options) -> Engine:
    backend = SlurmBackend(slurm_conf=cluster.conf, poll_interval=0, **backend_options)
    nodes = [LocalNode(n, [g.index for g in gpus]) for n, gpus in backend.discover()]
    engine = Engine(Store(f"sqlite:///{tmp_path}/gpuhub.sqlite"), backend, nodes,
                    replace(get_policy("gpuhub"), preemption_delay=0),
                    EngineConfig(data_dir=str(tmp_path / "data"), default_grace_period=10))
    engine.start()
    return engine


def run_until(engine: Engine, done, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.tick()
        if done():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def row(engine: Engine, wid: str) -> WorkloadRow:
    with engine.store.session() as s:
        return s.get(WorkloadRow, wid)


def attempts(engine: Engine, wid: str) -> list[Attempt]:
    with engine.store.session() as s:
        return list(s.scalars(select(Attempt).where(Attempt.workload_id == wid)
                              .order_by(Attempt.number)))


def slurm_jobs(cluster) -> set[str]:
    """Names of our jobs Slurm runs or has pending now."""
    out = cluster.cmd(["squeue", "-h", "-o", "%j", "--states=PENDING,RUNNING,CONFIGURING"]).stdout
    return {n for n in out.split() if n.startswith("gpuhub.")}


def gpu_job(seconds: float, gpus: int = 2, **kw):
    return parse_job({"command": ["/bin/sh", "-c", f'echo "gpus=$SLURM_JOB_GPUS"; sleep {seconds}'],
                      "gpus": gpus, "pool": PARTITION, "time_limit": 600, **kw})


def log(engine: Engine, wid: str, attempt: int = 0) -> str:
    """The attempt's output so far ("" before Slurm started it)."""
    try:
        with open(os.path.join(engine.launcher.attempt_dir(wid, attempt), "output.log")) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_quotas_decide_and_slurm_runs_exactly_what_was_admitted(slurm, tmp_path):
    engine = make_engine(slurm, tmp_path)
    assert engine.scheduler.state.capacity == {PARTITION: 4}
    set_team(engine.steering, ADMIN, "a", None, {PARTITION: Quota(2, 0, None)})
    set_team(engine.steering, ADMIN, "b", None, {PARTITION: Quota(2, 0, None)})
    first = engine.submit(ALICE, gpu_job(4)).id
    second = engine.submit(ALICE, gpu_job(1)).id
    other = engine.submit(BOB, gpu_job(4)).id
    run_until(engine, lambda: row(engine, first).state == "running"
              and row(engine, other).state == "running")
    # Slurm has two free GPUs, but team a's quota is used up: its second job
    # waits in the hub and never reaches Slurm.
    assert row(engine, second).state == "queued"
    assert slurm_jobs(slurm) == {f"gpuhub.{first}.0", f"gpuhub.{other}.0"}
    run_until(engine, lambda: all(row(engine, w).state == "succeeded"
                                  for w in (first, second, other)))
    (a1,), (a2,) = attempts(engine, first), attempts(engine, second)
    assert a2.started_at >= a1.ended_at
    # The two that ran together got different GPUs from Slurm.
    gpus = {w: set(log(engine, w).split("gpus=")[1].split()[0].split(",")) for w in (first, other)}
    assert len(gpus[first]) == len(gpus[other]) == 2 and not gpus[first] & gpus[other]
    assert engine.backend.running() == set()


def test_preemption_sends_sigterm_and_requeues_as_a_new_slurm_job(slurm, tmp_path):
    engine = make_engine(slurm, tmp_path)
    set_team(engine.steering, ADMIN, "a", None, {PARTITION: Quota(0, None, None)})  # borrows only
    set_team(engine.steering, ADMIN, "b", None, {PARTITION: Quota(4, 0, None)})
    borrower = engine.submit(ALICE, parse_job({
        "command": ["/bin/sh", "-c",
                    'trap \'echo step > "$GPUHUB_CHECKPOINT_DIR/ckpt"; exit 0\' TERM; '
                    'echo "attempt=$GPUHUB_ATTEMPT"; ls "$GPUHUB_CHECKPOINT_DIR"; '
                    'while true; do sleep 0.1; done'],
        "gpus": 4, "pool": PARTITION, "time_limit": 600, "grace_period": 20})).id
    # Running in Slurm with its trap set (the hub says running once sbatch accepted it).
    run_until(engine, lambda: "attempt=0" in log(engine, borrower))
    lender = engine.submit(BOB, gpu_job(1)).id  # team b wants its GPUs back
    run_until(engine, lambda: row(engine, lender).state == "succeeded")
    assert [a.state for a in attempts(engine, borrower)][0] == "preempted"
    assert os.path.exists(os.path.join(row(engine, borrower).spec["checkpoint_dir"], "ckpt"))
    run_until(engine, lambda: row(engine, borrower).state == "running"
              and f"gpuhub.{borrower}.1" in slurm_jobs(slurm))
    # Attempt 1 is a new Slurm job that finds attempt 0's checkpoint.
    deadline = time.monotonic() + 20
    while "ckpt" not in log(engine, borrower, 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "attempt=1" in log(engine, borrower, 1) and "ckpt" in log(engine, borrower, 1)
    engine.cancel(ALICE, borrower)
    run_until(engine, lambda: row(engine, borrower).state == "cancelled")
    assert slurm_jobs(slurm) == set()


def test_a_restarted_service_adopts_its_slurm_job_and_stops_it(slurm, tmp_path):
    first = make_engine(slurm, tmp_path)
    set_team(first.steering, ADMIN, "a", None, {PARTITION: Quota(4, 0, None)})
    long = first.submit(ALICE, gpu_job(300)).id
    short = first.submit(ALICE, gpu_job(0.5)).id
    run_until(first, lambda: row(first, long).state == "running"
              and row(first, short).state == "running")
    # The service is down (nothing ticks it); the short job ends meanwhile,
    # as Slurm tells (a fixed sleep raced Slurm's own start on a busy machine).
    deadline = time.monotonic() + 60
    while any(short in name for name in slurm_jobs(slurm)):
        assert time.monotonic() < deadline, "Slurm did not end the short job"
        time.sleep(0.2)
    second = make_engine(slurm, tmp_path)
    assert row(second, short).state == "succeeded"
    assert (row(second, long).state, row(second, long).attempt) == ("running", 0)
    assert set(second.scheduler.state.running) == {long}
    second.cancel(ALICE, long)
    run_until(second, lambda: row(second, long).state == "cancelled")
    assert slurm_jobs(slurm) == set()
