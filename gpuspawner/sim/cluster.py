"""CLUSTER.yaml: pools, nodes and team quotas for the simulator.

The short form names a node count per pool::

    pools:
      - {name: a100, nodes: 16, gpus_per_node: 8, topology: {rack: 4}}
    teams:
      - {name: vision, weight: 1, quota: {a100: {nominal: 32, borrowing_limit: 64, lending_limit: 32}}}

``topology`` gives, per level, how many consecutive nodes share a domain
(``rack: 4`` puts nodes 0-3 in rack 0, 4-7 in rack 1, ...). A pool may also
carry ``labels`` for all its nodes, or list ``nodes`` explicitly as
``{name, gpus, labels, topology}``. ``share_units: N`` (0 or >= 2) lets the
pool's GPUs be split into N slots for workloads asking a share of one GPU.
A team may have ``allowed_pools`` and a
``node_selector``. Absent ``borrowing_limit``/``lending_limit`` mean no limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..scheduler.model import Node, Quota, Team


class ClusterError(ValueError):
    pass


@dataclass
class Cluster:
    nodes: list[Node] = field(default_factory=list)
    teams: list[Team] = field(default_factory=list)

    @property
    def capacity(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.pool] = out.get(n.pool, 0) + n.gpus
        return out

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def pool_gpus_per_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.pool] = max(out.get(n.pool, 0), n.gpus)
        return out


def load_cluster(path: str | Path) -> Cluster:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ClusterError(f"{path}: not valid YAML: {e}") from None
    return parse_cluster(data, str(path))


def _int(where: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClusterError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return value


GIB = 1 << 30


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ClusterError(f"{where} must be a number >= 0, got {value!r}")
    return float(value)


def _size(where: str, spec: dict, default: tuple[float, int] = (0.0, 0)) -> tuple[float, int]:
    """A node's (or a pool's, for its nodes) ``cpus`` and ``memory_gib``
    (left out: ``default``; 0: not counted)."""
    cpus = _number(f"{where}.cpus", spec["cpus"]) if "cpus" in spec else default[0]
    memory = round(_number(f"{where}.memory_gib", spec["memory_gib"]) * GIB) \
        if "memory_gib" in spec else default[1]
    return cpus, memory


def parse_cluster(data: Any, source: str = "cluster") -> Cluster:
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list) or not data["pools"]:
        raise ClusterError(f"{source}: needs a non-empty 'pools' list")
    nodes: list[Node] = []
    pool_names: set[str] = set()
    for i, pool in enumerate(data["pools"]):
        where = f"{source}: pools[{i}]"
        if not isinstance(pool, dict) or not isinstance(pool.get("name"), str):
            raise ClusterError(f"{where} needs a 'name'")
        name = pool["name"]
        if name in pool_names:
            raise ClusterError(f"{where}: pool {name!r} is declared twice")
        pool_names.add(name)
        labels = dict(pool.get("labels") or {})
        units = _int(f"{where}.share_units", pool.get("share_units", 0))
        if units == 1:
            raise ClusterError(f"{where}.share_units must be 0 (GPUs not shared) or >= 2, got 1")
        pool_size = _size(where, pool)
        if isinstance(pool.get("nodes"), list):
            for j, spec in enumerate(pool["nodes"]):
                cpus, memory = _size(f"{where}.nodes[{j}]", spec, pool_size)
                nodes.append(Node(
                    name=str(spec.get("name", f"{name}-{j:04d}")), pool=name,
                    gpus=_int(f"{where}.nodes[{j}].gpus", spec.get("gpus"), 1),
                    topology={k: str(v) for k, v in (spec.get("topology") or {}).items()},
                    labels={**labels, **(spec.get("labels") or {})}, share_units=units,
                    cpus=cpus, memory=memory))
            continue
        count = _int(f"{where}.nodes", pool.get("nodes"), 1)
        gpus = _int(f"{where}.gpus_per_node", pool.get("gpus_per_node"), 1)
        levels = {k: _int(f"{where}.topology.{k}", v, 1)
                  for k, v in (pool.get("topology") or {}).items()}
        for j in range(count):
            topology = {level: f"{name}-{level}{j // size}" for level, size in levels.items()}
            nodes.append(Node(f"{name}-{j:04d}", name, gpus, topology, labels,
                              share_units=units, cpus=pool_size[0], memory=pool_size[1]))
    teams = [_team(f"{source}: teams[{i}]", spec, pool_names)
             for i, spec in enumerate(data.get("teams") or [])]
    return Cluster(nodes, teams)


def _team(where: str, spec: Any, pool_names: set[str]) -> Team:
    """One team of the file: its quotas per pool, weight and restrictions."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ClusterError(f"{where} needs a 'name'")
    quotas = {}
    for pool, q in (spec.get("quota") or {}).items():
        if pool not in pool_names:
            raise ClusterError(f"{where}.quota names unknown pool {pool!r}")
        quotas[pool] = _quota(f"{where}.quota.{pool}", q or {})
    weight = spec.get("weight", 1)
    if not isinstance(weight, (int, float)) or weight <= 0:
        raise ClusterError(f"{where}.weight must be a number > 0, got {weight!r}")
    allowed = spec.get("allowed_pools")
    return Team(spec["name"], quotas, float(weight),
                frozenset(allowed) if allowed is not None else None,
                dict(spec.get("node_selector") or {}))


def _quota(where: str, q: dict) -> Quota:
    def optional(name: str, parse):
        return None if q.get(name) is None else parse(f"{where}.{name}", q[name])
    memory_gib = optional("memory_gib", _number)
    return Quota(nominal=_int(f"{where}.nominal", q.get("nominal", 0)),
                 borrowing_limit=optional("borrowing_limit", _int),
                 lending_limit=optional("lending_limit", _int),
                 cpus=optional("cpus", _number),
                 memory=None if memory_gib is None else round(memory_gib * GIB))


def cluster_document(cluster: Cluster) -> dict:
    """The cluster as a CLUSTER.yaml document (every node listed, so that
    ``parse_cluster`` gives the same nodes and teams back)."""
    pools: dict[str, list[dict]] = {}
    units: dict[str, int] = {}
    for n in cluster.nodes:
        if n.share_units:
            units[n.pool] = n.share_units
        node: dict[str, Any] = {"name": n.name, "gpus": n.gpus}
        if n.cpus:
            node["cpus"] = n.cpus
        if n.memory:
            node["memory_gib"] = n.memory / GIB
        if n.labels:
            node["labels"] = dict(n.labels)
        if n.topology:
            node["topology"] = dict(n.topology)
        pools.setdefault(n.pool, []).append(node)
    teams = []
    for t in cluster.teams:
        quota = {}
        for pool, q in sorted(t.quotas.items()):
            limits = {"nominal": q.nominal}
            for name in ("borrowing_limit", "lending_limit", "cpus"):
                if getattr(q, name) is not None:
                    limits[name] = getattr(q, name)
            if q.memory is not None:
                limits["memory_gib"] = q.memory / GIB
            quota[pool] = limits
        team: dict[str, Any] = {"name": t.name, "weight": t.weight, "quota": quota}
        if t.allowed_pools is not None:
            team["allowed_pools"] = sorted(t.allowed_pools)
        if t.node_selector:
            team["node_selector"] = dict(t.node_selector)
        teams.append(team)
    return {"pools": [{"name": p, "nodes": nodes,
                       **({"share_units": units[p]} if p in units else {})}
                      for p, nodes in pools.items()], "teams": teams}
