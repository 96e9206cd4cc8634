"""MIG and time-sliced GPUs on Kubernetes: the device plugin's resources as pools, and the
job manifests that ask for them (validated against the Kubernetes schema)."""
from __future__ import annotations

import pytest
from test_kube_backend import SETTINGS, k8s_node, spec, valid

from gpuspawner.backends.kubernetes.manifests import KubeSettings, job_manifest
from gpuspawner.backends.kubernetes.status import nodes_from_k8s, pool_resources

H200 = "NVIDIA-H200"


@pytest.mark.parametrize("allocatable, product, expected", [
    pytest.param({"nvidia.com/mig-1g.18gb": "7", "nvidia.com/gpu": "0"}, H200,
                 [("h1/mig-1g.18gb", "h200-mig-1g.18gb", 7, "nvidia.com/mig-1g.18gb")],
                 id="mixed strategy, 7x1g"),
    pytest.param({"nvidia.com/mig-3g.71gb": "1", "nvidia.com/mig-2g.35gb": "1",
                  "nvidia.com/mig-1g.18gb": "2"}, H200,
                 [("h1/mig-1g.18gb", "h200-mig-1g.18gb", 2, "nvidia.com/mig-1g.18gb"),
                  ("h1/mig-2g.35gb", "h200-mig-2g.35gb", 1, "nvidia.com/mig-2g.35gb"),
                  ("h1/mig-3g.71gb", "h200-mig-3g.71gb", 1, "nvidia.com/mig-3g.71gb")],
                 id="mixed profiles"),
    pytest.param({"nvidia.com/gpu": "32"}, H200 + "-SHARED",
                 [("h1", "h200-shared", 32, "nvidia.com/gpu")],
                 id="time-sliced, 8 GPUs x 4 replicas as nvidia.com/gpu"),
    pytest.param({"nvidia.com/gpu.shared": "32"}, H200 + "-SHARED",
                 [("h1/shared", "h200-shared", 32, "nvidia.com/gpu.shared")],
                 id="time-sliced, renameByDefault"),
    pytest.param({"nvidia.com/gpu.shared": "8", "nvidia.com/gpu": "0"}, H200,
                 [("h1/shared", "h200-shared", 8, "nvidia.com/gpu.shared")],
                 id="renamed shares without the -SHARED label"),
])
def test_device_plugin_resources_become_pools(allocatable, product, expected):
    node = k8s_node("h1", allocatable, product=product)
    resources = pool_resources([node])
    got = [(n.name, n.pool, n.gpus, resources[n.pool]) for n in nodes_from_k8s([node])]
    assert got == expected


POOLS = {
    "h200-mig-1g.18gb": {"resource": "nvidia.com/mig-1g.18gb",
                         "node_selector": {"nvidia.com/mig.strategy": "mixed"}},
    "h200-shared": {"resource": "nvidia.com/gpu.shared",
                    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H200-SHARED"}},
}


@pytest.mark.parametrize("pool, node, limits, selector", [
    ("h200-mig-1g.18gb", "h1/mig-1g.18gb", {"nvidia.com/mig-1g.18gb": "1"},
     {"nvidia.com/mig.strategy": "mixed"}),
    ("h200-shared", "h1/shared", {"nvidia.com/gpu.shared": "1"},
     {"nvidia.com/gpu.product": "NVIDIA-H200-SHARED"}),
])
def test_a_job_asks_for_its_pools_resource(pool, node, limits, selector):
    settings = KubeSettings(**{**SETTINGS.__dict__, "pools": POOLS})
    job = valid(job_manifest(spec(placement=((node, (3,)),), gpus_per_node=1, pool=pool), settings))
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == limits
    assert pod["nodeSelector"].items() >= selector.items()
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["h1"]


def test_the_charts_documented_mig_and_shared_pools_reach_the_jobs():
    """The gpuPools example in helm/gpuhub/values.yaml, as an admin would uncomment it."""
    import json
    import re

    import yaml
    from test_helm_chart import CHART, config_files, manifests, merged

    text = open(f"{CHART}/values.yaml").read()
    block = text.split("mig.strategy=mixed) each profile is a resource of its own, and a pool:\n", 1)[1]
    block = block.split("      # GPU Hub never changes", 1)[0]
    example = yaml.safe_load("\n".join(re.sub(r"^\s*#   ", "", line) for line in block.splitlines()
                                       if re.match(r"^\s*#   ", line)))
    assert example == POOLS
    docs = manifests(merged({"jupyterhub": {"custom": {"gpuhub": {"gpuPools": example}}}}))
    jobs = json.loads(config_files(docs)["settings.json"])["KubernetesJobs"]
    assert jobs["pools"] == POOLS
