"""Making the service's backends: one factory per backend, each returning
the backend and the nodes it brings (so the pools it runs). With several
backends (``GpuHubService.backends``), each pool belongs to the backend
whose nodes make it up, and ``PoolBackends`` routes each workload there.

Runs in ``GpuHubService.initialize``, before the event loop starts."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from gpuspawner.backends.base import Backend
from gpuspawner.backends.kubernetes.config import KubernetesJobs
from gpuspawner.backends.kubernetes.status import nodes_from_k8s
from gpuspawner.backends.kubernetes.api import KubeApi
from gpuspawner.backends.kubernetes.backend import KubernetesBackend
from gpuspawner.backends.local import LocalBackend
from gpuspawner.backends.pools import PoolBackends
from gpuspawner.isolation.accounts import isolating
from gpuspawner.isolation.cgroups import GpuEnforcement
from gpuspawner.isolation.gpu_rules import DEVICE_GROUPS
from gpuspawner.store import GpuRow, NodeRow, PoolRow, Store
from gpuspawner.service.loop.launch import LocalNode, local_nodes
from gpuspawner.service.serving.controller import ReplicaHost, ServingController
from gpuspawner.service.sharing.watch import ShareHost, ShareWatch

# Said of GPUs and limits a cluster backend holds by its own means.
ENFORCED_ELSEWHERE = {
    "kubernetes": {"gpu_enforcement": "kubernetes device plugin",
                   "limits": "kubernetes resources"},
    "slurm": {"gpu_enforcement": "slurm (ConstrainDevices in cgroup.conf)",
              "limits": "slurm (cgroup.conf)"},
}


@dataclass
class Wired:
    name: str                  # local, kubernetes, slurm
    backend: Backend
    nodes: list[LocalNode]
    source: str                # where its inventory comes from (nvml, declared, slurm, ...)
    # node -> device index -> its inventory record (model, UUID, memory, health)
    gpus: dict[str, dict] = field(default_factory=dict)
    enforcement: Optional[GpuEnforcement] = None


def make_local(app, accounts) -> Wired:
    """This host's processes, on the GPUs NVML (or the declared list) reports,
    enforced by device cgroups (or device groups) where they can be made."""
    # Without accounts, as root, jobs run as root: device groups bind nothing.
    enforcement = GpuEnforcement(parent=app, hub_tag=app.hub_tag).detect(
        processes_as_root=accounts is None and isolating())
    if enforcement.gpu_mode == DEVICE_GROUPS:
        enforcement.setup_device_groups(app.device_groups_file)
    source, gpus = app.inventory.discover()
    enforcement.know_devices(gpus)  # declared MIG devices (NVML's it knows)
    nodes = local_nodes(gpus, app.node_name, *app.node_capacity())
    by_index = {g.index: g for g in gpus}
    return Wired("local", LocalBackend(enforcement=enforcement, accounts=accounts,
                                         start_niceness=app.start_niceness), nodes,
                 source, {ln.node.name: by_index for ln in nodes}, enforcement)


def make_slurm(app, accounts) -> Wired:
    """Batch jobs on a Slurm cluster, whose GPU nodes ``scontrol`` reports."""
    backend = app.slurm
    found = backend.discover()
    nodes = [LocalNode(n, [g.index for g in node_gpus]) for n, node_gpus in found]
    return Wired("slurm", backend, nodes, "slurm",
                 {n.name: {g.index: g for g in node_gpus} for n, node_gpus in found})


def make_kubernetes(app, accounts) -> Wired:
    """Jobs and replica Deployments on the cluster the service runs in (or
    $KUBECONFIG's), on the GPU nodes the cluster reports."""
    jobs = KubernetesJobs(parent=app)
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:  # no loop in this thread yet
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    api = loop.run_until_complete(KubeApi.connect())
    nodes = nodes_from_k8s(loop.run_until_complete(api.list_nodes()))
    if not nodes:
        app.log.warning("the cluster has no node with nvidia.com/gpu or MIG resources: "
                        "is the NVIDIA device plugin (GPU operator) installed?")
    backend = KubernetesBackend(jobs.settings(), api, nodes=nodes, **jobs.backend_options())
    return Wired("kubernetes", backend, [LocalNode(n, list(range(n.gpus))) for n in nodes],
                 "kubernetes")


FACTORIES: dict[str, Callable] = {"local": make_local, "slurm": make_slurm,
                                  "kubernetes": make_kubernetes}


def combine(wired: list[Wired]) -> Backend:
    """One backend, or several routed by pool; a pool two backends both
    report is refused (its work could not be told where to go)."""
    if len(wired) == 1:
        return wired[0].backend
    by_pool: dict[str, Wired] = {}
    for w in wired:
        for ln in w.nodes:
            other = by_pool.setdefault(ln.node.pool, w)
            if other is not w:
                raise SystemExit(f"GPU Hub: pool {ln.node.pool!r} has nodes of both the "
                                 f"{other.name} and the {w.name} backend; give each backend "
                                 f"pools of its own")
    return PoolBackends({pool: w.backend for pool, w in by_pool.items()})


def record_nodes(store: Store, nodes: list[LocalNode], source: str) -> None:
    """A backend's nodes and GPU slots in the database (what the pools API
    and the admin panel list); an admin's drain and marks are kept."""
    now = time.time()
    with store.transaction() as s:
        for ln in nodes:
            n = ln.node
            if s.get(PoolRow, n.pool) is None:
                s.add(PoolRow(name=n.pool))
                s.flush()
            row = s.get(NodeRow, n.name) or NodeRow(name=n.name)
            row.pool, row.gpus, row.healthy = n.pool, n.gpus, n.healthy
            row.source, row.updated_at = source, now
            row.labels, row.topology = dict(n.labels), dict(n.topology)
            row.drained = row.drained or n.drained
            s.add(row)
            s.flush()
            for i in range(n.gpus):
                gr = s.get(GpuRow, (n.name, i)) or GpuRow(node=n.name, index=i)
                gr.model, gr.healthy = n.pool, n.healthy
                s.add(gr)


def record_inventory(store: Store, w: Wired) -> None:
    """The backend's nodes, then what NVML (or the declared list, or Slurm)
    says of each GPU behind them."""
    record_nodes(store, w.nodes, w.source)
    if not w.gpus:
        return
    with store.transaction() as s:
        for ln in w.nodes:
            for i, device in enumerate(ln.devices):
                g = w.gpus.get(ln.node.name, {}).get(device)
                gr = s.get(GpuRow, (ln.node.name, i))
                if g is None or gr is None:
                    continue
                gr.uuid, gr.model, gr.memory_mib = g.uuid, g.model, g.memory_mib
                gr.healthy, gr.health_reason = g.healthy, g.health_reason


def serving_controller(engine, **options) -> ServingController:
    """The serving controller on the engine's facades, with the two things
    of the loop it needs besides them (``ReplicaHost``)."""
    return ServingController(engine.facades, ReplicaHost(
        address=lambda wid, attempt, port: engine.backend.replica_address(wid, attempt, port),
        replace=engine.replace_replica), **options)


def share_watch(engine, read_processes, enforcement=None, **options) -> ShareWatch:
    """The memory watch of shared GPUs on the engine's facades; its readings
    go where the views read them (``engine.share_memory``, ``share_activity``)."""
    def attempt_pids(wid: str, attempt: int):
        backend = engine.backend
        return backend.attempt_pids(wid, attempt) if backend.names_attempt_pids else None

    def publish(memory: dict, activity: dict) -> None:
        engine.share_memory, engine.share_activity = memory, activity
    return ShareWatch(engine.facades, ShareHost(attempt_pids, engine.stop_for, publish),
                      read_processes, enforcement, **options)
