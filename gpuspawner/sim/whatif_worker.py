"""A what-if preview in a process of its own, so that a replay of minutes
never holds the service's event loop (nor its interpreter lock).

``python -m gpuspawner.sim.whatif_worker`` reads one JSON request on stdin
(``request`` below makes it) and writes JSON lines on stdout: ``{"progress":
0.42}`` now and then, then ``{"result": {...}}`` (``whatif.preview``) or
``{"error": "..."}``. It runs at a lower CPU priority than the service. The
service cancels it by killing it; if the service dies first, the next
progress line finds no reader and the worker ends.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Mapping

from ..scheduler.policy import Policy
from .cluster import ClusterError, cluster_document, parse_cluster
from .history import History, Outcome, StartLag
from .simulate import SimulationError
from .trace import TraceJob
from .whatif import ChangeError, policy_document, policy_from_document, preview

# At most this many progress lines a second: enough for a progress bar.
PROGRESS_PER_S = 10


def request(history: History, cluster, policy: Policy, changes: Mapping[str, Any], *,
            default_team: str = "", buckets: int = 24, restart_cost_s: float = 60.0) -> bytes:
    """The worker's input: the history (trace and outcomes), the cluster file
    and the policy as they are now, and the changes to preview."""
    return json.dumps({
        "jobs": [vars(j) for j in history.jobs],
        "outcomes": [{**vars(o), "held": [list(h) for h in o.held]}
                     for o in history.outcomes.values()],
        "horizon_s": history.horizon_s, "cluster": cluster_document(cluster),
        "policy": policy_document(policy), "changes": dict(changes),
        "default_team": default_team, "buckets": buckets, "restart_cost_s": restart_cost_s,
        "lag": vars(history.lag), "run_jitter_s": history.run_jitter_s,
    }).encode()


def run(doc: Mapping[str, Any], emit) -> None:
    last = [0.0]

    def progress(done: float) -> None:
        now = time.monotonic()
        if now - last[0] >= 1 / PROGRESS_PER_S or done >= 1.0:
            last[0] = now
            emit({"progress": round(done, 4)})

    jobs = [TraceJob(**j) for j in doc["jobs"]]
    outcomes = {o["job_id"]: Outcome(**{**o, "held": tuple(tuple(h) for h in o["held"])})
                for o in doc["outcomes"]}
    result = preview(jobs, outcomes, doc["horizon_s"], parse_cluster(doc["cluster"]),
                     policy_from_document(doc["policy"]), doc["changes"],
                     default_team=doc.get("default_team", ""), buckets=doc.get("buckets", 24),
                     restart_cost_s=doc.get("restart_cost_s", 60.0),
                     lag=StartLag(**doc.get("lag", {})),
                     run_jitter_s=doc.get("run_jitter_s", 0.0), progress=progress)
    emit({"result": result})


def main() -> int:
    try:
        os.nice(10)  # the service answers first
    except OSError:
        pass

    def emit(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    try:
        run(json.loads(sys.stdin.buffer.read()), emit)
    except BrokenPipeError:
        return 1  # nobody listens any more (cancelled, or the service is gone)
    except (ChangeError, ClusterError, SimulationError, ValueError, KeyError, TypeError) as e:
        emit({"error": f"{type(e).__name__}: {e}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
