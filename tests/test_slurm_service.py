"""The service configured for Slurm (``c.GpuHubService.backend = "slurm"``):
its nodes come from the real test cluster and its jobs run there."""
from __future__ import annotations

import time

from sqlalchemy import select

from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.service.app import GpuHubService
from gpuspawner.service.identity import Identity
from gpuspawner.service.specs import parse_job
from gpuspawner.store import GpuRow, NodeRow, WorkloadRow
from slurm_harness import GPUS, NODE, PARTITION, slurm  # noqa: F401  (the fixture)


def test_generated_config_documents_the_slurm_options():
    text = GpuHubService().generate_config_file()
    for option in ("c.GpuHubService.backend", "c.SlurmBackend.partitions",
                   "c.SlurmBackend.pool_from", "c.SlurmBackend.sbatch_args",
                   "c.SlurmBackend.slurm_conf", "c.SlurmBackend.warn_before_time_limit"):
        assert option in text


def test_the_service_schedules_slurm_nodes_and_runs_jobs_there(slurm, tmp_path):
    config = tmp_path / "gpuhub_config.py"
    config.write_text(f"""
c.GpuHubService.backend = "slurm"
c.GpuHubService.data_dir = {str(tmp_path / 'data')!r}
c.GpuHubService.teams = {{"vision": {{"quotas": {{"a100": {{"nominal": 4}}}}}}}}
c.SlurmBackend.slurm_conf = {slurm.conf!r}
c.SlurmBackend.partitions = {{"a100": {PARTITION!r}}}
c.SlurmBackend.poll_interval = 0.0
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
        app.store.close()
