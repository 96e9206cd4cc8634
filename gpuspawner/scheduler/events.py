"""What the core decides, as explicit events.

Every state change the scheduler causes is one ``Event``; the service
persists them before acting, the simulator replays them, the API shows them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .model import Placement

QUEUED = "queued"
REJECTED = "rejected"
ADMITTED = "admitted"
NOMINATED = "nominated"    # GPUs set aside for a preemptor while victims exit
NOMINATION_DROPPED = "nomination-dropped"  # those GPUs became unhealthy: waits again
PREEMPTED = "preempted"    # victim told to stop, with a grace period
EVICTED = "evicted"        # lost its hardware (node/GPU unhealthy): requeued at once
REQUEUED = "requeued"      # back in the queue as the same workload, attempt + 1
FINISHED = "finished"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class Event:
    type: str
    workload_id: str
    time: float
    message: str = ""
    placement: Optional[Placement] = None
    # PREEMPTED: who the victim makes room for, and when it will be killed.
    preemptor_id: Optional[str] = None
    kill_at: Optional[float] = None
    attempt: Optional[int] = None
    # ADMITTED: GPUs above the team's nominal quota (preemptible by reclaim).
    borrowed: int = 0
