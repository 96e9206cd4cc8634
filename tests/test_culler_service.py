"""The culler service's pass against simulated hub and service answers
(the in-memory APIs of the benchmark), with a virtual clock."""
from __future__ import annotations

import asyncio
import datetime as dt

from gpuspawner.culler.bench import GPUHUB, HUB, SimulatedApis, run_bench
from gpuspawner.culler.decide import Policy
from gpuspawner.culler.service import Culler

NOW = dt.datetime(2026, 1, 5, 12, tzinfo=dt.timezone.utc)


def passes(culler: Culler, clock: list, n: int) -> list:
    out = []

    async def run():
        for _ in range(n):
            out.append(await culler.cycle())
            clock[0] += dt.timedelta(seconds=60)
    asyncio.run(run())
    return out


def run_gpu_idle_culler(apis: SimulatedApis) -> list:
    """45 passes a minute apart of a culler that culls after 30 min of GPU
    idleness (warned 10 min before); the calls it made."""
    calls = []

    async def fetch(method, url, body=None):
        calls.append((method, url, body))
        return await apis.fetch(method, url, body)
    clock = [NOW]
    culler = Culler(Policy(idle_timeout=24 * 3600, gpu_idle_timeout=1800, warn_before=600), [],
                    hub_api=HUB, gpuhub_api=GPUHUB, fetch=fetch, cull_every=60,
                    clock=lambda: clock[0])
    passes(culler, clock, 45)
    return calls


def test_gpu_idle_servers_are_warned_once_then_culled_and_audited():
    apis = SimulatedApis(30, gpu_share=0.5, page_size=0, now=NOW)
    calls = run_gpu_idle_culler(apis)
    posts = [b for m, u, b in calls if m == "POST" and u.endswith("/notices")]
    culls = [u for m, u, _ in calls if m == "DELETE" and u.startswith(HUB)]
    audits = [b for m, u, b in calls if m == "POST" and u.endswith("/audit")]
    # u0 and u10 hold idle GPUs (util 0): one warning each, then one cull each.
    assert sorted(p["user"] for p in posts) == ["u0", "u10"]
    assert culls == [f"{HUB}/users/u0/server", f"{HUB}/users/u10/server"]
    assert [a["target"] for a in audits] == ["u0", "u10"]
    assert audits[0]["detail"]["rule"] == "gpu_idle" and audits[0]["detail"]["gpu_idle_s"] >= 1800


def test_dry_run_acts_on_nothing():
    apis = SimulatedApis(20, gpu_share=0.5, page_size=0, now=NOW)
    calls = []

    async def fetch(method, url, body=None):
        calls.append(method)
        return await apis.fetch(method, url, body)
    clock = [NOW]
    culler = Culler(Policy(idle_timeout=60, gpu_idle_timeout=60), [], hub_api=HUB,
                    gpuhub_api=GPUHUB, fetch=fetch, cull_every=60, dry_run=True,
                    clock=lambda: clock[0])
    decided = passes(culler, clock, 5)
    assert any(d.action == "cull" for _label, d in decided[-1])
    assert set(calls) == {"GET"}


def test_bench_rows_compare_with_the_jupyter_only_baseline():
    rows = run_bench(servers=100, passes=45)
    base, gpu, paged = rows
    assert gpu["culls"] > base["culls"]  # idle GPUs behind recent Jupyter activity
    assert base["api_calls_per_pass"] >= 3 and paged["api_calls_per_pass"] >= gpu["api_calls_per_pass"]


def test_cull_users_deletes_the_user_after_their_last_server():
    apis = SimulatedApis(30, gpu_share=0.5, page_size=0, now=NOW)
    calls = []

    async def fetch(method, url, body=None):
        calls.append((method, url))
        return await apis.fetch(method, url, body)
    clock = [NOW]
    culler = Culler(Policy(idle_timeout=24 * 3600, gpu_idle_timeout=600, cull_users=True), [],
                    hub_api=HUB, gpuhub_api=GPUHUB, fetch=fetch, cull_every=60,
                    clock=lambda: clock[0])
    passes(culler, clock, 15)
    deleted = [u for m, u in calls if m == "DELETE" and u.startswith(f"{HUB}/users/")]
    assert deleted == [f"{HUB}/users/u0/server", f"{HUB}/users/u0",
                       f"{HUB}/users/u10/server", f"{HUB}/users/u10"]


def test_a_share_is_judged_by_its_own_processes_not_by_its_busy_neighbour():
    """Two notebooks share one GPU whose whole-GPU figure is 90% busy: the
    one whose own processes are idle is warned and culled, the busy one
    stays, and one whose own figure is unknown is left to its activity."""
    apis = SimulatedApis(3, gpu_share=0, page_size=0, now=NOW)
    apis.workloads = [{"id": f"w{i}", "user": f"u{i}", "name": "", "team": "t0", "pool": "h200",
                       "gpu_share": 0.5 if i == 1 else 0.25} for i in range(3)]
    for u in apis.users:  # all recently active in Jupyter: only the GPU rule can cull
        u["servers"][""]["last_activity"] = NOW.isoformat()
    apis.gpus = [{"device": 0, "utilization_pct": 90.0, "workload": None, "shares": [
        {"workload": {"id": "w0"}, "share": 0.25, "utilization_pct": 0.0},
        {"workload": {"id": "w1"}, "share": 0.5, "utilization_pct": 90.0},
        {"workload": {"id": "w2"}, "share": 0.25, "utilization_pct": None}]}]
    calls = run_gpu_idle_culler(apis)
    culls = [u for m, u, _ in calls if m == "DELETE" and u.startswith(HUB)]
    assert culls == [f"{HUB}/users/u0/server"]
    # The audit says what it held: a quarter of its one GPU.
    [audit] = [b for m, u, b in calls if m == "POST" and u.endswith("/audit")]
    assert (audit["detail"]["gpu_count"], audit["detail"]["gpu_units"]) == (1, 0.25)
