"""Scheduling-cycle benchmark: how long one cycle takes with a long queue.

The cluster is 1,000 nodes × 8 GPUs with 50 teams (equal nominal quotas,
unlimited borrowing). It is first filled with running work drawn from the
Philly size mix, then ``pending`` more workloads wait. Each measured cycle
follows one round of churn: about 1% of the running work exits and as many
new workloads arrive, so the queue stays ``pending`` long and every cycle
has GPUs to hand out. Cycle time is ``plan_cycle`` + ``apply``; admissions
per second are admissions divided by the time spent in those cycles.

The same run is repeated with the ``fifo`` policy as the baseline, in the
same process, and the ratio reported.
"""
from __future__ import annotations

import random
import time
from typing import Optional

from ..scheduler import Node, Quota, Scheduler, Team, Workload
from ..scheduler import events as ev
from ..scheduler.forecast import forecast
from ..scheduler.policy import Policy, get_policy
from .metrics import percentile
from .trace import GPU_SIZE_SHARES

NODES, GPUS_PER_NODE, TEAMS = 1000, 8, 50
# Workloads the service books in its start forecast after every cycle.
FORECAST_LIMIT = 2000


def build(policy: Policy, nodes: int = NODES, teams: int = TEAMS) -> Scheduler:
    gpus = nodes * GPUS_PER_NODE
    node_list = [Node(f"n{i:04d}", "a100", GPUS_PER_NODE, {"rack": f"r{i // 32}"})
                 for i in range(nodes)]
    team_list = [Team(f"team{t:02d}", {"a100": Quota(nominal=gpus // teams)})
                 for t in range(teams)]
    return Scheduler(node_list, team_list, policy)


def _workload(rng: random.Random, i: int, now: float, teams: int) -> Workload:
    gpus = rng.choices(list(GPU_SIZE_SHARES), list(GPU_SIZE_SHARES.values()))[0]
    nodes = max(1, gpus // GPUS_PER_NODE)
    return Workload(
        id=f"w{i}", team=f"team{rng.randrange(teams):02d}", pool="a100",
        gpus_per_node=gpus // nodes, num_nodes=nodes, submit_time=now,
        priority=rng.choice(("batch", "batch", "batch", "best-effort")),
        time_limit=rng.choice((1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0)),
        topology="preferred" if nodes > 1 else "none")


def run_one(policy: Policy, pending: int, cycles: int = 30, seed: int = 0,
            explain: bool = False, nodes: int = NODES, teams: int = TEAMS) -> dict:
    rng = random.Random(seed)
    sched = build(policy, nodes, teams)
    now = 0.0
    counter = 0
    capacity = nodes * GPUS_PER_NODE
    # Fill the cluster (not measured), then queue `pending` more.
    while sum(r.workload.gpus for r in sched.state.running.values()) < capacity * 0.97:
        for _ in range(500):
            sched.submit(_workload(rng, counter, now, teams), now)
            counter += 1
        sched.step(now, explain=False)
        if len(sched.state.pending) > pending:
            break
    while len(sched.state.pending) < pending:
        sched.submit(_workload(rng, counter, now, teams), now)
        counter += 1
    times, forecasts, admitted = [], [], 0
    for _ in range(cycles):
        now += 60.0
        running = sorted(sched.state.running)
        leaving = rng.sample(running, max(1, len(running) // 100))
        for wid in leaving:
            sched.finished(wid, now, requeue=False)
        while len(sched.state.pending) < pending:
            sched.submit(_workload(rng, counter, now, teams), now)
            counter += 1
        start = time.perf_counter()
        result = sched.cycle(now, explain=explain)
        sched.apply_result(result, now)
        times.append(time.perf_counter() - start)
        admitted += sum(1 for e in result.events if e.type == ev.ADMITTED)
        if explain:  # what the service also does after a cycle: the start estimates
            start = time.perf_counter()
            forecast(sched.state, policy, now, limit=FORECAST_LIMIT)
            forecasts.append(time.perf_counter() - start)
        # Preempted work leaves at once so the next round starts clean.
        for e in result.events:
            if e.type == ev.PREEMPTED:
                sched.finished(e.workload_id, now)
    total = sum(times)
    return {
        "policy": policy.name, "pending": pending, "gpus": capacity, "teams": teams,
        "explain": explain, "cycles": cycles,
        "cycle_p50_ms": percentile(times, 50) * 1000,
        "cycle_p99_ms": percentile(times, 99) * 1000,
        "admissions": admitted,
        "admissions_per_s": admitted / total if total else 0.0,
        "forecast_p50_ms": percentile(forecasts, 50) * 1000 if forecasts else None,
    }


def run_bench(sizes=(1000, 10000, 100000), cycles: int = 30, seed: int = 0,
              progress: Optional[callable] = None) -> list[dict]:
    """gpuhub (decisions only, and with waiting reasons) against fifo."""
    rows = []
    for pending in sizes:
        n = cycles if pending < 100000 else max(5, cycles // 3)
        base = run_one(get_policy("fifo"), pending, n, seed)
        for explain in (False, True):
            row = run_one(get_policy("gpuhub"), pending, n, seed, explain=explain)
            row["fifo_cycle_p50_ms"] = base["cycle_p50_ms"]
            row["fifo_admissions_per_s"] = base["admissions_per_s"]
            row["p50_ratio_vs_fifo"] = row["cycle_p50_ms"] / max(base["cycle_p50_ms"], 1e-9)
            rows.append(row)
            if progress:
                progress(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    header = (f"{'pending':>8} {'reasons':>7} {'p50 ms':>8} {'p99 ms':>8} {'admit/s':>9} "
              f"{'fifo p50':>9} {'fifo adm/s':>10} {'p50 ×fifo':>9} {'forecast p50':>12}")
    lines = [header]
    for r in rows:
        lines.append(f"{r['pending']:>8} {'yes' if r['explain'] else 'no':>7} "
                     f"{r['cycle_p50_ms']:>8.1f} {r['cycle_p99_ms']:>8.1f} "
                     f"{r['admissions_per_s']:>9.0f} {r['fifo_cycle_p50_ms']:>9.1f} "
                     f"{r['fifo_admissions_per_s']:>10.0f} {r['p50_ratio_vs_fifo']:>9.1f} "
                     + (f"{r['forecast_p50_ms']:>9.1f} ms" if r.get("forecast_p50_ms") else
                        f"{'-':>12}"))
    return "\n".join(lines)
