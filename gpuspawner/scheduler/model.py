"""Plain data the scheduler core works on.

Nothing here knows about HTTP, SQL or processes: the service builds these
objects from its database, the simulator from a trace, and tests by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Mapping, Optional

# Workload kinds (DESIGN.md: one scheduler, three kinds of workload).
JOB = "job"
NOTEBOOK = "notebook"
DEPLOYMENT = "deployment"
KINDS = (JOB, NOTEBOOK, DEPLOYMENT)

# Topology modes for gangs.
TOPOLOGY_NONE = "none"
TOPOLOGY_PREFERRED = "preferred"
TOPOLOGY_REQUIRED = "required"
TOPOLOGY_MODES = (TOPOLOGY_NONE, TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED)


@dataclass(frozen=True)
class PriorityClass:
    """A named priority. Higher ``value`` is scheduled first.

    ``preemptible`` says whether a workload of this class may be evicted by a
    higher priority workload of the same team (reclaim of borrowed quota is
    decided separately, by kind and quota).
    """

    name: str
    value: int
    preemptible: bool = True


DEFAULT_PRIORITY_CLASSES: dict[str, PriorityClass] = {
    pc.name: pc
    for pc in (
        PriorityClass("production", 1000, preemptible=False),
        PriorityClass("interactive", 800, preemptible=False),
        PriorityClass("batch", 500),
        PriorityClass("best-effort", 100),
    )
}

DEFAULT_PRIORITY_FOR_KIND = {
    NOTEBOOK: "interactive",
    JOB: "batch",
    DEPLOYMENT: "production",
}


@dataclass(frozen=True)
class Node:
    """A machine with ``gpus`` interchangeable GPUs belonging to one pool.

    ``topology`` maps a topology level to this node's domain at that level,
    e.g. ``{"rack": "r3", "nvlink": "island-1"}``. ``labels`` are the node
    labels placement constraints match against (``{"region": "eu"}``).
    ``share_units`` (0: never shared) splits each of its GPUs into that many
    equal slots for fractional workloads (``Workload.gpu_share``); a pool
    setting, the same on every node of a shareable pool. ``cpus`` and
    ``memory`` (bytes) are what its workloads' CPU and memory requests are
    admitted against (0: not counted, as in traces without them).
    ``whole_cpus``: its backend allocates whole cores (Slurm's cons_tres
    gives ``--cpus-per-task`` in whole CPUs), so a request in its pool counts
    rounded up to whole cores (``node_load.counted_request``).
    """

    name: str
    pool: str
    gpus: int
    topology: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    healthy: bool = True
    unhealthy_gpus: frozenset[int] = frozenset()
    drained: bool = False
    share_units: int = 0
    cpus: float = 0.0
    memory: int = 0
    whole_cpus: bool = False

    def __post_init__(self):
        if self.cpus < 0 or self.memory < 0:
            raise ValueError(f"node {self.name}: cpus and memory must be >= 0")
        if self.share_units < 0 or self.share_units == 1:
            raise ValueError(f"share_units must be 0 (not shared) or >= 2, got {self.share_units}")

    def usable_gpus(self) -> tuple[int, ...]:
        if not self.healthy:
            return ()
        return tuple(i for i in range(self.gpus) if i not in self.unhealthy_gpus)

    def placeable_gpus(self) -> tuple[int, ...]:
        """GPUs new work may be placed on."""
        return () if self.drained else self.usable_gpus()

    def matches(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class Quota:
    """A team's quota in one pool, with Kueue's meaning.

    ``nominal`` GPUs are guaranteed. The team may use up to
    ``nominal + borrowing_limit`` while other teams' quota is idle
    (``None``: no limit). At most ``lending_limit`` of its idle nominal
    quota may be used by others (``None``: all of it).

    ``cpus`` and ``memory`` (bytes) are the most CPUs and memory the team's
    running work in the pool may ask for together (``None``: no limit), as
    Kueue's nominalQuota for cpu and memory with no borrowing: a ceiling.
    """

    nominal: int = 0
    borrowing_limit: Optional[int] = None
    lending_limit: Optional[int] = None
    cpus: Optional[float] = None
    memory: Optional[int] = None

    def __post_init__(self):
        for name in ("nominal", "borrowing_limit", "lending_limit", "cpus", "memory"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"quota {name} must be >= 0, got {value}")

    @property
    def ceiling(self) -> float:
        """Most GPUs the team may hold in the pool."""
        if self.borrowing_limit is None:
            return float("inf")
        return self.nominal + self.borrowing_limit


NO_QUOTA = Quota()


@dataclass(frozen=True)
class Team:
    """A team (a JupyterHub group) with per-pool quotas and a fair-share weight.

    ``allowed_pools`` (None: all) and ``node_selector`` restrict where any of
    the team's work may run (data residency, regulated data).
    """

    name: str
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    weight: float = 1.0
    allowed_pools: Optional[frozenset[str]] = None
    node_selector: Mapping[str, str] = field(default_factory=dict)

    def quota(self, pool: str) -> Quota:
        return self.quotas.get(pool, NO_QUOTA)


# The ``preempted_by`` of a workload nothing evicted, shared: a frozenset is
# always tracked by the garbage collector, and one per queued workload made
# each full collection walk another 100,000 objects with a long queue.
NOT_PREEMPTED: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Workload:
    """One request for GPUs: a notebook server, a batch job or a deployment.

    A gang asks for ``gpus_per_node`` GPUs on each of ``num_nodes`` nodes and
    is placed whole or not at all. ``time_limit`` (seconds, None: unbounded)
    lets backfill know when it will end at the latest. ``submit_time`` is
    when it became eligible to run (its submit, or for one that waited for
    a dependency its release, as Slurm's EligibleTime): queue order and
    aging count from it. ``gpu_share`` (0 < s < 1) asks for that share of
    ONE GPU, memory and compute alike (one GPU, one node); 0: whole GPUs.
    ``cpus`` and ``memory`` (bytes) are asked for on each of its nodes, as
    Kueue counts cpu and memory beside nvidia.com/gpu (0: nothing asked).
    ``dataset_nodes``: for each dataset it reads whose residency names node
    labels, those labels (``{"imagenet": {"region": "eu"}}``): every node it
    runs on carries them, whatever its team's and its own selectors add.
    """

    id: str
    team: str
    pool: str
    gpus_per_node: int
    submit_time: float
    user: str = ""
    kind: str = JOB
    num_nodes: int = 1
    priority: str = ""
    time_limit: Optional[float] = None
    topology: str = TOPOLOGY_NONE
    topology_key: str = "rack"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 0
    preempted_by: frozenset[str] = NOT_PREEMPTED
    grace_period: Optional[float] = None
    # Its index in a sweep (array job), None if it is not a task of one: a
    # team's queue orders a sweep's later tasks later (Policy.sweep_task_spacing).
    sweep_index: Optional[int] = None
    gpu_share: float = 0.0
    cpus: float = 0.0
    memory: int = 0
    dataset_nodes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self):
        if self.cpus < 0 or self.memory < 0:
            raise ValueError(f"cpus and memory must be >= 0, got {self.cpus}, {self.memory}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {self.gpus_per_node}")
        if self.num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {self.num_nodes}")
        if self.topology not in TOPOLOGY_MODES:
            raise ValueError(f"topology must be one of {TOPOLOGY_MODES}, got {self.topology!r}")
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError(f"time_limit must be > 0, got {self.time_limit}")
        if not 0.0 <= self.gpu_share < 1.0:
            raise ValueError(f"gpu_share must be 0 (whole GPUs) or between 0 and 1, "
                             f"got {self.gpu_share}")
        if self.gpu_share and (self.gpus_per_node != 1 or self.num_nodes != 1):
            raise ValueError(f"a GPU share is a share of one GPU: it needs gpus_per_node=1 and "
                             f"num_nodes=1, got {self.num_nodes} × {self.gpus_per_node}")
        if not self.priority:
            object.__setattr__(self, "priority", DEFAULT_PRIORITY_FOR_KIND[self.kind])

    # Not cached_property: caching them in the instances of 100,000 queued
    # workloads took 138 MB more (1.4 kB each: their dicts grow), for at most
    # 3% of a long replay's time.
    @property
    def gpus(self) -> int:
        """Physical GPUs it touches (1 for a share)."""
        return self.gpus_per_node * self.num_nodes

    @property
    def gpu_units(self) -> float:
        """What it counts against quota, fair share and usage: its share of
        one GPU, or its GPUs."""
        return self.gpu_share if self.gpu_share else self.gpus


def combined_selector(team: Optional[Team], w: "Workload", datasets: bool = True
                      ) -> dict[str, str]:
    """Node labels the workload must run on: its own, its datasets' and its
    team's (all of them: a workload cannot override where its data or its
    team may be; ``selector_conflict`` rejects rules that contradict).
    ``datasets=False``: without its datasets' (where it could run but for them)."""
    if not (datasets and w.dataset_nodes) and (team is None or not team.node_selector):
        return dict(w.node_selector)
    out = dict(w.node_selector)
    for labels in w.dataset_nodes.values() if datasets else ():
        out.update(labels)
    if team is not None:
        out.update(team.node_selector)
    return out


def without_datasets(w: "Workload") -> "Workload":
    """``w`` without its datasets' node rules: where it could run but for them."""
    return replace(w, dataset_nodes={})


def labels_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def dataset_rules_text(w: "Workload") -> str:
    """What its datasets' residency says, dataset by dataset ("" if nothing)."""
    return "; ".join(f"dataset {name} may only be read on nodes labelled {labels_text(labels)}"
                     for name, labels in sorted(w.dataset_nodes.items()) if labels)


def selector_conflict(team: Optional[Team], w: "Workload") -> Optional[str]:
    """Why the workload's own labels, its datasets' and its team's contradict
    each other (no node can satisfy them all), or None."""
    rules = [("asks for nodes labelled", w.node_selector, "")]
    rules += [(f"dataset {name} may only be read on nodes labelled", labels, f"dataset {name}")
              for name, labels in sorted(w.dataset_nodes.items())]
    if team is not None and team.node_selector:
        rules.append((f"team {team.name} is restricted to", team.node_selector,
                      f"team {team.name}"))
    for i, (words, labels, _) in enumerate(rules):
        for key, value in sorted(labels.items()):
            for later_words, later, who in rules[i + 1:]:
                if key in later and later[key] != value:
                    if who.startswith("team "):
                        return f"{words} {key}={value} but {later_words} {key}={later[key]}"
                    return (f"{words} {key}={value} but {who} may only be read on nodes "
                            f"labelled {key}={later[key]}: no node can serve both")
    return None


# A placement: for each node used, the GPU indices on it.
Placement = tuple[tuple[str, tuple[int, ...]], ...]


class RunState(str, Enum):
    RUNNING = "running"
    TERMINATING = "terminating"  # preempted, inside its grace period


@dataclass
class Running:
    """A workload that holds GPUs."""

    workload: Workload
    placement: Placement
    start_time: float
    state: RunState = RunState.RUNNING
    # Set when preempted: who it makes room for and when the grace period ends.
    preempted_for: Optional[str] = None
    kill_at: Optional[float] = None

    @property
    def end_estimate(self) -> float:
        """Latest time it will release its GPUs (inf when unbounded)."""
        if self.kill_at is not None:
            return self.kill_at
        if self.workload.time_limit is None:
            return float("inf")
        return self.start_time + self.workload.time_limit
