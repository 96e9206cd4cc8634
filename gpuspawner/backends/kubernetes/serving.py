"""Model-deployment replicas on Kubernetes, as plain dicts: pure functions of
a ``LaunchSpec`` whose ``serving`` says what to serve, validated in the tests
against the Kubernetes OpenAPI schema.

A replica is what the scheduler admitted: one workload, on the GPUs of one
node. So each replica is an ``apps/v1`` Deployment of one pod pinned to that
node (a Deployment, not a Job: a server that crashes is restarted in place by
Kubernetes, and the pod gets a readiness probe), with its MLServer settings
in a ConfigMap beside it. A ClusterIP Service per revision
(``<name>-r<revision>``) selects that revision's ready replicas for clients
inside the cluster. GPU Hub's own router sends to the pods' IPs, replica by
replica, so it can pick the least busy one and split traffic by revision.

KServe's InferenceService was the other choice; it is not used because
KServe places and scales its pods itself, outside the scheduler's quotas and
preemption, which is the one thing a GPU Hub deployment must not escape.
"""
from __future__ import annotations

import json
from typing import Optional

from ...serving.guard import KEY_ENV, KEY_HEADER
from ...serving.replica import model_ready_path
from .labels import label_value
from ..base import EXITED, LOST, STOPPED, AttemptExit, LaunchSpec
from .manifests import (LABEL_TEAM, MANAGED_BY, KubeSettings, job_manifest, job_name, labels,
                             namespace_for)
from .status import pod_lost

REPLICA_PORT = 8080
SETTINGS_MOUNT = "/etc/gpuhub/replica"
LABEL_DEPLOYMENT = "gpuhub.jupyter.org/deployment"
LABEL_REVISION = "gpuhub.jupyter.org/revision"
LABEL_REPLICA = "gpuhub.jupyter.org/replica"
# A replica whose server crashed this many times in its pod is reported
# ended (with its exit code), so the service sees it and replaces or gives up.
MAX_POD_RESTARTS = 3


def replica_settings(serving: dict) -> tuple[dict, dict]:
    """MLServer's server and model settings as the pod needs them: listening
    on the pod's address at the fixed port the probes and the router use."""
    server = {**serving["server"], "host": "0.0.0.0", "http_port": REPLICA_PORT,
              "grpc_port": REPLICA_PORT + 1, "metrics_port": REPLICA_PORT + 2}
    return server, dict(serving["model"])


def revision_service_name(spec: LaunchSpec) -> str:
    return label_value(f"{spec.serving['name']}-r{spec.serving['revision']}")


def _revision_labels(spec: LaunchSpec) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": MANAGED_BY,
            LABEL_TEAM: label_value(spec.team),
            LABEL_DEPLOYMENT: label_value(spec.serving["name"]),
            LABEL_REVISION: str(spec.serving["revision"])}


def replica_manifests(spec: LaunchSpec, s: KubeSettings) -> list[dict]:
    """The ConfigMap and the Deployment of one replica attempt."""
    if not s.workspace_claim:
        raise ValueError("model deployments on Kubernetes need KubernetesJobs.workspace_claim: "
                         "the replicas read the model from the users' workspaces")
    name = job_name(spec.workload_id, spec.attempt)
    namespace = namespace_for(spec.team, s)
    server, model = replica_settings(spec.serving)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": name, "namespace": namespace, "labels": labels(spec)},
                  "data": {"settings.json": json.dumps(server, indent=2),
                           "model-settings.json": json.dumps(model, indent=2)}}
    # The Job's pod, reshaped: same placement, GPUs, pool, volumes and labels.
    job = job_manifest(spec, s)
    pod_labels = {**job["spec"]["template"]["metadata"]["labels"], **_revision_labels(spec),
                  LABEL_REPLICA: name, "app.kubernetes.io/component": "model-replica"}
    pod = job["spec"]["template"]["spec"]
    pod["restartPolicy"] = "Always"
    container = pod["containers"][0]
    # The kubelet's probes carry the replica's key like the router does
    # (serving/guard.py): the pod answers nothing else.
    key = [{"name": KEY_HEADER, "value": spec.env.get(KEY_ENV, "")}]
    container.update(
        name="mlserver",
        command=["python3", "-m", "gpuspawner.serving.mlserver_guarded", SETTINGS_MOUNT],
        ports=[{"name": "http", "containerPort": REPLICA_PORT}],
        readinessProbe={"httpGet": {"path": model_ready_path(spec.serving["name"]),
                                    "port": "http", "httpHeaders": key},
                        "periodSeconds": 2, "failureThreshold": 2},
        livenessProbe={"httpGet": {"path": "/v2/health/live", "port": "http",
                                   "httpHeaders": key},
                       "initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 3})
    container.pop("workingDir", None)
    container.setdefault("volumeMounts", []).append(
        {"name": "replica-settings", "mountPath": SETTINGS_MOUNT, "readOnly": True})
    pod.setdefault("volumes", []).append({"name": "replica-settings", "configMap": {
        "name": name, "items": [{"key": "settings.json", "path": "settings.json"},
                                {"key": "model-settings.json",
                                 "path": "model/model-settings.json"}]}})
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {**job["metadata"], "labels": {**job["metadata"]["labels"],
                                                   **_revision_labels(spec),
                                                   "app.kubernetes.io/component": "model-replica"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {LABEL_REPLICA: name}},
                 # Recreate: a second pod of the same replica would need GPUs
                 # the scheduler never gave it.
                 "strategy": {"type": "Recreate"},
                 "template": {"metadata": {"labels": pod_labels}, "spec": pod}}}
    return [config_map, deployment]


def revision_service(spec: LaunchSpec, s: KubeSettings) -> dict:
    """The revision's ClusterIP Service, for clients inside the cluster."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": revision_service_name(spec),
                         "namespace": namespace_for(spec.team, s),
                         "labels": _revision_labels(spec)},
            "spec": {"selector": {LABEL_DEPLOYMENT: label_value(spec.serving["name"]),
                                  LABEL_REVISION: str(spec.serving["revision"])},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def replica_address(pods: list[dict]) -> Optional[str]:
    """``ip:port`` of the replica's running pod, once it has an address."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and status.get("podIP") \
                and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            return f"{status['podIP']}:{REPLICA_PORT}"
    return None


def _crashes(pods: list[dict]) -> tuple[int, Optional[int]]:
    """The most restarts of the server container, and its last exit code."""
    most, code = 0, None
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            restarts = int(cs.get("restartCount") or 0)
            if restarts >= most:
                most = restarts
                term = (cs.get("lastState") or {}).get("terminated") or {}
                code = term.get("exitCode", code)
    return most, code


def replica_exit(workload_id: str, attempt: int, deployment: Optional[dict], pods: list[dict],
                 stopped: bool, now: float) -> Optional[AttemptExit]:
    """How a replica attempt ended, or None while it serves (or restarts).

    Gone (after the service deleted it: STOPPED; else LOST); its pod evicted
    or its node lost: LOST, so the scheduler places it again elsewhere (the
    Deployment would wait for the same node); crashing again and again: EXITED
    with the server's exit code."""
    if deployment is None:
        return AttemptExit(workload_id, attempt, STOPPED if stopped else LOST, None, now)
    if stopped:
        return None  # deleted; gone at the next listing
    if any(pod_lost(p) for p in pods):
        return AttemptExit(workload_id, attempt, LOST, None, now)
    restarts, code = _crashes(pods)
    if restarts >= MAX_POD_RESTARTS:
        return AttemptExit(workload_id, attempt, EXITED, code if code is not None else 1, now)
    return None
