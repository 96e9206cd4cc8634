"""``gpuhub bench culler``: one culler pass over 1,000 servers.

The hub's and the scheduler service's answers are simulated (in memory), so
this measures the culler itself: cycle time (listing, sample bookkeeping,
one decision per server, the resulting actions) and API calls per pass. The
baseline, in the same run, is the same culler with Jupyter activity only
(no GPU rule), which is what jupyterhub-idle-culler decides on.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import statistics
import time
from dataclasses import replace

from .decide import Policy
from .service import Culler

HUB, GPUHUB = "http://hub/hub/api", "http://svc/api/v1"


class SimulatedApis:
    """Answers a culler's calls the way the hub and the service would."""

    def __init__(self, servers: int, gpu_share: float, page_size: int, now: dt.datetime):
        self.page_size = page_size
        self.users, self.gpus, self.workloads = [], [], []
        started = (now - dt.timedelta(hours=12)).isoformat()
        for i in range(servers):
            active = (now - dt.timedelta(minutes=(i * 7) % 600)).isoformat()
            self.users.append({"name": f"u{i}", "admin": False, "groups": [f"team-t{i % 20}"],
                               "servers": {"": {"started": started, "last_activity": active,
                                                "pending": None}}})
            if i < servers * gpu_share:
                wid = f"w{i}"
                self.workloads.append({"id": wid, "user": f"u{i}", "name": "", "team": f"t{i % 20}",
                                       "pool": "a100" if i % 3 else "h100"})
                for g in range(1 + i % 4):
                    util = 0.0 if i % 10 == 0 else 40.0 + (i % 50)
                    self.gpus.append({"device": len(self.gpus), "utilization_pct": util,
                                      "workload": {"id": wid}})
        self.by_name = {u["name"]: u for u in self.users}

    async def fetch(self, method, url, body=None):
        if url.startswith(f"{HUB}/users?"):
            query = dict(p.split("=") for p in url.split("?", 1)[1].split("&"))
            offset = int(query.get("offset", 0))
            limit = int(query.get("limit", 0)) or len(self.users)
            items = self.users[offset:offset + limit]
            nxt = {"offset": offset + limit} if offset + limit < len(self.users) else None
            return {"items": items, "_pagination": {"next": nxt}}
        if url == f"{GPUHUB}/gpus":
            return {"gpus": self.gpus}
        if url.startswith(f"{GPUHUB}/workloads"):
            return {"workloads": self.workloads}
        if url == f"{GPUHUB}/notices" and method == "POST":
            return {"id": 1}
        if method == "DELETE" and url.startswith(f"{HUB}/users/"):
            name = url[len(f"{HUB}/users/"):].split("/")[0]
            self.by_name[name]["servers"] = {}  # the hub stops it
        return None  # audit entries, notice clearing


def measure(policy: Policy, servers: int, passes: int, page_size: int) -> dict:
    now = dt.datetime(2026, 1, 5, 12, tzinfo=dt.timezone.utc)
    apis = SimulatedApis(servers, gpu_share=0.5, page_size=page_size, now=now)
    clock = [now]
    culler = Culler(policy, [], hub_api=HUB, gpuhub_api=GPUHUB, fetch=apis.fetch, cull_every=60,
                    page_size=page_size, clock=lambda: clock[0])
    times, calls, actions = [], [], {"warn": 0, "cull": 0}

    async def run():
        for _ in range(passes):
            before = culler.calls
            t0 = time.perf_counter()
            decisions = await culler.cycle()
            times.append(time.perf_counter() - t0)
            calls.append(culler.calls - before)
            for _label, d in decisions:
                if d.action == "cull" or (d.action == "warn" and d.notify):
                    actions[d.action] += 1
            clock[0] += dt.timedelta(seconds=60)

    asyncio.run(run())
    times.sort()
    return {"servers": servers, "page_size": page_size, "passes": passes,
            "cycle_p50_ms": round(statistics.median(times) * 1000, 2),
            "cycle_max_ms": round(times[-1] * 1000, 2),
            "api_calls_per_pass": round(statistics.mean(calls), 1),
            "warnings": actions["warn"], "culls": actions["cull"]}


def run_bench(servers: int = 1000, passes: int = 50) -> list[dict]:
    """Simulated time moves 60 s a pass, so idle servers are warned and culled
    during the run (actions are part of the measured cost)."""
    logging.getLogger("gpuhub.culler").setLevel(logging.ERROR)
    gpu = Policy(idle_timeout=8 * 3600, gpu_idle_timeout=1800, warn_before=600)
    rows = []
    for name, policy, page in (("jupyter-only (baseline)", replace(gpu, gpu_idle_timeout=0), 0),
                               ("gpu-aware", gpu, 0), ("gpu-aware, pages of 200", gpu, 200)):
        rows.append({"policy": name, **measure(policy, servers, passes, page)})
    base = rows[0]["cycle_p50_ms"]
    for r in rows:
        r["p50_vs_baseline"] = round(r["cycle_p50_ms"] / base, 2) if base else None
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'policy':<26} {'servers':>7} {'p50 ms':>8} {'max ms':>8} {'calls':>6} "
             f"{'warned':>6} {'culled':>6} {'p50 x base':>10}"]
    for r in rows:
        lines.append(f"{r['policy']:<26} {r['servers']:>7} {r['cycle_p50_ms']:>8.1f} "
                     f"{r['cycle_max_ms']:>8.1f} {r['api_calls_per_pass']:>6.1f} "
                     f"{r['warnings']:>6} {r['culls']:>6} {r['p50_vs_baseline']:>10.2f}")
    return "\n".join(lines)
