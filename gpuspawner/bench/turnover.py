"""Job turnover on a temporary hub: how long N tiny jobs (``true``, 0 GPUs)
take from their submits to their ends, and the CPU the service (with the
processes it starts for them) and the hub spend per job.

The submit row of ``bench api`` says how the API fares while its jobs start
beside it; it cannot say what a start costs: when starts fall behind the
submits (they waited on the hub, say), the row gets faster and the jobs
finish later. This measures the whole of it. CPU is read from
``/proc/PID/stat`` (user + system, with reaped children) of the hub, and of
the service with every process under it (its runner server, which forks the
runners and reaps them), so it is on this machine only.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from ..client import GpuHubClient


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # from field 3 on


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU of ``pid`` and (unless not ``children``) its reaped
    children, in seconds."""
    return sum(int(x) for x in _stat(pid)[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` and of every process under it, live or reaped (a
    reaped one is in its parent's children's time; none is counted twice)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue  # it ended meanwhile
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        tree += frontier
    total = 0.0
    for p in tree:
        try:
            total += cpu_seconds(p)
        except OSError:
            pass  # ended meanwhile: in its parent's time from now on
    return total


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
    service_pid, hub_pid = hub.service_pid(), hub.proc.pid
    cpu0 = (tree_cpu_seconds(service_pid), cpu_seconds(hub_pid))
    own0 = cpu_seconds(service_pid, children=False)
    t0 = time.perf_counter()
    row = submit(n)
    submitted = time.perf_counter() - t0
    done = drained(api, token, project, timeout)
    wall = time.perf_counter() - t0
    service = tree_cpu_seconds(service_pid) - cpu0[0]
    hub_cpu = cpu_seconds(hub_pid) - cpu0[1]
    own = cpu_seconds(service_pid, children=False) - own0
    return {"name": name, "jobs": n, "submitted_s": round(submitted, 2), "all_ended_s": round(wall, 2),
            "jobs_per_s": round(n / wall, 1), "errors": row["errors"] + (0 if done else 1),
            "service_cpu_ms_per_job": round(service / n * 1000, 1),
            "service_own_cpu_ms_per_job": round(own / n * 1000, 1),
            "hub_cpu_ms_per_job": round(hub_cpu / n * 1000, 2)}


def format_turnover(r: dict) -> str:
    if "jobs_per_s" not in r:
        return f"{r['name']:<44} {r.get('error', 'failed')}"
    return (f"{r['name']:<44} all ended {r['all_ended_s']:.1f} s after the first submit "
            f"({r['jobs_per_s']:.0f} jobs/s; submitted in {r['submitted_s']:.1f} s); CPU per job: "
            f"service and its jobs {r['service_cpu_ms_per_job']:.0f} ms (its own "
            f"{r['service_own_cpu_ms_per_job']:.0f} ms), hub "
            f"{r['hub_cpu_ms_per_job']:.1f} ms")
