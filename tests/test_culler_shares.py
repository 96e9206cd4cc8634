"""The culler judges a share of a GPU by its own processes' activity, not the whole GPU's."""
from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from gpuspawner.culler.bench import GPUHUB, HUB, SimulatedApis
from gpuspawner.culler.decide import GpuSample, Policy
from gpuspawner.culler.service import Culler
from gpuspawner.culler.shares import held_samples, share_utilization

NOW = dt.datetime(2026, 1, 5, 12, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("pids, sm, util", [
    ({1, 2}, {1: 30, 2: 25, 3: 90}, 55.0),   # its processes' sum; the neighbour's 90 is not its
    ({1}, {3: 90}, 0.0),                     # no sample of its own: no SM activity of its own
    ({1, 2}, {1: 80, 2: 70}, 100.0),         # capped
    (None, {1: 50}, None),                   # its processes unknown
    ({1}, None, None),                       # no per-process figures (e.g. a MIG device)
])
def test_a_shares_activity_is_its_own_processes(pids, sm, util):
    assert share_utilization(pids, sm) == util


def test_held_samples_give_a_shared_gpus_figures_to_their_shares_only():
    gpus = [{"device": 0, "utilization_pct": 95.0, "workload": {"id": "job"}},
            {"device": 1, "utilization_pct": 90.0, "workload": None,
             "shares": [{"workload": {"id": "nb-idle"}, "utilization_pct": 0.0},
                        {"workload": {"id": "nb-busy"}, "utilization_pct": 90.0},
                        {"workload": {"id": "nb-unknown"}, "utilization_pct": None}]},
            {"device": 2, "utilization_pct": None, "workload": {"id": "job2"}}]
    assert held_samples(gpus, NOW) == {
        "job": [GpuSample(NOW, 0, 95.0)], "nb-idle": [GpuSample(NOW, 1, 0.0)],
        "nb-busy": [GpuSample(NOW, 1, 90.0)]}


def test_an_idle_notebook_next_to_a_busy_one_is_culled_and_the_busy_one_kept():
    apis = SimulatedApis(2, gpu_share=1.0, page_size=0, now=NOW)
    # u0 and u1 share GPU 0: the GPU is 90% busy, all of it u1's.
    apis.gpus = [{"device": 0, "utilization_pct": 90.0, "workload": None,
                  "shares": [{"workload": {"id": "w0"}, "utilization_pct": 0.0},
                             {"workload": {"id": "w1"}, "utilization_pct": 90.0}]}]
    clock = [NOW]
    culler = Culler(Policy(gpu_idle_timeout=1800), [], hub_api=HUB, gpuhub_api=GPUHUB,
                    fetch=apis.fetch, cull_every=60, clock=lambda: clock[0])

    async def run(n):
        for _ in range(n):
            decisions = dict(await culler.cycle())
            clock[0] += dt.timedelta(seconds=60)
        return decisions
    last = asyncio.run(run(32))
    assert last["u1"].action == "keep" and last["u1"].rule == "gpu_busy"
    assert apis.by_name["u0"]["servers"] == {}          # culled
    assert apis.by_name["u1"]["servers"] != {}
