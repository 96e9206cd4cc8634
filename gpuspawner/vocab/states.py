"""A workload's states, as the database and the API name them.

queued -> running -> succeeded | failed, with stopping in between when it
is stopped (preempted, cancelled, at the end of a grace period); held is
queued but not considered until released; cancelled ends a queued one;
stopped ends a notebook server or a deployment replica that was shut down.
waiting comes before queued: a job that waits for its dependencies (or for
a slot of its sweep's cap) is not in the scheduler core at all, so it holds
no reservation and no quota (dependencies.py releases it).
"""
from __future__ import annotations

WAITING = "waiting"  # for its dependencies or its sweep's cap; not in the core
QUEUED = "queued"
HELD = "held"  # queued, but not considered until released
RUNNING = "running"
STOPPING = "stopping"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STOPPED = "stopped"  # a notebook server or deployment replica that was shut down
ACTIVE_STATES = (WAITING, QUEUED, HELD, RUNNING, STOPPING)
# Admitted or asking to be: what counts against a sweep's max_running.
STARTED_STATES = (QUEUED, HELD, RUNNING, STOPPING)
HOLDING_STATES = (RUNNING, STOPPING)  # it holds GPUs
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, STOPPED)
STATES = ACTIVE_STATES + FINAL_STATES
