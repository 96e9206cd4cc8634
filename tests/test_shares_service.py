"""Shares of a GPU through the engine, without the hub: a real database
(SQLite and PostgreSQL), real job processes on a 2-GPU host whose GPUs are
shared in quarters. Four quarter jobs share one GPU while a whole-GPU job
has the other; a fifth waits, saying why; the database holds each GPU's
slots; a restart keeps them; usage is in GPU units; a share above its
memory is warned, then stopped with the reason in its log and the audit."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import replace

import pytest
from sqlalchemy import select

from gpuspawner.backends.local import LocalBackend
from gpuspawner.inventory.declared import declared_gpus
from gpuspawner.inventory.processes import ProcessReading
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.workloads import queries
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.launch import LocalNode, local_nodes
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.vocab.specs import SpecError, parse_job
from gpuspawner.service.wiring import Wired, record_inventory, serving_controller, share_watch
from gpuspawner.isolation.share_memory import MemoryWatch
from gpuspawner.store import (Allocation, AuditEntry, DeploymentRow, EventRow, Store, UsageRow,
                              WorkloadRow)
from test_engine_restart import run_until

ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"a"}), can_submit=True)
ADMIN = Identity("root", admin=True)
MEMORY_MIB = 143771  # an H200 as NVML reports it: a quarter is 35.1 GiB


class Clock:
    """Real time plus what the test skips ahead."""

    def __init__(self):
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def make_engine(url, data_dir, clock=time.time, sharing=None, **config) -> Engine:
    gpus = declared_gpus([{"model": "NVIDIA H200", "count": 2, "memory_mib": MEMORY_MIB,
                           "pool": "h200"}])
    store = Store(url)
    nodes = [LocalNode(replace(ln.node, share_units=4), ln.devices, ln.uuids)
             for ln in local_nodes(gpus, "host")]
    backend = LocalBackend()
    record_inventory(store, Wired("local", backend, nodes, "declared",
                                  {"host": {g.index: g for g in gpus}}))
    engine = Engine(store, backend, nodes, replace(get_policy("gpuhub"), preemption_delay=0),
                    EngineConfig(data_dir=str(data_dir), default_grace_period=2,
                                 gpu_sharing={"h200": 4} if sharing is None else sharing,
                                 **config),
                    clock=clock)
    engine.start()
    return engine


def row(engine: Engine, wid: str) -> WorkloadRow:
    with engine.store.session() as s:
        return s.get(WorkloadRow, wid)


def job(seconds: float, **extra):
    return parse_job({"command": [sys.executable, "-c", f"import time; time.sleep({seconds})"],
                      "pool": "h200", **extra})


def slots(engine: Engine) -> dict[str, list[tuple[int, int]]]:
    """workload -> its (GPU, slot)s in the database."""
    out: dict[str, list] = {}
    with engine.store.session() as s:
        for a in s.scalars(select(Allocation).order_by(Allocation.gpu, Allocation.slot)):
            out.setdefault(a.workload_id, []).append((a.gpu, a.slot))
    return out


def test_four_quarters_share_one_gpu_and_a_whole_gpu_job_gets_the_other(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path)
    quarters = [engine.submit(ALICE, job(60, gpu_share="1/4")).id for _ in range(4)]
    whole = engine.submit(ALICE, job(60)).id
    run_until(engine, lambda: all(row(engine, w).state == "running" for w in quarters + [whole]))
    fifth = engine.submit(ALICE, job(60, gpu_memory="30GiB")).id
    run_until(engine, lambda: row(engine, fifth).reason not in ("", "queued"))
    held = slots(engine)
    [shared] = {gpu for w in quarters for gpu, _ in held[w]}
    assert all(len(held[w]) == 1 for w in quarters)
    assert sorted(slot for w in quarters for _, slot in held[w]) == [0, 1, 2, 3]
    assert held[whole] == [(1 - shared, k) for k in range(4)]  # all four slots
    assert row(engine, fifth).state == "queued" and row(engine, fifth).gpu_share == 0.25
    print("the fifth share waits:", row(engine, fifth).reason)
    assert "GPU" in row(engine, fifth).reason
    [team] = queries.teams_view(engine.cluster, engine.store, ADMIN)
    [pool] = queries.pools_view(engine.cluster, engine.store, ADMIN)
    assert pool["teams"] == {"a": 2} and pool["used"] == 2 and pool["queued_gpus"] == 0.25
    assert pool["sharing"]["share_units"] == 4 and pool["sharing"]["share_memory_mib"] == MEMORY_MIB // 4
    gpu = next(g for g in queries.gpus_view(engine.cluster, engine.store, {}) if g["shares"])
    assert sorted(s["workload"]["id"] for s in gpu["shares"]) == sorted(quarters)
    assert {s["label"] for s in gpu["shares"]} == {"1/4"} and gpu["workload"] is None
    # A share's processes learn their share and its memory.
    with engine.store.session() as s:
        spec = engine.launcher.launch_spec(s, s.get(WorkloadRow, quarters[0]))
    assert spec.env["GPUHUB_GPU_SHARE"] == "0.25"
    assert spec.env["GPUHUB_GPU_MEMORY_LIMIT_MIB"] == str(MEMORY_MIB // 4)
    # One quarter ends: the fifth takes its slot, on the same GPU.
    engine.cancel(ALICE, quarters[0])
    run_until(engine, lambda: row(engine, fifth).state == "running")
    assert {gpu for gpu, _ in slots(engine)[fifth]} == {gpu for gpu, _ in held[quarters[1]]}
    with engine.store.session() as s:
        usage = s.get(UsageRow, (quarters[0], 0))
    assert usage.gpus == 0.25
    assert usage.gpu_seconds == pytest.approx(0.25 * (usage.ended_at - usage.started_at))
    for w in quarters[1:] + [whole, fifth]:
        engine.cancel(ALICE, w)
    run_until(engine, lambda: not slots(engine), timeout=30)


def test_a_restart_keeps_every_share_where_it_was(db_url, tmp_path):
    first = make_engine(db_url, tmp_path)
    halves = [first.submit(ALICE, job(60, gpu_share=0.5)).id for _ in range(3)]
    run_until(first, lambda: all(row(first, w).state == "running" for w in halves))
    before = slots(first)
    second = make_engine(db_url, tmp_path)
    assert set(second.scheduler.state.running) == set(halves)
    # What is left: one half GPU. A whole GPU waits; a half runs.
    whole = second.submit(ALICE, job(60)).id
    half = second.submit(ALICE, job(60, gpu_share="1/2")).id
    run_until(second, lambda: row(second, half).state == "running")
    for _ in range(5):
        second.tick()
    assert row(second, whole).state == "queued"
    after = slots(second)
    assert {w: after[w] for w in halves} == before
    for w in halves + [whole, half]:
        second.cancel(ALICE, w)
    run_until(second, lambda: not slots(second), timeout=30)


@pytest.mark.parametrize("extra, sharing, field, words", [
    ({"gpu_share": "1/4"}, {}, "gpu_share", "pool 'h200' does not share its GPUs"),
    ({"gpu_memory": "200GiB"}, None, "gpu_memory", "more than a whole h200 GPU has (140.4 GiB)"),
    ({"gpu_share": "7/8"}, None, "gpu_share", "rounds up to a whole h200 GPU"),
])
def test_a_share_the_pool_cannot_give_is_refused_and_nothing_is_kept(db_url, tmp_path, extra,
                                                                      sharing, field, words):
    engine = make_engine(db_url, tmp_path, sharing=sharing)
    with pytest.raises(SpecError) as e:
        engine.submit(ALICE, job(1, **extra))
    assert e.value.field == field and words in e.value.message
    with engine.store.session() as s:
        assert s.scalars(select(WorkloadRow)).first() is None


def test_a_share_above_its_memory_is_warned_then_stopped_with_the_reason(db_url, tmp_path):
    clock = Clock()
    engine = make_engine(db_url, tmp_path, clock=clock)
    greedy = engine.submit(ALICE, job(120, gpu_share="1/4")).id
    modest = engine.submit(ALICE, job(120, gpu_share="1/4")).id
    run_until(engine, lambda: all(row(engine, w).state == "running" for w in (greedy, modest)))
    uuid = engine.nodes["host"].uuid(slots(engine)[greedy][0][0])
    pids = {w: engine.backend.attempt_pids(w, 0) for w in (greedy, modest)}
    run_until(engine, lambda: all(pids[w] for w in pids) or pids.update(
        {w: engine.backend.attempt_pids(w, 0) for w in pids}))
    used = {next(iter(pids[greedy])): 37 * 1024, next(iter(pids[modest])): 20 * 1024}

    def read(uuids, since):
        return {u: ProcessReading(u, MEMORY_MIB, sum(used.values()), dict(used),
                                  {p: 0 for p in used}) for u in uuids}
    watch = share_watch(engine, read, watch=MemoryWatch(grace_s=30))
    [warned] = watch.tick()
    assert (warned.kind, warned.workload_id) == ("warn", greedy)
    assert "GPU memory 37.0 GiB above this share's 35.1 GiB" in warned.reason
    assert engine.share_memory == {greedy: 37 * 1024, modest: 20 * 1024}
    assert watch.tick() == []                   # within the grace: told once
    clock.ahead += 31
    [stopped] = watch.tick()
    assert (stopped.kind, stopped.workload_id) == ("stop", greedy)
    run_until(engine, lambda: row(engine, greedy).state == "failed", timeout=30)
    ended = row(engine, greedy)
    assert "past the 30 s grace" in ended.reason and "GPU memory 37.0 GiB" in ended.reason
    assert row(engine, modest).state == "running"
    log = engine.backend.log_path(engine.launcher.attempt_dir(greedy, 0))
    with open(log) as f:
        lines = [line for line in f if line.startswith("[gpuhub]")]
    assert len(lines) == 2 and "stopped if still above in 30 s" in lines[0]
    with engine.store.session() as s:
        audit = [(a.action, a.target) for a in s.scalars(select(AuditEntry).where(
            AuditEntry.action.like("gpu-memory-%")).order_by(AuditEntry.id))]
        events = [e.type for e in s.scalars(select(EventRow).where(
            EventRow.workload_id == greedy).order_by(EventRow.id))]
    assert audit == [("gpu-memory-warn", greedy), ("gpu-memory-stop", greedy)]
    assert "gpu-memory-warn" in events and "gpu-memory-stop" in events
    engine.cancel(ALICE, modest)
    run_until(engine, lambda: not slots(engine), timeout=30)


def test_a_share_is_an_mps_client_only_while_its_gpu_holds_no_other_users_share(db_url, tmp_path):
    """The pool names each GPU's MPS pipe directory and a daemon runs there
    (its pid file names a live process): alice's first quarter gets MPS with
    its part of the memory and SMs; bob's quarter on the same GPU does not
    (one MPS server serves one user at a time), reaches no daemon, and the
    heat map says the GPU is half MPS, half time-sliced."""
    pipes = tmp_path / "mps"
    engine = make_engine(
        db_url, tmp_path / "data", mps_pipe_directories={"h200": str(pipes) + "/{uuid}"},
        # With user accounts, each user's work runs as their own account.
        prepare_workspace=lambda user: os.makedirs(tmp_path / "data" / "workspaces" / user,
                                                   exist_ok=True))
    uuid = engine.nodes["host"].uuid(0)
    (pipes / uuid).mkdir(parents=True)
    (pipes / uuid / "nvidia-cuda-mps-control.pid").write_text(str(os.getpid()))
    mine = engine.submit(ALICE, job(60, gpu_share="1/4")).id
    run_until(engine, lambda: row(engine, mine).state == "running")
    theirs = engine.submit(BOB, job(60, gpu_share="1/4")).id
    run_until(engine, lambda: row(engine, theirs).state == "running")
    assert {gpu for w in (mine, theirs) for gpu, _ in slots(engine)[w]} == {0}
    with engine.store.session() as s:
        envs = {w: engine.launcher.launch_spec(s, s.get(WorkloadRow, w)).env for w in (mine, theirs)}
    assert envs[mine]["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes / uuid)
    assert envs[mine]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert envs[mine]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={MEMORY_MIB // 4}M"
    assert envs[theirs]["CUDA_MPS_PIPE_DIRECTORY"] == os.path.join(
        engine.launcher.attempt_dir(theirs, 0), "no-mps")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in envs[theirs]
    assert "one user at a time" in row(engine, theirs).spec["share_enforcement"]["notes"][0]
    [gpu] = [g for g in queries.gpus_view(engine.cluster, engine.store, {}) if g.get("shares")]
    assert gpu["enforcement"]["compute"] == \
        "MPS for 1 of 2 shares, the others time-sliced (advisory)"
    [pool] = queries.pools_view(engine.cluster, engine.store, ADMIN)
    assert pool["sharing"]["enforcement"]["compute"].startswith("MPS where the GPU's other shares")
    for w in (mine, theirs):
        engine.cancel(ALICE if w == mine else BOB, w)
    run_until(engine, lambda: not slots(engine), timeout=30)


def test_a_deployment_serves_from_quarter_gpus(db_url, tmp_path):
    """A model deployed with gpu_share: each replica is a quarter of a GPU,
    two replicas sit on one GPU and count 0.5 against the team's quota; a
    pool that does not share refuses it naming the field."""
    engine = make_engine(db_url, tmp_path)
    set_team(engine.steering, ADMIN, "a", None, {"h200": Quota(1, None, None)})  # replicas: within nominal
    os.makedirs(os.path.join(engine.launcher.workspace("alice"), "model"), exist_ok=True)
    ctl = serving_controller(engine)
    ctl.deployments.deploy(ALICE, parse_deploy({"name": "iris", "model_dir": "model",
                                                "gpu_share": "1/4", "min_replicas": 2,
                                                "max_replicas": 2}, "h200"))
    with engine.store.session() as s:
        assert s.scalars(select(DeploymentRow)).one().gpu_share == 0.25
    asyncio.run(ctl.reconcile())
    engine.tick()
    with engine.store.session() as s:
        replicas = s.scalars(select(WorkloadRow).where(WorkloadRow.kind == "deployment")).all()
    assert [(r.gpus_per_node, r.gpu_share) for r in replicas] == [(1, 0.25), (1, 0.25)]
    assert engine.scheduler.state.held_gpus()[("a", "h200")] == 0.5
    assert len({gpu for r in replicas for gpu, _ in slots(engine)[r.id]}) == 1
    unshared = make_engine(db_url, tmp_path / "other", sharing={})
    with pytest.raises(SpecError) as e:
        serving_controller(unshared).deployments.deploy(ALICE, parse_deploy(
            {"name": "iris2", "model_dir": "model", "gpu_share": "1/4"}, "h200"))
    assert e.value.field == "gpu_share" and "does not share its GPUs" in e.value.message
