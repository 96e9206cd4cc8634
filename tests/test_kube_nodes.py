"""The Kubernetes node inventory the scheduler sees carries each node's
allocatable CPUs and memory (status.py), read from Kubernetes quantities,
so admission on Kubernetes counts them as it does on the other backends."""
from __future__ import annotations

import decimal

import pytest

from gpuspawner.backends.kubernetes.status import node_resources, nodes_from_k8s, parse_quantity
from gpuspawner.scheduler import POLICIES, Scheduler, Team, Workload
from gpuspawner.scheduler import events as ev

G = 1 << 30


@pytest.mark.parametrize("text, value", [
    ("16", 16), ("15900m", decimal.Decimal("15.9")), ("500m", decimal.Decimal("0.5")),
    ("0.5", decimal.Decimal("0.5")), ("250000000n", decimal.Decimal("0.25")),
    ("64Gi", 64 * G), ("131072Ki", 128 << 20), ("512Mi", 512 << 20), ("1Ti", 1 << 40),
    ("1G", 10 ** 9), ("1.5G", 1_500_000_000), ("128974848", 128974848), ("1e3", 1000),
    ("1E", 10 ** 18), ("12k", 12000), (" 8Gi ", 8 * G),
])
def test_kubernetes_quantities_are_read_as_numbers(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "64GB", "1.2.3", "sixteen", "64gi", "-"])
def test_a_quantity_that_is_none_says_so(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def k8s_node(name, allocatable, capacity=None, product="NVIDIA-A100-SXM4-80GB"):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "spec": {},
            "status": {"allocatable": allocatable, "capacity": capacity or allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("allocatable, expected", [
    # a typical GPU node: the kubelet keeps some CPU and memory for the system
    ({"nvidia.com/gpu": "8", "cpu": "15900m", "memory": "131072Ki"},
     [("gpu-1", 8, 15.9, 128 << 20)]),
    ({"nvidia.com/gpu": "4", "cpu": "64", "memory": "256Gi", "pods": "110"},
     [("gpu-1", 4, 64.0, 256 * G)]),
    # a node that states neither: nothing counted (0), as before
    ({"nvidia.com/gpu": "2"}, [("gpu-1", 2, 0.0, 0)]),
    # MIG profiles beside whole GPUs: two scheduler nodes on one machine share its CPUs
    # and memory evenly, so together they are never promised more than it has
    ({"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "7", "cpu": "32", "memory": "100Gi"},
     [("gpu-1", 4, 16.0, 50 * G), ("gpu-1/mig-1g.10gb", 7, 16.0, 50 * G)]),
    # a CPU-only node is left out (the scheduler's GPU-less work runs without a node)
    ({"cpu": "8", "memory": "32Gi"}, []),
])
def test_the_node_view_carries_allocatable_cpus_and_memory(allocatable, expected):
    nodes = nodes_from_k8s([k8s_node("gpu-1", allocatable)])
    assert [(n.name, n.gpus, n.cpus, n.memory) for n in nodes] == expected


def test_node_resources_names_the_bad_quantity():
    assert node_resources({"cpu": "2", "memory": "4Gi"}) == (2.0, 4 * G)
    with pytest.raises(ValueError, match="'lots'"):
        node_resources({"cpu": "lots"})


def test_admission_on_kubernetes_counts_the_nodes_cpus_and_memory():
    """A 16-core, 64GiB node with 8 GPUs: two 6-CPU jobs run, the third
    waits for CPUs although GPUs are free."""
    nodes = nodes_from_k8s([k8s_node("gpu-1", {"nvidia.com/gpu": "8", "cpu": "16",
                                               "memory": "64Gi"})])
    pool = nodes[0].pool
    s = Scheduler(nodes, [Team("a")], POLICIES["fifo"])
    for i in range(3):
        e = s.submit(Workload(f"j{i}", "a", pool, 1, float(i), cpus=6, memory=8 * G), float(i))
        assert e.type == ev.QUEUED, e.message
    result = s.step(10.0)
    assert sorted(e.workload_id for e in result.events if e.type == ev.ADMITTED) == ["j0", "j1"]
    assert "node gpu-1 has 4 of 16 CPUs free" in result.waiting["j2"], result.waiting["j2"]
