"""Kubernetes objects for GPU Hub jobs, as plain dicts: pure functions of a
``LaunchSpec`` and the site's ``KubeSettings``, validated in the tests
against the Kubernetes OpenAPI schema.

- A job is a ``batch/v1`` Job (one pod); a multi-node gang is an Indexed
  Job with one pod per node, a headless Service for rendezvous and the
  usual ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``.
- The scheduler already decided where it runs: the pods are pinned to the
  placement's nodes (node affinity, one pod per node) and ask for exactly
  ``gpus_per_node`` GPUs of the pool's resource.
- Kubernetes never retries (``backoffLimit: 0``): the scheduler requeues.
  ``terminationGracePeriodSeconds`` is the preemption grace, and the time
  limit is ``activeDeadlineSeconds``.
- Optional: per-team namespaces with a NetworkPolicy that keeps other
  teams' pods out, and Kueue labels plus ClusterQueue/LocalQueue manifests
  exported from the scheduler's quotas for sites that already run Kueue.
"""
from __future__ import annotations

import hashlib
import posixpath
import re
import sys
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from ...scheduler.model import Team
from ...vocab.datasets import MOUNT_ROOT, mount_point
from ..base import LaunchSpec
from .labels import label_value

MANAGED_BY = "gpuhub"
LABEL_WORKLOAD = "gpuhub.jupyter.org/workload"
LABEL_ATTEMPT = "gpuhub.jupyter.org/attempt"
LABEL_TEAM = "gpuhub.jupyter.org/team"
LABEL_USER = "gpuhub.jupyter.org/user"
LABEL_POOL = "gpuhub.jupyter.org/pool"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
RENDEZVOUS_PORT = 29500


@dataclass(frozen=True)
class KubeSettings:
    """What a site decides once (traitlets on ``KubernetesBackend`` fill it)."""

    namespace: str = "gpuhub-jobs"
    image: str = "quay.io/gpuhub/runner:latest"
    # pool -> {"resource", "node_selector", "tolerations", "priority_class_name"},
    # the same shape as KubeGPUSpawner.gpu_pools.
    pools: Mapping[str, Mapping] = field(default_factory=dict)
    # scheduler priority class -> Kubernetes PriorityClass name
    priority_class_names: Mapping[str, str] = field(default_factory=dict)
    checkpoint_claim: str = ""          # a PVC (ReadWriteMany) for checkpoints; "" for none
    checkpoint_mount: str = "/checkpoints"
    # The users' workspaces (a ReadWriteMany PVC the service and the notebook
    # servers share), mounted where the service sees them, so a job runs in
    # the directory it was submitted from. "" for none.
    workspace_claim: str = ""
    workspace_mount: str = "/home"
    # Each team's shared folder: a ReadWriteMany claim per team ("{team}" filled in).
    team_space_claim: str = ""
    team_space_mount: str = "/team"
    team_space_class: str = ""
    team_space_size: str = "100Gi"
    # Datasets kept outside the workspaces: a claim (ReadOnlyMany or
    # ReadWriteMany) the service mounts at ``dataset_mount``. "" for none.
    dataset_claim: str = ""
    dataset_mount: str = "/datasets-store"
    service_account: str = ""
    team_namespaces: bool = False       # one namespace per team: "<namespace>-<team>"
    hub_namespace: str = "jupyterhub"   # allowed in by the team NetworkPolicy
    kueue: bool = False                 # label jobs for Kueue's LocalQueue of the team
    image_pull_policy: str = "IfNotPresent"
    cpu_request: str = "1"
    memory_request: str = "4Gi"


def job_name(workload_id: str, attempt: int) -> str:
    return f"gpuhub-{workload_id.lower()}-{attempt}"


def namespace_for(team: str, s: KubeSettings) -> str:
    if not s.team_namespaces:
        return s.namespace
    return f"{s.namespace}-{label_value(team.lower())}"[:63].rstrip("-")


def labels(spec: LaunchSpec) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/component": "job",
            LABEL_WORKLOAD: label_value(spec.workload_id),
            LABEL_ATTEMPT: str(spec.attempt),
            LABEL_TEAM: label_value(spec.team),
            LABEL_USER: label_value(spec.user),
            LABEL_POOL: label_value(spec.pool)}


def _pool(spec: LaunchSpec, s: KubeSettings) -> Mapping:
    if spec.gpus_per_node and spec.pool not in s.pools:
        raise ValueError(f"pool {spec.pool!r} is not in KubernetesBackend.pools "
                         f"(known: {', '.join(sorted(s.pools)) or 'none'})")
    return s.pools.get(spec.pool, {})


def _env(spec: LaunchSpec, s: KubeSettings, name: str) -> list[dict]:
    env = [{"name": k, "value": str(v)} for k, v in sorted(spec.env.items())]
    env += [{"name": "GPUHUB_WORKLOAD_ID", "value": spec.workload_id},
            {"name": "GPUHUB_ATTEMPT", "value": str(spec.attempt)}]
    if s.checkpoint_claim:
        env.append({"name": "GPUHUB_CHECKPOINT_DIR",
                    "value": f"{s.checkpoint_mount}/{spec.workload_id}"})
    if team_claim(spec.team, s):
        env.append({"name": "GPUHUB_TEAM_DIR", "value": s.team_space_mount})
    nodes = len(spec.placement) or 1
    if nodes > 1:
        env += [{"name": "MASTER_ADDR", "value": f"{name}-0.{name}"},
                {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
                {"name": "WORLD_SIZE", "value": str(nodes)},
                {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath":
                 "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    return env


def _affinity(spec: LaunchSpec, name: str) -> Optional[dict]:
    # A MIG profile is a scheduler node of its own ("host/mig-1g.10gb").
    nodes = sorted({node.split("/", 1)[0] for node in spec.nodes})
    if not nodes:
        return None
    affinity: dict = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}
    if len(spec.placement) > 1:
        # One pod per placed node: the gang is spread exactly as decided.
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"job-name": name}},
            "topologyKey": "kubernetes.io/hostname"}]}
    return affinity


def cpu_quantity(cpus: float) -> str:
    """CPUs as a Kubernetes quantity: ``2``, ``500m``."""
    millis = max(1, round(cpus * 1000))
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity: ``8Gi``, ``512Mi``, or plain bytes."""
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def container_resources(spec: LaunchSpec, s: KubeSettings) -> dict:
    """The container's CPU and memory: what the workload asked for, as both
    request and limit (what Kueue and the node's kubelet count, and what the
    local backend's cgroup holds it to); the site's ``cpu_request`` and
    ``memory_request`` only for an attempt stored before requests existed,
    as requests alone."""
    if spec.cpus is None and spec.memory is None:
        return {"requests": {"cpu": s.cpu_request, "memory": s.memory_request}}
    asked = {"cpu": cpu_quantity(spec.cpus) if spec.cpus is not None else s.cpu_request,
             "memory": memory_quantity(spec.memory) if spec.memory is not None
             else s.memory_request}
    return {"requests": dict(asked), "limits": dict(asked)}


def job_manifest(spec: LaunchSpec, s: KubeSettings) -> dict:
    """The Job of one attempt."""
    name = job_name(spec.workload_id, spec.attempt)
    pool = _pool(spec, s)
    gang = len(spec.placement) > 1
    argv = list(spec.argv)
    if argv and argv[0] == sys.executable:
        argv[0] = "python3"  # the service's interpreter path means nothing in the image
    container: dict = {
        "name": "job", "image": s.image, "imagePullPolicy": s.image_pull_policy,
        "command": argv, "env": _env(spec, s, name),
        "resources": container_resources(spec, s),
    }
    if spec.gpus_per_node:
        resource = pool.get("resource", "nvidia.com/gpu")
        container["resources"].setdefault("limits", {})[resource] = str(spec.gpus_per_node)
    if gang:
        container["ports"] = [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}]
    pod: dict = {"restartPolicy": "Never",
                 "terminationGracePeriodSeconds": max(0, int(round(spec.grace_period))),
                 "containers": [container]}
    pod.update(_scheduling(spec, s, pool, name))
    for volume, claim, mount in (("checkpoints", s.checkpoint_claim, s.checkpoint_mount),
                                 ("workspaces", s.workspace_claim, s.workspace_mount),
                                 ("team-space", team_claim(spec.team, s), s.team_space_mount)):
        if claim:
            pod.setdefault("volumes", []).append(
                {"name": volume, "persistentVolumeClaim": {"claimName": claim}})
            container.setdefault("volumeMounts", []).append({"name": volume, "mountPath": mount})
    _dataset_volumes(spec, s, pod, container)
    if s.workspace_claim and spec.cwd:
        container["workingDir"] = spec.cwd
    if gang:
        pod["subdomain"] = name
    meta_labels = labels(spec)
    if s.kueue:
        meta_labels[KUEUE_QUEUE] = label_value(f"team-{spec.team}")
    job_spec: dict = {"backoffLimit": 0, "template": {
        "metadata": {"labels": labels(spec)}, "spec": pod}}
    if gang:
        n = len(spec.placement)
        job_spec.update(completions=n, parallelism=n, completionMode="Indexed")
    if spec.time_limit:
        job_spec["activeDeadlineSeconds"] = max(1, int(spec.time_limit))
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace_for(spec.team, s),
                         "labels": meta_labels,
                         "annotations": {"gpuhub.jupyter.org/user": spec.user,
                                         "gpuhub.jupyter.org/team": spec.team,
                                         "gpuhub.jupyter.org/placement": ",".join(
                                             f"{n}:{'+'.join(map(str, g))}"
                                             for n, g in spec.placement)}},
            "spec": job_spec}


def dataset_mounts(spec: LaunchSpec, s: KubeSettings) -> list[dict]:
    """The volumeMounts that show each of the job's datasets read-only at
    /datasets/NAME: a subPath of the claim its folder is on (the workspaces'
    or ``dataset_claim``, mounted in the service where the paths were checked)."""
    claims = [(v, mount) for v, claim, mount in (("workspaces", s.workspace_claim, s.workspace_mount),
                                                 ("datasets", s.dataset_claim, s.dataset_mount))
              if claim]
    out = []
    for name, folder in spec.datasets:
        for volume, mount in claims:
            if posixpath.commonpath([mount, folder]) == mount:
                out.append({"name": volume, "mountPath": mount_point(name), "readOnly": True,
                            **({"subPath": posixpath.relpath(folder, mount)}
                               if folder != mount else {})})
                break
        else:
            raise ValueError(f"dataset {name} ({folder}) is on no volume the jobs mount: "
                             f"KubernetesBackend.workspace_claim or dataset_claim must hold it")
    return out


def _dataset_volumes(spec: LaunchSpec, s: KubeSettings, pod: dict, container: dict) -> None:
    mounts = dataset_mounts(spec, s)
    if not mounts:
        return
    container.setdefault("volumeMounts", []).extend(mounts)
    if s.dataset_claim and any(m["name"] == "datasets" for m in mounts):
        pod.setdefault("volumes", []).append(
            {"name": "datasets", "persistentVolumeClaim": {"claimName": s.dataset_claim,
                                                           "readOnly": True}})
    container["env"].append({"name": "GPUHUB_DATASETS_DIR", "value": MOUNT_ROOT})


def _scheduling(spec: LaunchSpec, s: KubeSettings, pool: dict, name: str) -> dict:
    """Where and as whom a job's pods run: the pool's nodes and tolerations, the
    priority class, the gang's affinity, the service account."""
    pod: dict = {}
    if pool.get("node_selector"):
        pod["nodeSelector"] = dict(pool["node_selector"])
    if pool.get("tolerations"):
        pod["tolerations"] = [dict(t) for t in pool["tolerations"]]
    priority = pool.get("priority_class_name") or s.priority_class_names.get(spec.priority)
    if priority:
        pod["priorityClassName"] = priority
    affinity = _affinity(spec, name)
    if affinity:
        pod["affinity"] = affinity
    if s.service_account:
        pod["serviceAccountName"] = s.service_account
    else:
        # The namespace's default account's API token is no business of a job.
        pod["automountServiceAccountToken"] = False
    return pod


def rendezvous_service(spec: LaunchSpec, s: KubeSettings) -> Optional[dict]:
    """The headless Service a gang's pods find each other by (None for one node)."""
    if len(spec.placement) <= 1:
        return None
    name = job_name(spec.workload_id, spec.attempt)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace_for(spec.team, s),
                         "labels": labels(spec)},
            "spec": {"clusterIP": "None", "selector": {"job-name": name},
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]}}


def team_claim(team: str, s: KubeSettings) -> str:
    """The claim of ``team``'s space ("" for none): a valid object name (a
    team name that is not one, ``Vision_Lab``, is cleaned and gets a digest)."""
    if not (s.team_space_claim and team):
        return ""
    name = team if re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?", team) else \
        re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:32] + "-" + \
        hashlib.sha256(team.encode()).hexdigest()[:8]
    return s.team_space_claim.replace("{team}", name.lstrip("-"))


def team_space(team: Team, s: KubeSettings, size: Optional[str] = None) -> Optional[dict]:
    """The ReadWriteMany claim of a team's space, in the team's namespace."""
    claim = team_claim(team.name, s)
    if not claim:
        return None
    spec: dict = {"accessModes": ["ReadWriteMany"],
                  "resources": {"requests": {"storage": size or s.team_space_size}}}
    if s.team_space_class:
        spec["storageClassName"] = s.team_space_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace_for(team.name, s),
                         "labels": {"app.kubernetes.io/managed-by": MANAGED_BY,
                                    LABEL_TEAM: label_value(team.name)}},
            "spec": spec}


def team_namespace(team: Team, s: KubeSettings) -> list[dict]:
    """A team's namespace and the NetworkPolicy that lets in only its own
    pods and the hub's namespace. The team's node labels (data residency)
    go to the namespace's pods through the jobs' node selectors."""
    ns = namespace_for(team.name, s)
    meta = {"app.kubernetes.io/managed-by": MANAGED_BY, LABEL_TEAM: label_value(team.name)}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": meta}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "gpuhub-team-isolation", "namespace": ns, "labels": meta},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [
                      {"podSelector": {}},
                      {"namespaceSelector": {"matchLabels": {
                          "kubernetes.io/metadata.name": s.hub_namespace}}}]}]}},
    ]


# Kueue has no "no limit": a team without a CPU or memory ceiling gets these.
KUEUE_NO_CPU_LIMIT = "100k"
KUEUE_NO_MEMORY_LIMIT = "1Pi"


def kueue_queues(teams: Iterable[Team], capacity: Mapping[str, int], s: KubeSettings) -> list[dict]:
    """The scheduler's quotas as Kueue objects (kueue.x-k8s.io/v1beta1): a
    ResourceFlavor per pool, a ClusterQueue per team in one cohort (so idle
    quota is lent as GPU Hub lends it) and a LocalQueue in the team's namespace.

    Pods ask for cpu and memory beside their GPUs, and Kueue admits only
    what its ClusterQueue covers, so one resource group covers cpu, memory
    and every pool's GPU resource (Kueue wants each resource, and each
    flavor, in one group): each pool is a flavor with its GPU quota, 0 of
    the other pools' GPU resources, and the team's CPU and memory ceilings
    there (borrowing 0: ceilings; none: a quota too large to bind)."""
    out = [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": label_value(pool)},
            "spec": {"nodeLabels": dict(s.pools.get(pool, {}).get("node_selector", {}))}}
           for pool in sorted(capacity)]
    resource_of = {pool: s.pools.get(pool, {}).get("resource", "nvidia.com/gpu")
                   for pool in sorted(capacity)}
    gpu_resources = sorted(set(resource_of.values()))
    for team in sorted(teams, key=lambda t: t.name):
        flavors = []
        for pool in sorted(capacity):
            q = team.quota(pool)
            resources = [_kueue_ceiling("cpu", q.cpus, cpu_quantity, KUEUE_NO_CPU_LIMIT),
                         _kueue_ceiling("memory", q.memory, memory_quantity,
                                        KUEUE_NO_MEMORY_LIMIT)]
            for resource in gpu_resources:
                quota: dict = {"name": resource, "nominalQuota": 0}
                if resource == resource_of[pool]:
                    quota["nominalQuota"] = q.nominal
                    if q.borrowing_limit is not None:
                        quota["borrowingLimit"] = q.borrowing_limit
                    if q.lending_limit is not None:
                        quota["lendingLimit"] = q.lending_limit
                resources.append(quota)
            flavors.append({"name": label_value(pool), "resources": resources})
        groups = [{"coveredResources": ["cpu", "memory", *gpu_resources], "flavors": flavors}]
        name = label_value(f"team-{team.name}")
        out.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {"cohort": "gpuhub", "namespaceSelector": {},
                             "resourceGroups": groups}})
        out.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                    "metadata": {"name": name, "namespace": namespace_for(team.name, s)},
                    "spec": {"clusterQueue": name}})
    return out


def _kueue_ceiling(name: str, value, quantity, unlimited: str) -> dict:
    if value is None:
        return {"name": name, "nominalQuota": unlimited}
    return {"name": name, "nominalQuota": quantity(value) if value else "0",
            "borrowingLimit": "0"}
