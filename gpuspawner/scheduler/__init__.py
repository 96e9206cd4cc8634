"""The policy core: pure, deterministic, no I/O, on a clock the caller gives.

The service and the simulator run this same code. Entry point: ``Scheduler``.
"""
from .core import Scheduler, SchedulerError
from .cycle import CycleResult
from .events import Event
from .model import (DEFAULT_PRIORITY_CLASSES, DEPLOYMENT, JOB, NOTEBOOK, Node, PriorityClass,
                    Quota, Running, RunState, Team, Workload)
from .policy import POLICIES, Policy, get_policy

__all__ = [
    "Scheduler", "SchedulerError", "CycleResult", "Event", "Node", "PriorityClass", "Quota",
    "Running", "RunState", "Team", "Workload", "Policy", "POLICIES", "get_policy",
    "DEFAULT_PRIORITY_CLASSES", "JOB", "NOTEBOOK", "DEPLOYMENT",
]
