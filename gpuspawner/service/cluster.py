"""The service on a cluster: the Kubernetes backend and the nodes it
reports, wired for ``GpuHubService.initialize`` (the local backend and
inventory stay in app.py)."""
from __future__ import annotations

import asyncio
import time

from ..backends.kube_config import KubernetesJobs
from ..backends.kube_status import nodes_from_k8s
from ..backends.kubernetes import KubeApi, KubernetesBackend
from ..store import GpuRow, NodeRow, PoolRow, Store
from .engine import LocalNode


def kubernetes_backend(parent) -> tuple[KubernetesBackend, list[LocalNode]]:
    """Connect (in-cluster service account, else $KUBECONFIG), read the GPU
    nodes, and make the backend. Runs before the event loop starts."""
    jobs = KubernetesJobs(parent=parent)
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:  # no loop in this thread yet
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    api = loop.run_until_complete(KubeApi.connect())
    nodes = nodes_from_k8s(loop.run_until_complete(api.list_nodes()))
    if not nodes:
        parent.log.warning("the cluster has no node with nvidia.com/gpu or MIG resources: "
                           "is the NVIDIA device plugin (GPU operator) installed?")
    backend = KubernetesBackend(jobs.settings(), api, refresh_interval=jobs.refresh_interval,
                                nodes=nodes)
    return backend, [LocalNode(n, list(range(n.gpus))) for n in nodes]


def record_nodes(store: Store, nodes: list[LocalNode], source: str) -> None:
    """The cluster's nodes and GPU slots in the database (what the pools
    API and the admin panel list); an admin's drain and marks are kept."""
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
