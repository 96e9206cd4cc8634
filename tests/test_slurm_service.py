"""The service configured for Slurm (``c.GpuHubService.backend = "slurm"``):
its nodes come from the real test cluster and its jobs run there."""
from __future__ import annotations

import time

from sqlalchemy import select

from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.service.app import GpuHubService
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.store import GpuRow, NodeRow, WorkloadRow
from slurm_harness import GPUS, NODE, PARTITION, slurm  # noqa: F401  (the fixture)


def test_generated_config_documents_the_slurm_options():
    text = GpuHubService().generate_config_file()
    for option in ("c.GpuHubService.backend", "c.SlurmBackend.partitions",
                   "c.SlurmBackend.pool_from", "c.SlurmBackend.sbatch_args",
                   "c.SlurmBackend.slurm_conf", "c.SlurmBackend.warn_before_time_limit"):
        assert option in text


def test_the_service_schedules_slurm_nodes_and_runs_jobs_there(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://127.0.0.1:{ports_below_ephemeral(1)}")
    config = tmp_path / "gpuhub_config.py"
    config.write_text(f"""
c.GpuHubService.backend = "slurm"
c.GpuHubService.data_dir = {str(tmp_path / 'data')!r}
c.GpuHubService.teams = {{"vision": {{"quotas": {{"a100": {{"nominal": 4}}}}}}}}
c.SlurmBackend.slurm_conf = {slurm.conf!r}
c.SlurmBackend.partitions = {{"a100": {PARTITION!r}}}
c.SlurmBackend.poll_interval = 0.0
# The wiring only; jobs as users' accounts: the test through the hub below.
c.GpuHubService.user_accounts = False
""")
    app = GpuHubService()
    app.initialize(["-f", str(config)])
    try:
        engine = app.engine
        assert isinstance(engine.backend, SlurmBackend)
        assert [(n.node.name, n.node.pool, n.node.gpus) for n in engine.nodes.values()] == [
            (NODE, "a100", GPUS)]
        assert app.default_pool == "a100" and app.source == "slurm"
        with app.store.session() as s:
            assert s.get(NodeRow, NODE).source == "slurm"
            assert len(s.scalars(select(GpuRow).where(GpuRow.node == NODE)).all()) == GPUS
        alice = Identity("alice", teams=frozenset({"vision"}), can_submit=True)
        wid = engine.submit(alice, parse_job({"command": ["/bin/sh", "-c", "exit 0"], "gpus": 1},
                                             app.limits())).id
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            engine.tick()
            with app.store.session() as s:
                if s.get(WorkloadRow, wid).state == "succeeded":
                    break
            time.sleep(0.2)
        with app.store.session() as s:
            assert s.get(WorkloadRow, wid).state == "succeeded"
    finally:
        app.close()


def test_through_the_hub_a_job_runs_in_slurm_and_its_logs_and_cancel_work(slurm, tmp_path):
    """The whole product on Slurm: JupyterHub + proxy + service, REST API."""
    from hub_harness import Hub
    hub = Hub(str(tmp_path), groups={"team-vision": ["alice"]},
              teams={"vision": {"quotas": {"a100": {"nominal": 4}}}},
              extra_service_config=f"""
c.GpuHubService.backend = "slurm"
c.SlurmBackend.slurm_conf = {slurm.conf!r}
c.SlurmBackend.partitions = {{"a100": {PARTITION!r}}}
c.SlurmBackend.poll_interval = 0.5
""")
    hub.start()
    try:
        alice = hub.client("alice")
        pools = alice.get("/pools").json()["pools"]
        assert [(p["name"], p["capacity"]) for p in pools] == [("a100", GPUS)]
        assert pools[0]["nodes"][0]["name"] == NODE and pools[0]["nodes"][0]["source"] == "slurm"
        w = alice.submit(command='echo "as $(id -un) on $SLURMD_NODENAME with GPUs '
                                 '$SLURM_JOB_GPUS"', gpus=2)
        alice.wait(w["id"], "succeeded", timeout=60)
        logs = alice.get(f"/workloads/{w['id']}/logs").text
        assert f"as {hub.account('alice').pw_name} on {NODE} with GPUs " in logs, logs
        assert len(logs.split("GPUs ")[1].split(",")) == 2
        long = alice.submit(command="sleep 300", gpus=1, grace_period=5)
        alice.wait(long["id"], "running")
        assert alice.post(f"/workloads/{long['id']}/cancel").status_code == 202  # stopping
        alice.wait(long["id"], "cancelled", timeout=30)
        queued = slurm.cmd(["squeue", "-h", "-o", "%j"]).stdout.split()
        assert f"gpuhub.{long['id']}.0" not in queued
    finally:
        hub.stop()
