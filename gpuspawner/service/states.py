"""A workload's states, as the database and the API name them.

queued -> running -> succeeded | failed, with stopping in between when it
is stopped (preempted, cancelled, at the end of a grace period); held is
queued but not considered until released; cancelled ends a queued one;
stopped ends a notebook server or a deployment replica that was shut down.
"""
from __future__ import annotations

QUEUED = "queued"
HELD = "held"  # queued, but not considered until released
RUNNING = "running"
STOPPING = "stopping"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STOPPED = "stopped"  # a notebook server or deployment replica that was shut down
ACTIVE_STATES = (QUEUED, HELD, RUNNING, STOPPING)
HOLDING_STATES = (RUNNING, STOPPING)  # it holds GPUs
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, STOPPED)
STATES = ACTIVE_STATES + FINAL_STATES
