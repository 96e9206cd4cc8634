"""The CPUs and memory every workload asks for, besides its GPUs.

Every notebook server, job and model replica asks for CPU cores and
memory. What it does not say comes from its kind's default here. The
scheduler admits on them against each node's capacity (scheduler/model.py)
and the cgroup holds the process to them (cgroups.py: ``cpu.cfs_quota_us``
and ``memory.limit_in_bytes``), with a pids limit for all.

Read by the service (what a submit asks for) and the hub's spawner (a
notebook server's), each from its own config file:
``c.WorkloadResources.job = {"cpus": 2, "memory": "16G"}``.
"""
from __future__ import annotations

import os
from typing import Optional

from traitlets import Dict, Int
from traitlets.config import Configurable

from .gpu_rules import Limits, LimitError, check_entry, parse_cpus, parse_memory

KINDS = ("notebook", "job", "deployment")


class WorkloadResources(Configurable):
    """Default CPU and memory requests per kind of workload, and the pids limit."""

    notebook = Dict({"cpus": 0.5, "memory": "2G"}, help="""
        What a notebook server asks for: ``{"cpus": 2, "memory": "8G"}``.
        Its cgroup is held to it. Small by default: a notebook server is
        mostly idle, and on a small host every CPU it books is one a job
        cannot have.
        """).tag(config=True)

    job = Dict({"cpus": 1, "memory": "8G"}, help="""
        What a job asks for when its submit does not say (``cpus``,
        ``memory``; ``gpuhub submit --cpus 2 --memory 16G``).
        """).tag(config=True)

    deployment = Dict({"cpus": 0.5, "memory": "2G"}, help="""
        What each replica of a model deployment asks for (its model works
        on the GPU; a replica books its CPUs for as long as it serves, so
        two deployments at 1 CPU would leave a 2-core host no CPU for jobs).
        Example: ``{"cpus": 2, "memory": "8G"}`` for a CPU-bound model.
        """).tag(config=True)

    pids_limit = Int(1024, help="""
        Most processes and threads one server, job or replica may have at
        once (cgroup v1 ``pids.max``); a fork bomb stops there. 0: no limit.
        """).tag(config=True)

    def default_for(self, kind: str) -> Limits:
        """The kind's default request (a job's for an unknown kind)."""
        name = kind if kind in KINDS else "job"
        limits = check_entry(getattr(self, name), f"WorkloadResources.{name}")
        if limits.cpus is None or limits.memory_bytes is None:
            raise LimitError(f"WorkloadResources.{name} must give both cpus and memory")
        return limits


MAX_CPUS = 1024
MAX_MEMORY = 64 << 40  # 64 TiB
# Less than this is a unit left out ("8" is 8 bytes), not a real request.
MIN_MEMORY = 16 << 20


def parse_request(body: dict, default: Limits) -> Limits:
    """``cpus`` and ``memory`` of a request body, the default's where absent.
    Raises LimitError naming the field (the API answers 400 with it)."""
    cpus, memory = default.cpus, default.memory_bytes
    if body.get("cpus") is not None:
        value = body["cpus"]
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        cpus = parse_cpus(value, "cpus")
        if cpus > MAX_CPUS:
            raise LimitError(f"cpus: {cpus:g} is above the maximum of {MAX_CPUS}")
    if body.get("memory") is not None:
        memory = parse_memory(body["memory"], "memory")
        if memory > MAX_MEMORY:
            raise LimitError(f"memory: {body['memory']!r} is above the maximum of 64T")
        if memory < MIN_MEMORY:
            raise LimitError(f"memory: {body['memory']!r} is {memory} bytes, below the minimum "
                             f"of 16M (give a unit: 512M, 8G, 8GiB)")
    return Limits(memory, cpus)


def parse_ceilings(quota: dict, where: str) -> tuple[Optional[float], Optional[int]]:
    """A team quota's ``cpus`` and ``memory`` ceilings (None or absent: no
    limit; 0: none may be asked for). Raises LimitError naming the field
    (``where.cpus``)."""
    cpus, memory = quota.get("cpus"), quota.get("memory")
    if cpus is not None:
        cpus = 0.0 if cpus == 0 and not isinstance(cpus, bool) else parse_cpus(cpus, f"{where}.cpus")
        if cpus > MAX_CPUS * 1024:
            raise LimitError(f"{where}.cpus: {cpus:g} is above the maximum of {MAX_CPUS * 1024}")
    if memory is not None:
        memory = 0 if memory == 0 and not isinstance(memory, bool) else \
            parse_memory(memory, f"{where}.memory")
        if memory > MAX_MEMORY * 1024:
            raise LimitError(f"{where}.memory: {memory} bytes is above the maximum of 64P")
    return cpus, memory


def stored(limits: Limits) -> dict:
    """How a request is kept in a workload's ``spec`` (``spec["resources"]``)."""
    return {"cpus": limits.cpus, "memory": limits.memory_bytes}


def from_spec(spec: dict) -> Limits:
    """A stored request; empty for a workload submitted before requests."""
    r = (spec or {}).get("resources") or {}
    return Limits(r.get("memory") or None, r.get("cpus") or None)


def held(spec: dict, num_nodes: int = 1) -> tuple[float, float]:
    """The CPUs and memory (GiB) a stored workload asked for on all its
    nodes together, as usage and cost count them (0 for one submitted
    before requests)."""
    asked = from_spec(spec)
    nodes = num_nodes or 1
    return (asked.cpus or 0.0) * nodes, (asked.memory_bytes or 0) * nodes / float(1 << 30)


def host_capacity(meminfo: str = "/proc/meminfo") -> tuple[float, int]:
    """This host's CPUs (those this process may run on) and memory (MemTotal)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    memory = 0
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return float(cpus), memory


def node_capacity(declared: dict, where: str) -> tuple[float, int]:
    """A node's CPUs and memory: ``declared`` (``{"cpus": 2, "memory": "16G"}``;
    0 for a key: not counted), the host's for what it leaves out."""
    host_cpus, host_memory = host_capacity()
    unknown = sorted(set(declared) - {"cpus", "memory"})
    if unknown:
        raise LimitError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: cpus, memory")
    cpus, memory = declared.get("cpus", host_cpus), declared.get("memory", host_memory)
    return (float(cpus) if cpus == 0 else parse_cpus(cpus, f"{where}.cpus"),
            0 if memory == 0 else parse_memory(memory, f"{where}.memory"))


def human_memory(n: int) -> str:
    """``8GiB``, ``1.5GiB``, ``512MiB``: how a request is shown."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g}{unit}"
    return f"{n}B"
