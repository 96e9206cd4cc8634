"""Gangs on a real multi-node Slurm: three slurmd nodes of two fake GPUs,
each in its own network namespace and hostname, under two switches
(slurm_harness.multinode: gn0 under leaf0, gn1 and gn2 under leaf1), one
slurmctld, shared by every test here (the ``slurm_nodes`` fixture).

The jobs report from inside: each rank writes what it sees (its node, its
GPUs, the rendezvous variables) and talks to rank 0 at MASTER_ADDR."""
from __future__ import annotations

import json
import os
import sys
import time

import pytest
from sqlalchemy import select

from gpuspawner.inventory.slurm import parse_topology
from gpuspawner.scheduler.model import Quota
from gpuspawner.service.workloads import queries
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.vocab.specs import parse_job
from gpuspawner.service.wiring import record_nodes
from gpuspawner.store import EventRow
from slurm_harness import MULTINODE_SLURMD_TIMEOUT, PARTITION, slurm_nodes  # noqa: F401
from test_slurm_engine import ADMIN, ALICE, attempts, make_engine, row, run_until

# Each rank: what it sees as JSON in the attempt directory; rank 1 says hello
# to rank 0 at MASTER_ADDR:MASTER_PORT, across the namespaces.
RANK_REPORT = r"""
import json, os, socket, sys, time
e = os.environ
rank = int(e["RANK"])
seen = {k: e.get(k) for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR",
                              "MASTER_PORT", "GPUHUB_NODE_RANK", "GPUHUB_NUM_NODES",
                              "GPUHUB_NODE_ADDR", "GPUHUB_NODE_ADDRS", "CUDA_VISIBLE_DEVICES",
                              "SLURM_STEP_GPUS", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES",
                              "SLURMD_NODENAME")}
seen["hostname"] = socket.gethostname()
if rank == 0:
    srv = socket.create_server((e["MASTER_ADDR"], int(e["MASTER_PORT"])))
    srv.settimeout(60)
    conn, peer = srv.accept()
    seen["heard"] = conn.recv(200).decode()
    seen["peer"] = peer[0]
else:
    for _ in range(300):
        try:
            with socket.create_connection((e["MASTER_ADDR"], int(e["MASTER_PORT"])), 2) as c:
                c.sendall(f"rank {rank} on {socket.gethostname()}".encode())
            break
        except OSError:
            time.sleep(0.2)
with open(os.path.join(e["GPUHUB_ATTEMPT_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(seen, f)
"""

# Beats every 0.2 s into the checkpoint directory, rank 0 keeping the step
# reached; attempt 0 runs until it is stopped, a later one resumes from the
# step and ends after 15 more.
CHECKPOINTED = r"""
import json, os, socket, time
e = os.environ
rank, attempt, ck = int(e["RANK"]), e["GPUHUB_ATTEMPT"], e["GPUHUB_CHECKPOINT_DIR"]
step_file = os.path.join(ck, "step")
start = int(open(step_file).read()) if os.path.exists(step_file) else 0
beats = open(os.path.join(ck, f"beats-{attempt}-{rank}"), "a")
beats.write(json.dumps({"t": time.time(), "node": socket.gethostname(), "from": start}) + "\n")
step = start
while attempt == "0" or step < start + 15:
    step += 1
    if rank == 0:
        with open(step_file + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(step_file + ".tmp", step_file)
    beats.write(json.dumps({"t": time.time(), "step": step}) + "\n")
    beats.flush()
    time.sleep(0.2)
"""


def script(tmp_path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return [sys.executable, str(path)]


def gang(argv, **kw):
    return parse_job({"command": argv, "gpus": 2, "nodes": 2, "pool": PARTITION,
                      "time_limit": 600, "grace_period": 5, **kw})


def placement(engine, wid: str, attempt: int = 0) -> list[str]:
    return [node for node, _ in attempts(engine, wid)[attempt].placement]


def reports(engine, wid: str) -> list[dict]:
    d = engine.launcher.attempt_dir(wid, 0)
    return [json.load(open(os.path.join(d, f"rank-{r}.json"))) for r in (0, 1)]


@pytest.fixture
def engine(slurm_nodes, tmp_path):
    e = make_engine(slurm_nodes, tmp_path, node_refresh_interval=0.5)
    record_nodes(e.store, list(e.nodes.values()), "slurm")  # as the service does at its start
    set_team(e.steering, ADMIN, "a", None, {PARTITION: Quota(6, 0, None)})
    yield e
    slurm_nodes.cancel_all()


def test_the_inventory_has_each_nodes_address_and_switches(slurm_nodes, engine):
    backend = engine.backend
    assert {n: ln.node.topology for n, ln in engine.nodes.items()} == {
        "gn0": {"switch": "leaf0", "switch1": "top"},
        "gn1": {"switch": "leaf1", "switch1": "top"},
        "gn2": {"switch": "leaf1", "switch1": "top"}}
    addrs = {n: backend.node_address(n) for n in slurm_nodes.nodes}
    assert addrs == slurm_nodes.addr and len(set(addrs.values())) == 3
    assert "127.0.0.1" not in addrs.values()


def test_a_two_node_gang_is_one_allocation_whose_ranks_see_their_gpus_and_rank_0(
        slurm_nodes, engine, tmp_path):
    wid = engine.submit(ALICE, gang(script(tmp_path, "report.py", RANK_REPORT))).id
    run_until(engine, lambda: row(engine, wid).state in ("succeeded", "failed"), timeout=90)
    assert row(engine, wid).state == "succeeded", row(engine, wid).reason
    nodes = placement(engine, wid)
    r0, r1 = reports(engine, wid)
    # One Slurm job over both placed nodes, rank i on the placement's node i.
    assert r0["SLURM_JOB_ID"] == r1["SLURM_JOB_ID"] and r0["SLURM_JOB_NUM_NODES"] == "2"
    assert [r0["hostname"], r1["hostname"]] == [r0["SLURMD_NODENAME"], r1["SLURMD_NODENAME"]] \
        == nodes
    master = slurm_nodes.addr[nodes[0]]
    for rank, r in enumerate((r0, r1)):
        assert (r["RANK"], r["NODE_RANK"], r["GPUHUB_NODE_RANK"], r["LOCAL_RANK"]) == \
               (str(rank), str(rank), str(rank), "0")
        assert (r["WORLD_SIZE"], r["GPUHUB_NUM_NODES"], r["MASTER_ADDR"]) == ("2", "2", master)
        assert r["GPUHUB_NODE_ADDR"] == slurm_nodes.addr[nodes[rank]]
        assert r["MASTER_PORT"] == r0["MASTER_PORT"]
        # Its node's two GPUs, as Slurm bound them to the step.
        assert r["CUDA_VISIBLE_DEVICES"] == r["SLURM_STEP_GPUS"] == "0,1"
    assert r0["GPUHUB_NODE_ADDRS"] == ",".join(slurm_nodes.addr[n] for n in nodes)
    # Rank 1 reached rank 0 from its own namespace, at its own address.
    assert r0["heard"] == f"rank 1 on {nodes[1]}"
    assert r0["peer"] == slurm_nodes.addr[nodes[1]]


def test_a_gang_that_must_stay_under_one_switch_gets_the_two_nodes_of_leaf1(
        slurm_nodes, engine, tmp_path):
    argv = ["/bin/sh", "-c", 'echo "$RANK on $SLURMD_NODENAME"']
    wid = engine.submit(ALICE, gang(argv, topology="required", topology_key="switch")).id
    run_until(engine, lambda: row(engine, wid).state in ("succeeded", "failed"), timeout=60)
    assert row(engine, wid).state == "succeeded", row(engine, wid).reason
    assert placement(engine, wid) and set(placement(engine, wid)) == {"gn1", "gn2"}
    with open(os.path.join(engine.launcher.attempt_dir(wid, 0), "output.log")) as f:
        assert sorted(f.read().split("\n")[:2]) == sorted(
            f"{r} on {n}" for r, n in enumerate(placement(engine, wid)))
    # Slurm's own tree agrees: one leaf switch holds both.
    tree = parse_topology(slurm_nodes.cmd(["scontrol", "show", "topology"]).stdout)
    assert {tree[n]["switch"] for n in placement(engine, wid)} == {"leaf1"}


def test_a_lost_node_stops_the_whole_gang_which_restarts_elsewhere_from_its_checkpoint(
        slurm_nodes, engine, tmp_path):
    wid = engine.submit(ALICE, gang(script(tmp_path, "train.py", CHECKPOINTED))).id
    ck = row(engine, wid).spec["checkpoint_dir"]
    beats = lambda a, r: os.path.join(ck, f"beats-{a}-{r}")  # noqa: E731
    run_until(engine, lambda: all(os.path.exists(beats(0, r)) for r in (0, 1)), timeout=60)
    first = placement(engine, wid)
    lost, survivor = first[1], first[0]
    time.sleep(1)  # a few checkpointed steps
    t_loss = time.time()
    slurm_nodes.lose_node(lost)
    seen: dict[str, float] = {}

    def progress() -> bool:
        now = time.time()
        a = attempts(engine, wid)
        if a[0].ended_at is not None:
            seen.setdefault("stopped", now)
        with engine.store.session() as s:
            if s.scalars(select(EventRow).where(EventRow.workload_id == wid,
                                                EventRow.type == "requeued")).first():
                seen.setdefault("requeued", now)
        if os.path.exists(beats(1, 0)) and os.path.exists(beats(1, 1)):
            seen.setdefault("running", now)
        return row(engine, wid).state in ("succeeded", "failed")
    try:
        run_until(engine, progress, timeout=MULTINODE_SLURMD_TIMEOUT + 60)
        lines = {(a, r): [json.loads(x) for x in open(beats(a, r))] for a in (0, 1) for r in (0, 1)}
        a0, a1 = attempts(engine, wid)  # requeued once: two attempts
        # Evicted when the hub sees the node NOT_RESPONDING (its look every 0.5 s);
        # lost when Slurm's NODE_FAIL (after SlurmdTimeout) comes first.
        assert a0.state in ("evicted", "lost") and row(engine, wid).state == "succeeded", \
            (a0.state, a0.reason)
        second = placement(engine, wid, 1)
        assert lost not in second and set(second) == {"gn0", "gn1", "gn2"} - {lost}
        # The lost node is unhealthy in the inventory and in what the pools API shows.
        assert not engine.nodes[lost].node.healthy
        pool, = queries.pools_view(engine.cluster, engine.store, ADMIN)
        devices = {n["name"]: n["devices"] for n in pool["nodes"]}
        assert [d["healthy"] for d in devices[lost]] == [False, False]
        assert "Slurm" in devices[lost][0]["health_reason"]
        assert all(d["healthy"] for n in second for d in devices[n])
        # Never two copies at once: every beat of attempt 0 (both ranks) came
        # before the first of attempt 1, which resumed from attempt 0's step.
        last0 = max(b["t"] for r in (0, 1) for b in lines[(0, r)])
        first1 = min(lines[(1, r)][0]["t"] for r in (0, 1))
        assert last0 < first1 and a0.ended_at <= a1.started_at
        steps0 = [b["step"] for b in lines[(0, 0)] if "step" in b]
        assert lines[(1, 0)][0]["from"] >= steps0[-1] - 1 > 0
        # The surviving node's GPUs were given back (Slurm and the hub agree).
        assert slurm_nodes.node_states()[survivor] == "idle"
        print(f"\nnode {lost} lost at 0 s: gang stopped at {seen['stopped'] - t_loss:.1f} s, "
              f"requeued at {seen['requeued'] - t_loss:.1f} s, both ranks running again at "
              f"{first1 - t_loss:.1f} s on {','.join(second)} (resumed from step "
              f"{lines[(1, 0)][0]['from']})")
    finally:
        slurm_nodes.revive_node(lost)
    # Back in Slurm: healthy again in the hub at its next look.
    run_until(engine, lambda: engine.nodes[lost].node.healthy, timeout=30)


def test_a_replica_serves_at_its_nodes_address_and_is_replaced_when_its_node_is_lost(
        slurm_nodes, tmp_path):
    """Serving through Slurm: the hub (JupyterHub, proxy, service and router on
    this host) reaches a replica in a node's namespace, at the node's address."""
    from hub_harness import Hub, wait_for
    from test_serving_e2e import EXAMPLE, call, endpoint, infer_body, ready
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"]},
              teams={"a": {"quotas": {"a100": {"nominal": 4}}}}, extra_service_config=f"""
c.GpuHubService.backend = "slurm"
c.SlurmBackend.slurm_conf = {slurm_nodes.conf!r}
c.SlurmBackend.partitions = {{"a100": {PARTITION!r}}}
c.SlurmBackend.poll_interval = 0.5
c.SlurmBackend.node_refresh_interval = 0.5
c.GpuHubService.replica_unready_seconds = 8
""")
    hub.start()
    lost = None
    try:
        alice = hub.client("alice")
        w = alice.submit(command=[sys.executable, os.path.join(EXAMPLE, "train.py"),
                                  "models/iris"], gpus=1)  # Slurm jobs are placed: a GPU
        done = alice.wait(w["id"], ("succeeded", "failed"), 120)
        assert done["state"] == "succeeded", (
            done["reason"], alice.get(f"/workloads/{w['id']}/logs").text)
        r = alice.post("/deployments", json={"name": "iris", "model_dir": "models/iris",
                                             "gpus": 1})
        assert r.status_code == 201, r.text
        first = ready(hub, "iris")["revisions"][0]["replicas"][0]
        lost = alice.get(f"/workloads/{first}").json()["placement"][0]["node"]
        settings = os.path.join(hub.data_dir, "deployments", "a", "iris", "r1", first,
                                "settings.json")
        assert json.load(open(settings))["host"] == slurm_nodes.addr[lost]
        resp = call(hub, endpoint(hub, "iris"), infer_body())
        assert resp.status_code == 200 and resp.json()["outputs"][0]["data"] == [0, 2], resp.text
        slurm_nodes.lose_node(lost)
        t_loss = time.time()

        def replaced():
            d = alice.get("/deployments/a/iris").json()
            rev = d["revisions"][0]
            return rev["replicas"] if rev["ready_replicas"] and first not in rev["replicas"] \
                else None
        new, = wait_for(replaced, "a ready replica on another node", 90)
        t_ready = time.time()
        node = alice.get(f"/workloads/{new}").json()["placement"][0]["node"]
        assert node != lost
        resp = call(hub, endpoint(hub, "iris"), infer_body())
        assert resp.status_code == 200, resp.text
        print(f"\nreplica on {lost} lost: a new one ready on {node} after "
              f"{t_ready - t_loss:.1f} s")
    finally:
        if lost is not None:
            slurm_nodes.revive_node(lost)
        hub.stop()
