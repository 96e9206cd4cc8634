"""What the scheduling loop is told at start (``Engine``'s configuration;
the service fills it from its traitlets, tests with what they try)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from gpuspawner.isolation.share_memory import MemoryWatch
from gpuspawner.scheduler.forecast import ROLLOUT_PENDING
from gpuspawner.scheduler.model import Quota


@dataclass
class EngineConfig:
    data_dir: str
    team_prefix: str = "team-"
    default_quota: Quota = Quota(0, None, None)
    workspace_root: str = "{data_dir}/workspaces/{username}"
    default_grace_period: float = 30.0
    # team or "*" -> pool or "*" -> most GPUs one notebook server may hold.
    notebook_gpu_limits: dict = field(default_factory=dict)
    # A job lost this many times (its process vanished) fails instead.
    max_lost_attempts: int = 3
    # A serving replica that ended this many times is not restarted again.
    max_replica_restarts: int = 5
    # Makes a user's workspace theirs (their system account's, created on
    # first use) instead of a plain directory; None: a plain directory.
    prepare_workspace: Optional[Callable[[str], object]] = None
    # Issues and revokes each attempt's own token (JobTokens); None: jobs get none.
    job_tokens: Optional[object] = None
    # The team of users in no other team, whose nominal quota is what the
    # other teams do not own ("": none).
    default_team: str = ""
    # Threads that start attempts off the event loop (0: in the caller's thread).
    start_threads: int = 0
    # The most queued workloads whose start estimates run the policy forward
    # (scheduler/forecast/rollout.py; 0: the plan alone).
    estimate_rollout_pending: int = ROLLOUT_PENDING
    # pool -> slots each of its GPUs may be shared in (share_specs.parse_sharing).
    gpu_sharing: dict = field(default_factory=dict)
    # pool -> its GPUs' MPS pipe directory ({uuid}: each GPU's) (share_specs.parse_mps).
    mps_pipe_directories: dict = field(default_factory=dict)
    # How shares are held to their memory (share_watch.py), as their labels say.
    share_watch: MemoryWatch = MemoryWatch()
    share_watch_interval: float = 5.0
