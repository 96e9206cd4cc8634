"""What a feature room is given instead of the whole Engine.

Every room of the service (schedules, sweeps, serving, sharing, what-if,
access, teams, datasets, workloads, the panel) gets these narrow faces of
the loop (and the few callables of its own that ``wiring.py`` builds), never
the Engine: what a room may reach is written here, and
``tests/test_architecture.py`` fails if a room names the engine.

- ``Records``: the database and the clock (every room reads and writes with them);
- ``ClusterView``: the live cluster as the core sees it, read-only;
- ``Submissions``: how work enters and leaves the queue (the engine's requests);
- ``Paths``: where users' and workloads' files are;
- ``Steering``: the admins' operations, which change teams and nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Optional

from gpuspawner.scheduler.policy import Policy
from gpuspawner.store import Store
from gpuspawner.vocab.shares import PoolSharing


@dataclass(frozen=True)
class Records:
    """The database, the clock (``utcnow`` of the rooms: tests inject one) and
    the data directory the service keeps per-workload files in."""
    store: Store
    clock: Callable[[], float]
    data_dir: str


class ClusterView:
    """The live cluster, read-only: the core's state (nodes, teams, pending
    and running work), the inventory's nodes, the policy, each pool's sharing.
    Rooms look; only the loop changes the core (``Submissions.change``)."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def state(self):
        """The core's state (``scheduler.state.ClusterState``): read it, never write it."""
        return self._engine.scheduler.state

    @property
    def nodes(self) -> Mapping:
        """node name -> ``LocalNode`` (its GPUs, pool and labels)."""
        return MappingProxyType(self._engine.nodes)

    @property
    def policy(self) -> Policy:
        return self._engine.policy

    def pool_sharing(self, pool: str) -> Optional[PoolSharing]:
        return self._engine.pool_sharing(pool)

    def validate(self, workload) -> Optional[str]:
        """Why the core could never run ``workload`` (None: it could)."""
        return self._engine.scheduler.validate(workload)

    @property
    def default_team(self) -> str:
        """The team of users in no other team ("": none)."""
        return self._engine.teams.default_team

    def notebook_gpu_limit(self, team: str, pool: str) -> Optional[int]:
        """Most GPUs one notebook server of ``team`` may hold in ``pool`` (None: no limit)."""
        return self._engine.teams.notebook_gpu_limit(team, pool)

    def storage_view(self, team: str) -> Optional[dict]:
        """The team space's size and quota (None: no team spaces)."""
        return self._engine.storage_view(team)

    def share_reading(self, wid: str) -> tuple[Optional[int], Optional[float]]:
        """GPU memory (MiB) and SM % a share's processes used at the share watch's last look."""
        return self._engine.share_memory.get(wid), self._engine.share_activity.get(wid)


class Submissions:
    """How a room puts work in the queue and takes it out: the engine's
    checked submission path (accept → make_row/new_row → queue_row), cancel,
    and the signals the loop needs after a room wrote rows itself."""

    def __init__(self, engine):
        self._engine = engine

    def accept(self, who, spec, on_behalf_of=None):
        return self._engine.submitting.accept(who, spec, on_behalf_of)

    def new_row(self, who, spec, on_behalf_of=None):
        return self._engine.submitting.new_row(who, spec, on_behalf_of)

    def make_row(self, wid, spec, team, user, now, after, reason=""):
        return self._engine.submitting.make_row(wid, spec, team, user, now, after, reason)

    def check_row(self, row) -> None:
        self._engine.submitting.check_row(row)

    def queue_row(self, row, actor, also=None):
        return self._engine.submitting.queue_row(row, actor, also)

    def cancel(self, who, wid):
        return self._engine.cancel(who, wid)

    def team_for(self, who, team):
        """The team ``who`` submits for (``team`` or their only one)."""
        return self._engine.teams.team_for(who, team)

    def track(self, row) -> None:
        """Rows a room queued itself get start estimates like any other."""
        self._engine.estimates.track(row)

    def change(self, fn: Callable) -> None:
        """``fn(scheduler)``: a change of the core, now or after the cycle being planned."""
        self._engine.change(fn)

    def dependencies_changed(self) -> None:
        """Waiting rows (dependencies, sweep slots) are to be looked at again."""
        self._engine.dependencies_changed()

    def forget_reason(self, wid: str) -> None:
        self._engine.forget_reason(wid)

    def wake(self) -> None:
        """Run the next cycle soon (something was queued or freed)."""
        self._engine.wake()


class Paths:
    """Where a user's and a workload's files are, as the service sees them."""

    def __init__(self, engine):
        self._engine = engine

    def workspace_path(self, user: str) -> str:
        """The user's workspace, whether it exists yet or not."""
        return self._engine.launcher.workspace_path(user)

    def workspace(self, user: str) -> str:
        """The user's workspace, made theirs (created) first."""
        return self._engine.launcher.workspace(user)

    def attempt_dir(self, wid: str, attempt: int) -> str:
        return self._engine.launcher.attempt_dir(wid, attempt)

    def log_path(self, wid: str, attempt: int) -> str:
        """The attempt's log, where its backend writes it."""
        return self._engine.backend.log_path(self.attempt_dir(wid, attempt))


class Steering:
    """The admins' face of the loop (workloads/operations.py): the facades'
    records, cluster view and submissions, plus what changes the cluster
    itself: team rows, a node's state (drained, GPUs out of service)."""

    def __init__(self, engine, facades: "Facades"):
        self._engine = engine
        self.records, self.cluster = facades.records, facades.cluster
        self.submissions = facades.submissions

    @property
    def teams(self):
        """The team book (service/teams/registry.py): rows, quotas, the default team."""
        return self._engine.teams

    def pool_sizes(self) -> dict[str, int]:
        return self._engine.pool_sizes()

    def set_node(self, node) -> None:
        """A node's new state (``scheduler.model.Node``), in the inventory and the core."""
        self._engine.nodes[node.name].node = node
        self._engine.change(lambda sched: sched.set_node(node))
        self._engine.wake()

    def count_cull(self) -> None:
        """A culled server, for the service's metrics."""
        if self._engine.metrics is not None:
            self._engine.metrics.culls.inc()


@dataclass(frozen=True)
class Facades:
    """The faces together, for a room of plain functions (sweeps) and the
    handlers' ``self.facades``."""
    records: Records
    cluster: ClusterView
    submissions: Submissions
    paths: Paths
