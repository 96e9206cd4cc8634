"""``gpuhub bench api --start-hub`` extras: how long admission takes, and
the API with a long queue.

* spawn: a notebook server from ``POST /hub/api/users/{u}/server`` to ready,
  CPU-only and with 1 GPU (what the GPU path adds: the scheduler's admission
  and the spawner learning of it);
* job: a job from ``POST /workloads`` to ``running``, with 0 and 1 GPUs (the
  client long-polls, so it learns at once); with a long queue, a 0-GPU job
  (which starts at once whatever waits) many times, at random moments of
  the service's cycles (``queued_start_row``);
* queued: ``fill_queue`` parks N one-GPU jobs of many teams behind a job
  that holds every GPU, so every cycle walks N pending workloads; the API
  rows are then measured again, and the service's cycle time read from its
  Prometheus metrics.

The figures are wall-clock times on this machine; the CPU-only spawn and
the 0-GPU job are the baselines of the same run.
"""
from __future__ import annotations

import random
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import requests

from ..client import GpuHubClient, GpuHubError

HOLD = ["python", "-c", "import time; time.sleep(3600)"]


def _timed_rows(name: str, seconds: list[float]) -> dict:
    return {"name": name, "runs": len(seconds), "median_s": round(statistics.median(seconds), 3),
            "min_s": round(min(seconds), 3), "max_s": round(max(seconds), 3)}


def _ok(r: requests.Response) -> requests.Response:
    if r.status_code >= 400:
        raise GpuHubError(f"{r.request.method} {r.url}: {r.status_code} {r.text[:300]}")
    return r


def spawn_seconds(hub_url: str, user: str, token: str, pool: str, gpus: int,
                  timeout: float = 120) -> float:
    """A notebook server with ``gpus`` of ``pool`` from the REST API until it
    is ready; then it is stopped again."""
    headers = {"Authorization": f"token {token}"}
    t0 = time.perf_counter()
    _ok(requests.post(f"{hub_url}/hub/api/users/{user}/server", json={"pool": pool, "gpus": gpus},
                      headers=headers, timeout=30))
    deadline = time.monotonic() + timeout
    while True:
        model = requests.get(f"{hub_url}/hub/api/users/{user}", headers=headers, timeout=30).json()
        if (model.get("servers") or {}).get("", {}).get("ready"):
            took = time.perf_counter() - t0
            break
        if time.monotonic() > deadline:
            raise GpuHubError(f"{user}'s server was not ready after {timeout} s")
        time.sleep(0.05)
    requests.delete(f"{hub_url}/hub/api/users/{user}/server", headers=headers, timeout=30)
    while (requests.get(f"{hub_url}/hub/api/users/{user}", headers=headers, timeout=30)
           .json().get("servers") or {}):
        time.sleep(0.2)
    return took


def job_seconds(api: str, token: str, gpus: int, team: Optional[str]) -> float:
    """A job from submit until the service says it runs (long poll), then cancelled."""
    body = {"command": HOLD, "gpus_per_node": gpus, "name": "gpuhub-bench-start", "time_limit": 600,
            **({"team": team} if team else {})}
    with GpuHubClient(api, token) as client:
        t0 = time.perf_counter()
        wid = client.submit_workload(body)["id"]
        while True:
            w = client.get_workload(wid, wait_while="queued", timeout=5)
            if w["state"] != "queued":
                took = time.perf_counter() - t0
                break
        client.cancel_workload(wid)
    if w["state"] != "running":
        raise GpuHubError(f"the benchmark's job {wid} is {w['state']}: {w.get('reason')}")
    return took


def admission_rows(hub_url: str, user: str, token: str, team: Optional[str], pool: str,
                   runs: int = 3) -> list[dict]:
    api = hub_url + "/services/gpuhub/api/v1"
    rows = []
    for name, measure in (
            ("spawn, CPU only (baseline)", lambda: spawn_seconds(hub_url, user, token, pool, 0)),
            ("spawn, 1 GPU", lambda: spawn_seconds(hub_url, user, token, pool, 1)),
            ("job submit to running, 0 GPUs (baseline)", lambda: job_seconds(api, token, 0, team)),
            ("job submit to running, 1 GPU", lambda: job_seconds(api, token, 1, team))):
        rows.append(_timed_rows(name, [measure() for _ in range(runs)]))
    for base, row in ((rows[0], rows[1]), (rows[2], rows[3])):
        row["added_ms"] = round((row["median_s"] - base["median_s"]) * 1000)
    return rows


def queued_start_row(api: str, token: str, team: Optional[str], queued: int,
                     runs: int = 20, seed: int = 0) -> dict:
    """A 0-GPU job's submit to running behind ``queued`` waiting jobs, ``runs``
    times, up to 2 s apart at random: a job that may start at once waits for
    the cycle under way, and with a long queue some cycles also remake every
    waiting reason and start estimate (the slowest run says how long)."""
    spacing = random.Random(seed)
    seconds = []
    for _ in range(runs):
        time.sleep(spacing.uniform(0, 2))
        seconds.append(job_seconds(api, token, 0, team))
    return dict(_timed_rows(f"job submit to running, 0 GPUs, {queued} queued", seconds),
                queued=queued)


def fill_page(api: str, token: str, job: dict, n: int = 60, timeout: float = 120) -> None:
    """``n`` finished jobs of the token's user (``job``: a 0-GPU ``true``),
    so that every list row returns a full page (50), idle as behind a long
    queue: a page of 5 against one of 50 measured the page, not the queue."""
    with GpuHubClient(api, token) as client:
        for i in range(n):
            client.submit_workload(dict(job, name=f"gpuhub-bench-page-{i}"))
        deadline = time.monotonic() + timeout
        while client.list_workloads(state=["queued", "running", "stopping"], limit=1)["workloads"]:
            if time.monotonic() > deadline:
                raise GpuHubError(f"the bench's {n} page-filling jobs did not end in {timeout} s")
            time.sleep(0.5)


def fill_queue(api: str, holder_token: str, holder_team: str, team_tokens: dict[str, str],
               n: int, progress: Optional[Callable[[str], None]] = None,
               concurrency: int = 32) -> str:
    """A job of ``holder_team`` holding every free GPU, then ``n`` one-GPU
    jobs spread over the teams of ``team_tokens`` (team -> a member's
    token), which all wait behind it, submitted by ``concurrency`` threads at
    once. Returns the holder's id."""
    with GpuHubClient(api, holder_token) as client:
        free = sum(p["free"] for p in client.list_pools()["pools"])
        holder = client.submit_workload({
            "command": HOLD, "gpus_per_node": free, "team": holder_team,
            "name": "gpuhub-bench-holder", "time_limit": 3 * 3600})["id"]
    teams = sorted(team_tokens)
    clients = {t: GpuHubClient(api, team_tokens[t], timeout=60) for t in teams}

    def submit(i: int) -> None:
        team = teams[i % len(teams)]
        clients[team].submit_workload({
            "command": ["true"], "gpus_per_node": 1, "team": team, "name": f"queued-{i}",
            "time_limit": 600 + i % 7 * 300})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for i, _ in enumerate(pool.map(submit, range(n))):
            if progress and (i + 1) % 1000 == 0:
                progress(f"  queued {i + 1} of {n} ({(i + 1) / (time.perf_counter() - t0):.0f}/s)")
    for c in clients.values():
        c.close()
    return holder


_CYCLE = re.compile(r'^gpuhub_cycle_seconds_(sum|count) ([0-9.e+-]+)$', re.M)


def cycle_seconds(hub_url: str, token: str) -> tuple[float, int]:
    """The service's total cycle time and cycle count so far (its metrics)."""
    text = requests.get(f"{hub_url}/services/gpuhub/metrics",
                        headers={"Authorization": f"token {token}"}, timeout=30).text
    found = dict(_CYCLE.findall(text))
    return float(found.get("sum", 0)), int(float(found.get("count", 0)))


def mean_cycle_ms(hub_url: str, token: str, seconds: float = 10.0) -> float:
    """Mean cycle time over the next ``seconds`` (idle: periodic cycles only)."""
    s0, n0 = cycle_seconds(hub_url, token)
    time.sleep(seconds)
    s1, n1 = cycle_seconds(hub_url, token)
    return round((s1 - s0) / (n1 - n0) * 1000, 1) if n1 > n0 else 0.0
