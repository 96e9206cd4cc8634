"""``gpuhub bench sweeps``: what a big sweep costs the service.

An engine on a scratch SQLite database (or ``--sweeps-db-url``) with one
host of 8 GPUs and a backend that starts nothing, so only the service's own
work is timed: 200 queued jobs of the team first (the baseline cycle), then
a sweep of N tasks submitted, released into the queue and planned with, and
a capped sweep of N whose next task is released when a slot frees. The
cycle rows are planned as the engine plans them (with reasons), not applied.
"""
from __future__ import annotations

import tempfile
import time
from typing import Optional

from ..backends.base import Backend, Started
from ..scheduler.model import Node
from ..scheduler.policy import get_policy
from gpuspawner.service.sweeps import sweeps
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.vocab.specs import parse_job
from gpuspawner.vocab.sweeps import parse_sweep
from ..store import Store

WHO = Identity("bench", teams=frozenset({"bench"}), can_submit=True)


class _StartsNothing(Backend):
    """Accepts every start and never reports an end: nothing runs."""

    def start(self, spec):
        return Started(spec.workload_id, spec.attempt, "nothing")

    def stop(self, workload_id, attempt, grace):
        pass

    def kill(self, workload_id, attempt):
        pass

    def poll(self):
        return []

    def recover(self, specs):
        return []


def _sweep(n: int, max_running: Optional[int] = None):
    return parse_sweep({"template": {"command": ["true", "{x}"], "pool": "default", "gpus": 1},
                        "tasks": [{"x": i} for i in range(n)], "max_running": max_running,
                        "name": "bench"})


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def run_bench(tasks: int = 2000, db_url: Optional[str] = None) -> list[dict]:
    with tempfile.TemporaryDirectory() as data_dir:
        engine = Engine(Store(db_url or f"sqlite:///{data_dir}/bench.sqlite"), _StartsNothing(),
                        [LocalNode(Node("host", "default", 8), list(range(8)))],
                        get_policy("gpuhub"), EngineConfig(data_dir=data_dir))
        engine.start()
        try:
            for _ in range(200):
                engine.submit(WHO, parse_job({"command": ["true"], "pool": "default"}))
            engine.tick()

            def plan():
                engine.scheduler.cycle(engine.clock(), explain=True)
            baseline = _ms(plan)
            rows = [{"name": "cycle, 200 jobs queued (baseline)", "ms": baseline}]
            rows.append({"name": f"submit a {tasks}-task sweep",
                         "ms": _ms(lambda: sweeps.submit(engine.facades, WHO, _sweep(tasks)))})
            rows.append({"name": f"release all {tasks} tasks into the queue",
                         "ms": _ms(lambda: engine._release_waiting(engine.clock()))})
            engine.tick()
            rows.append({"name": f"cycle, 200 jobs + {tasks} sweep tasks queued", "ms": _ms(plan)})
            capped = sweeps.submit(engine.facades, WHO, _sweep(tasks, max_running=4))
            engine.tick()
            first = sweeps.get(engine.facades, WHO, capped.id)["tasks"][0]["workload_id"]
            engine.cancel(WHO, first)  # its slot goes to the next task
            rows.append({"name": f"release the next task of a capped {tasks}-task sweep",
                         "ms": _ms(lambda: engine._release_waiting(engine.clock()))})
        finally:
            engine.starter.close()
    for row in rows:
        row["ms"] = round(row["ms"], 1)
        row["x_baseline_cycle"] = round(row["ms"] / baseline, 1) if baseline else None
    return rows


def format_rows(rows: list[dict]) -> str:
    width = max(len(r["name"]) for r in rows)
    lines = [f"{'':{width}}  {'ms':>9}  {'× baseline cycle':>16}"]
    lines += [f"{r['name']:{width}}  {r['ms']:9.1f}  {r['x_baseline_cycle']:16.1f}" for r in rows]
    return "\n".join(lines)
