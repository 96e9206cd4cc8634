"""What the Kubernetes API says, in the scheduler's terms: how an attempt's
Job ended, and the GPU nodes (from node capacity and the GPU feature
discovery labels, with their allocatable CPUs and memory). Pure functions
over the API's JSON."""
from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Optional

from ...inventory.model import pool_name
from ...scheduler.model import Node
from ..base import EXITED, LOST, STOPPED, TIME_LIMIT, AttemptExit

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
# The device plugin's time-sliced GPUs with renameByDefault: each GPU is
# offered as `replicas` shares (docs/deploy-kubernetes.md, "MIG and time-sliced GPUs").
SHARED_RESOURCE = "nvidia.com/gpu.shared"
PRODUCT_LABEL = "nvidia.com/gpu.product"
# Pod ends that mean the hardware or the node went away, not the program.
LOST_POD_REASONS = {"Evicted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown",
                    "UnexpectedAdmissionError"}


def _time(text: Optional[str], default: float) -> float:
    if not text:
        return default
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _condition(obj: dict, kind: str) -> Optional[dict]:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def pod_lost(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("reason") in LOST_POD_REASONS or _condition(pod, "DisruptionTarget") is not None


def _exit_code(pods: list[dict]) -> Optional[int]:
    """The first non-zero exit code of a job container, else 0, else None."""
    codes = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            term = (cs.get("state") or {}).get("terminated") or \
                   (cs.get("lastState") or {}).get("terminated")
            if term is not None and term.get("exitCode") is not None:
                codes.append(int(term["exitCode"]))
    bad = [c for c in codes if c != 0]
    return bad[0] if bad else (0 if codes else None)


def attempt_exit(workload_id: str, attempt: int, job: Optional[dict], pods: list[dict],
                 stopped: bool, now: float) -> Optional[AttemptExit]:
    """How the attempt ended, or None while it runs.

    ``job`` is None once the Job is gone: STOPPED if the service deleted it,
    else LOST (someone else did, or the namespace went away)."""
    if job is None:
        return AttemptExit(workload_id, attempt, STOPPED if stopped else LOST, None, now)
    done = _condition(job, "Complete")
    if done is not None:
        return AttemptExit(workload_id, attempt, EXITED, 0,
                           _time(done.get("lastTransitionTime"), now))
    failed = _condition(job, "Failed")
    if failed is None:
        return None
    at = _time(failed.get("lastTransitionTime"), now)
    if failed.get("reason") == "DeadlineExceeded":
        return AttemptExit(workload_id, attempt, TIME_LIMIT, None, at)
    if any(pod_lost(p) for p in pods):
        return AttemptExit(workload_id, attempt, LOST, None, at)
    if stopped:
        return AttemptExit(workload_id, attempt, STOPPED, _exit_code(pods), at)
    code = _exit_code(pods)
    return AttemptExit(workload_id, attempt, EXITED if code is not None else LOST, code, at)


# Kubernetes quantity suffixes (apimachinery resource.Quantity): binary, decimal, and milli.
_SUFFIXES = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
             "Ei": 2 ** 60, "n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"),
             "m": decimal.Decimal("1e-3"), "": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
             "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(text) -> decimal.Decimal:
    """A Kubernetes quantity as a number: ``"15900m"`` -> 15.9 (CPUs),
    ``"64Gi"`` -> 68719476736 and ``"131072Ki"`` -> 134217728 (bytes),
    ``"1e3"`` -> 1000. Raises ValueError naming the text it cannot read."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r} (expected e.g. 16, 15900m, "
                         f"64Gi, 131072Ki)")
    number, exponent, suffix = m.groups()
    value = decimal.Decimal(number)
    if exponent:
        return value * decimal.Decimal(10) ** int(exponent[1:])
    return value * decimal.Decimal(_SUFFIXES[suffix or ""])


def node_resources(allocatable: dict) -> tuple[float, int]:
    """A node's allocatable (CPUs, memory bytes) for the scheduler (0: not
    stated, not counted). Memory rounds down to whole bytes."""
    cpus = allocatable.get("cpu")
    memory = allocatable.get("memory")
    return (float(parse_quantity(cpus)) if cpus is not None else 0.0,
            int(math.floor(parse_quantity(memory))) if memory is not None else 0)


def _ready(node: dict) -> bool:
    return _condition(node, "Ready") is not None


def gpu_kind(product: str, resource: str) -> Optional[tuple[str, str]]:
    """``(node suffix, pool)`` of a node's extended resource, None if it is
    no GPU: ``nvidia.com/gpu`` whole GPUs (or time-sliced replicas, which
    feature discovery labels ``<product>-SHARED``) in the product's pool;
    ``nvidia.com/mig-1g.10gb`` in ``<product>-mig-1g.10gb``; time-sliced
    ``nvidia.com/gpu.shared`` (renameByDefault) in ``<product>-shared``."""
    if resource == GPU_RESOURCE:
        return "", product
    if resource.startswith(MIG_PREFIX):
        profile = resource[len("nvidia.com/"):]
        return profile, f"{product}-{profile}"
    if resource == SHARED_RESOURCE:
        return "shared", product if product.endswith("-shared") else f"{product}-shared"
    return None


def nodes_from_k8s(items: list[dict]) -> list[Node]:
    """Scheduler nodes from the API's nodes: whole GPUs (``nvidia.com/gpu``)
    in a pool named after ``nvidia.com/gpu.product``, and each MIG profile
    (``nvidia.com/mig-1g.10gb``) or time-sliced share
    (``nvidia.com/gpu.shared``) as a node of its own (``gpu_kind``). A node that is not Ready is unhealthy; a
    cordoned one is drained; GPUs in capacity but not allocatable (the
    device plugin's verdict on XID errors) are unhealthy slots, the
    highest-numbered ones: Kubernetes does not say which device failed.
    Each carries the node's allocatable ``cpu`` and ``memory`` (what the
    kubelet offers pods, after system reservations), so the scheduler admits
    on them; a node split into several (MIG profiles beside whole GPUs)
    divides them evenly, so the hub never promises a node more than it has.
    Nodes without GPUs are left out."""
    out = []
    for item in items:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        labels = dict(meta.get("labels") or {})
        allocatable = (item.get("status") or {}).get("allocatable") or {}
        capacity = (item.get("status") or {}).get("capacity") or allocatable
        product = pool_name(labels.get(PRODUCT_LABEL, "gpu"))
        topology = {k: labels[v] for k, v in (("zone", "topology.kubernetes.io/zone"),
                                               ("rack", "topology.kubernetes.io/rack"))
                    if v in labels}
        common = dict(topology=topology, labels=labels, healthy=_ready(item),
                      drained=bool(spec.get("unschedulable")))
        views = []
        for resource, count in sorted(allocatable.items()):
            kind = gpu_kind(product, resource)
            if kind is None:
                continue
            suffix, pool = kind
            name = f"{meta['name']}/{suffix}" if suffix else meta["name"]
            # The device plugin takes a GPU with XID errors out of allocatable;
            # capacity keeps counting it. The missing ones are unhealthy slots.
            total = max(int(count), int(capacity.get(resource, count)))
            if total > 0:
                views.append((name, pool, total, int(count)))
        cpus, memory = node_resources(allocatable)
        for name, pool, total, count in views:
            out.append(Node(name, pool, total, unhealthy_gpus=frozenset(range(count, total)),
                            cpus=cpus / len(views), memory=memory // len(views), **common))
    return out


def pool_resources(nodes: list[dict]) -> dict[str, str]:
    """Pool name -> the extended resource its GPUs are asked for in."""
    out = {}
    for item in nodes:
        labels = (item.get("metadata") or {}).get("labels") or {}
        product = pool_name(labels.get(PRODUCT_LABEL, "gpu"))
        for resource in ((item.get("status") or {}).get("allocatable") or {}):
            kind = gpu_kind(product, resource)
            if kind is not None:
                out[kind[1]] = resource
    return out
