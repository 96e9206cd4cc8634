"""Job turnover on a temporary hub: how long N tiny jobs (``true``, 0 GPUs)
take from their submits to their ends, and the CPU the service (with the
processes it starts for them) and the hub spend per job.

The submit row of ``bench api`` says how the API fares while its jobs start
beside it; it cannot say what a start costs: when starts fall behind the
submits (they waited on the hub, say), the row gets faster and the jobs
finish later. This measures the whole of it. CPU is read from
``/proc/PID/stat`` (user + system, with reaped children) of the service and
the hub, so it is on this machine only.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from ..client import GpuHubClient


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its reaped children, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def drained(api: str, token: str, project: str, timeout: float) -> bool:
    """Whether nothing of ``project`` the token sees is queued or running
    any more (waiting up to ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    with GpuHubClient(api, token) as client:
        while client.list_workloads(state=["queued", "running"], project=project,
                                    limit=1)["workloads"]:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
    return True


def job_turnover(hub, token: str, project: str, submit: Callable[[int], dict], n: int = 600,
                 timeout: float = 600.0) -> dict:
    """``submit(n)`` submits ``n`` tiny jobs of ``project`` (which tells them
    from other work) and returns its row (``errors``); wait for all of them
    to end, and say how long it took and what it cost."""
    api = hub.url + "/services/gpuhub/api/v1"
    name = f"job turnover, {n} × 0-GPU `true`"
    if not drained(api, token, project, timeout):
        return {"name": name, "errors": 1, "error": "earlier jobs did not end"}
    pids = (hub.service_pid(), hub.proc.pid)
    cpu0 = [cpu_seconds(p) for p in pids]
    t0 = time.perf_counter()
    row = submit(n)
    submitted = time.perf_counter() - t0
    done = drained(api, token, project, timeout)
    wall = time.perf_counter() - t0
    service, hub_cpu = (cpu_seconds(p) - c for p, c in zip(pids, cpu0))
    return {"name": name, "jobs": n, "submitted_s": round(submitted, 2), "all_ended_s": round(wall, 2),
            "jobs_per_s": round(n / wall, 1), "errors": row["errors"] + (0 if done else 1),
            "service_cpu_ms_per_job": round(service / n * 1000, 1),
            "hub_cpu_ms_per_job": round(hub_cpu / n * 1000, 2)}


def format_turnover(r: dict) -> str:
    if "jobs_per_s" not in r:
        return f"{r['name']:<44} {r.get('error', 'failed')}"
    return (f"{r['name']:<44} all ended {r['all_ended_s']:.1f} s after the first submit "
            f"({r['jobs_per_s']:.0f} jobs/s; submitted in {r['submitted_s']:.1f} s); CPU per job: "
            f"service and its jobs {r['service_cpu_ms_per_job']:.0f} ms, hub "
            f"{r['hub_cpu_ms_per_job']:.1f} ms")
