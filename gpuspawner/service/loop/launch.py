"""From a workload row to what a backend starts: the user's workspace and
the rules that keep a job's paths in it, attempt directories, the host
devices behind a placement, and the ``LaunchSpec``."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

from sqlalchemy.orm import Session

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.isolation.accounts import AccountError
from gpuspawner.isolation.resources import from_spec as resources_of
from gpuspawner.scheduler.model import Node
from gpuspawner.serving.guard import ReplicaKeys
from gpuspawner.store import Attempt, WorkloadRow
from gpuspawner.service.errors import Forbidden
from gpuspawner.service.loop.rebuild import placement_from_json
from gpuspawner.service.loop.records import rows_with_attempts
from gpuspawner.vocab.shares import share_env
from gpuspawner.vocab.specs import JobSpec, SpecError
from gpuspawner.service.workloads.views import output_notebook


@dataclass
class LocalNode:
    """A node of this host: the core's view plus the device indices behind
    the node's GPU numbers."""

    node: Node
    devices: list[int] = field(default_factory=list)
    uuids: list[str] = field(default_factory=list)  # the devices' (inventory), if known

    def uuid(self, gpu: int) -> str:
        return self.uuids[gpu] if gpu < len(self.uuids) else ""


def local_nodes(gpus, host: str, cpus: float = 0.0, memory: int = 0) -> list[LocalNode]:
    """This host's GPUs (inventory ``Gpu`` records) as scheduler nodes: one
    node per pool, since a host may mix GPU models. ``cpus`` and ``memory``:
    the host's, which each of them counts requests against (0: not counted)."""
    by_pool: dict[str, list] = {}
    for g in gpus:
        by_pool.setdefault(g.pool, []).append(g)
    out = []
    for pool, members in sorted(by_pool.items()):
        name = host if len(by_pool) == 1 else f"{host}/{pool}"
        unhealthy = frozenset(i for i, g in enumerate(members) if not g.healthy)
        out.append(LocalNode(Node(name, pool, len(members), unhealthy_gpus=unhealthy,
                                  cpus=cpus, memory=memory),
                             [g.index for g in members], [g.uuid for g in members]))
    return out


class Launcher:
    def __init__(self, nodes: dict[str, LocalNode], data_dir: str, workspace_root: str,
                 default_grace_period: float,
                 prepare_workspace: Optional[Callable[[str], object]] = None):
        self.nodes = nodes
        self.data_dir = data_dir
        self.workspace_root = workspace_root
        self.default_grace_period = default_grace_period
        self.prepare_workspace = prepare_workspace
        self.replica_keys = ReplicaKeys(data_dir)  # a replica answers only its key's holder
        # pool -> how it shares its GPUs (Engine.pool_sharing), for a share's env.
        self.pool_sharing: Callable = lambda pool: None
        # (row, attempt dir) -> what holds a running share (share_enforce.decide).
        self.share_enforcement: Callable = lambda row, attempt_dir: None
        # team -> its space's folder (service/teams/spaces.py), None without one.
        self.team_dir: Callable[[str], Optional[str]] = lambda team: None
        # row -> ((name, folder), ...): a workload's datasets checked again at
        # its start, and the use audited (service/datasets/registry.py).
        self.dataset_mounts: Callable[[WorkloadRow], tuple] = lambda row: ()

    # ---- the user's files --------------------------------------------------
    def workspace_path(self, user: str) -> str:
        """Where the user's jobs run unless they name a working_dir (as the
        jobs see it), whether it exists yet or not."""
        return self.workspace_root.format(data_dir=self.data_dir, username=user)

    def workspace(self, user: str) -> str:
        """The user's workspace, made theirs (created) first."""
        home = self.workspace_path(user)
        if self.prepare_workspace is not None:
            try:
                self.prepare_workspace(user)
            except AccountError as e:  # a directory without the user's account, say
                raise Forbidden(f"your work cannot run: {e}") from e
        else:
            os.makedirs(home, exist_ok=True)
        return home

    def job_spec(self, wid: str, user: str, spec: JobSpec) -> dict:
        """What is stored of a job: its spec with the paths checked and made whole."""
        home = self.workspace(user)
        cwd = self.working_dir(home, spec)
        checkpoint = (in_workspace(home, os.path.join(cwd, spec.checkpoint_dir), "checkpoint_dir")
                      if spec.checkpoint_dir else os.path.join(self.data_dir, "workloads", wid,
                                                               "checkpoints"))
        if spec.output_notebook:
            in_workspace(home, os.path.join(cwd, spec.output_notebook), "output_notebook")
        return {**spec.stored(), "working_dir": cwd, "checkpoint_dir": checkpoint}

    def working_dir(self, home: str, spec: JobSpec) -> str:
        """The job's working directory in its user's workspace ``home``, checked."""
        cwd = in_workspace(home, os.path.join(home, spec.working_dir or "."), "working_dir")
        if not os.path.isdir(cwd):
            raise SpecError("working_dir", f"{spec.working_dir!r} is not a directory "
                                           f"(relative paths start at {home})")
        if spec.notebook is not None:
            notebook_in_workspace(home, cwd, spec.notebook)
        return cwd

    def recheck(self, row: WorkloadRow, spec: LaunchSpec) -> None:
        """At the start: a link in the workspace may have changed since the submit."""
        if row.spec.get("notebook"):
            notebook_in_workspace(self.workspace(row.user), spec.cwd, row.spec["notebook"])

    # ---- attempts ------------------------------------------------------------
    def attempt_dir(self, wid: str, attempt: int) -> str:
        return os.path.join(self.data_dir, "workloads", wid, f"attempt-{attempt}")

    def grace(self, row: WorkloadRow) -> float:
        return row.grace_period if row.grace_period is not None else self.default_grace_period

    def devices(self, placement) -> list[int]:
        """The host device indices behind a placement (local nodes)."""
        return [self.nodes[node].devices[g] for node, gpus in placement
                if node in self.nodes for g in gpus]

    def device_uuids(self, placement) -> list[str]:
        """The UUIDs the inventory gave a placement's GPUs ("" where unknown)."""
        return [self.nodes[node].uuid(g) for node, gpus in placement
                if node in self.nodes for g in gpus]

    def launches(self, s: Session, wids: list[str]) -> dict[str, object]:
        """Admitted workloads' launches, their files checked again, their
        rows and attempts read together: wid -> its ``LaunchSpec``, or why
        it cannot start (one that cannot does not keep the others back)."""
        out: dict[str, object] = {}
        held = rows_with_attempts(s, wids)
        for wid in wids:
            try:
                if wid not in held:
                    raise LookupError(f"workload {wid} is not in the database")
                row = held[wid][0]
                out[wid] = spec = self.launch_spec(s, row)
                self.recheck(row, spec)
            except Exception as err:  # a job that cannot start fails; others go on
                out[wid] = err
        return out

    def launch_spec(self, s: Session, row: WorkloadRow) -> LaunchSpec:
        attempt = s.get(Attempt, (row.id, row.attempt))
        placement = placement_from_json(attempt.placement if attempt else ())
        spec = row.spec
        asked = resources_of(spec)
        cwd = spec.get("working_dir") or self.data_dir
        attempt_dir = self.attempt_dir(row.id, row.attempt)
        env = {**(spec.get("env") or {}), "GPUHUB_USER": row.user, "GPUHUB_TEAM": row.team,
               "GPUHUB_PROJECT": row.project, "GPUHUB_POOL": row.pool}
        if spec.get("serving"):
            env.update(self.replica_keys.env(row.id, row.attempt))
        team_dir = self.team_dir(row.team)
        if team_dir:  # the space of the team it runs for (its user may be in several)
            env["GPUHUB_TEAM_DIR"] = team_dir
        if row.gpu_share:
            env.update(share_env(row.gpu_share, self.pool_sharing(row.pool)))
            enforced = self.share_enforcement(row, attempt_dir)
            env.update(enforced.env if enforced else {})
        datasets = self.dataset_mounts(row) if spec.get("datasets") else ()
        return LaunchSpec(workload_id=row.id, attempt=row.attempt, datasets=datasets,
                          argv=tuple(job_argv(spec, attempt_dir)), attempt_dir=attempt_dir,
                          cwd=cwd, env=env, devices=tuple(self.devices(placement)),
                          device_uuids=tuple(self.device_uuids(placement)),
                          time_limit=row.time_limit, grace_period=self.grace(row),
                          checkpoint_dir=spec["checkpoint_dir"], placement=placement,
                          pool=row.pool, team=row.team, user=row.user, priority=row.priority,
                          gpus_per_node=row.gpus_per_node, serving=spec.get("serving") or {},
                          kind=row.kind, cpus=asked.cpus, memory=asked.memory_bytes)


def in_workspace(home: str, path: str, field: str) -> str:
    """``path`` normalised, if it lies in the user's workspace: a path
    outside would reach other people's files."""
    if "\x00" in path:
        raise SpecError(field, "must not contain NUL characters")
    full = os.path.normpath(path)
    home_real = os.path.realpath(home)
    if os.path.commonpath([home_real, os.path.realpath(full)]) != home_real:
        raise SpecError(field, f"{path!r} is outside your workspace {home}")
    return full


def notebook_in_workspace(home: str, cwd: str, notebook: str) -> str:
    """The notebook's path, if it is a file in the workspace. A file that is
    missing and one outside get the same answer, so that the answer does
    not tell whether a file exists outside the workspace."""
    path = os.path.join(cwd, notebook)
    try:
        in_workspace(home, path, "notebook")
        if not os.path.isfile(path):
            raise SpecError("notebook", "")
    except SpecError:
        raise SpecError("notebook", f"{notebook!r} is not a notebook file in your workspace "
                                    f"{home} (relative paths start at the working_dir)")
    return path


def job_argv(spec: dict, attempt_dir: str) -> list[str]:
    """The command line of a job: its command, or papermill for a notebook
    (gpuspawner/notebook_job.py: its kernel on Unix sockets, not TCP)."""
    if spec.get("notebook"):
        return [sys.executable, "-m", "gpuspawner.notebook_job", spec["notebook"],
                output_notebook(spec, attempt_dir), json.dumps(spec.get("parameters") or {})]
    command = spec.get("command")
    if not command:
        raise ValueError("the workload has neither a command nor a notebook")
    if spec.get("shell"):
        return ["/bin/sh", "-c", command[0]]
    return list(command)
