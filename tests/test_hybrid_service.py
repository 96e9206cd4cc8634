"""One service, two backends (``GpuHubService.backends``): this host's fake
GPUs make pool ``l4`` (the local backend), the real test Slurm's make pool
``a100`` (the Slurm backend). A job in each pool runs where its pool is: the
local one under the service's runner, the Slurm one as a Slurm job; the
pools API says where each pool's nodes come from; an attempt of each is
found again by a restarted service."""
from __future__ import annotations

import time

from gpuspawner.backends.pools import PoolBackends
from gpuspawner.service.workloads import queries
from gpuspawner.service.app import GpuHubService
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.store import WorkloadRow
from slurm_harness import GPUS, NODE, PARTITION, slurm  # noqa: F401  (the fixture)

ALICE = Identity("alice", teams=frozenset({"vision"}), can_submit=True)
SAYS = ('echo "pool $GPUHUB_POOL, slurm job ${SLURM_JOB_ID:-none}, '
        'GPUs $GPUHUB_GPU_INDICES"')


def service(tmp_path, slurm, monkeypatch) -> GpuHubService:
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://127.0.0.1:{ports_below_ephemeral(1)}")
    config = tmp_path / "gpuhub_config.py"
    config.write_text(f"""
c.GpuHubService.backends = ["local", "slurm"]
c.GpuHubService.data_dir = {str(tmp_path / 'data')!r}
c.GpuHubService.teams = {{"vision": {{"quotas": {{"l4": {{"nominal": 2}}, "a100": {{"nominal": 4}}}}}}}}
c.Inventory.source = "declared"
c.Inventory.declared = [{{"model": "Fake L4", "count": 2, "memory_mib": 24576, "pool": "l4"}}]
c.SlurmBackend.slurm_conf = {slurm.conf!r}
c.SlurmBackend.partitions = {{"a100": {PARTITION!r}}}
c.SlurmBackend.poll_interval = 0.0
c.GpuHubService.start_threads = 0
# The wiring only: jobs as users' accounts are tested through the hub (test_slurm_service)
c.GpuHubService.user_accounts = False
""")
    app = GpuHubService()
    app.initialize(["-f", str(config)])
    return app


def run_until_done(app, wids, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.engine.tick()
        with app.store.session() as s:
            states = {w: s.get(WorkloadRow, w).state for w in wids}
        if all(st in ("succeeded", "failed") for st in states.values()):
            return states
        time.sleep(0.2)
    raise AssertionError(f"not done: {states}")


def output(app, wid) -> str:
    path = app.engine.backend.log_path(app.engine.launcher.attempt_dir(wid, 0))
    with open(path) as f:
        return f.read()


def test_each_pool_runs_on_its_own_backend_and_restarts_find_both(slurm, tmp_path, monkeypatch):
    app = service(tmp_path, slurm, monkeypatch)
    try:
        assert isinstance(app.engine.backend, PoolBackends)
        pools = {p["name"]: p for p in queries.pools_view(
            app.engine.cluster, app.engine.store, Identity("root", admin=True))}
        assert {n: p["capacity"] for n, p in pools.items()} == {"l4": 2, "a100": GPUS}
        assert pools["a100"]["nodes"][0]["name"] == NODE
        assert pools["a100"]["nodes"][0]["source"] == "slurm"
        assert pools["l4"]["nodes"][0]["source"] == "declared"
        assert app.enforcement_report()["notes"][-1] == \
            "other pools: slurm (ConstrainDevices in cgroup.conf)"
        here = app.engine.submit(ALICE, parse_job({"command": SAYS, "gpus": 1, "pool": "l4"},
                                                  app.limits())).id
        there = app.engine.submit(ALICE, parse_job({"command": SAYS, "gpus": 2, "pool": "a100"},
                                                   app.limits())).id
        states = run_until_done(app, [here, there])
        with app.store.session() as s:
            why = {w: s.get(WorkloadRow, w).reason for w in (here, there)}
        assert states == {here: "succeeded", there: "succeeded"}, why
        assert "pool l4, slurm job none, GPUs 0" in output(app, here)
        line = next(l for l in output(app, there).splitlines() if l.startswith("pool a100"))
        assert "slurm job none" not in line, line  # it ran as a Slurm job
        # Long ones in both pools, then a restart: each is adopted by its own backend.
        hold = {pool: app.engine.submit(ALICE, parse_job(
            {"command": "sleep 60", "gpus": 1, "pool": pool}, app.limits())).id
            for pool in ("l4", "a100")}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and set(app.engine.scheduler.state.running) != \
                set(hold.values()):
            app.engine.tick()
            time.sleep(0.2)
        assert set(app.engine.scheduler.state.running) == set(hold.values())
    finally:
        app.close()
    again = service(tmp_path, slurm, monkeypatch)
    try:
        assert set(again.engine.scheduler.state.running) == set(hold.values())
        for wid in hold.values():
            again.engine.cancel(ALICE, wid)
        assert run_until_cancelled(again, list(hold.values()))
    finally:
        again.close()


def run_until_cancelled(app, wids, timeout=60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.engine.tick()
        with app.store.session() as s:
            if all(s.get(WorkloadRow, w).state == "cancelled" for w in wids):
                return True
        time.sleep(0.2)
    return False
