"""KubeGPUSpawner, offline: the pod manifests it builds for each kind of GPU
(validated against the Kubernetes OpenAPI schema), that one spawn's GPU
settings never reach the next, its start/stop/poll release handling, label
sanitizing, and the cluster hub config.

KubeSpawner loads a kubeconfig when it is made; a dummy one (a cluster at
https://127.0.0.1:1) is enough, since building manifests talks to nobody.
"""
from __future__ import annotations

import asyncio
import copy
import os
import re
import types

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from gpuspawner.spawner.kube import GPU_TRAITS, KubeGPUSpawner, label_value
from gpuspawner.spawner.options import GpuRequest

from hub_harness import data_dir_in

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
K8S_VERSION = kubernetes_validate.latest_version()
# Kubernetes' label value rule, written independently of the code under test.
LABEL_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOLS = {
    "a100": {"resource": "nvidia.com/gpu",
             "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
             "tolerations": [TOLERATION]},
    "h100": {"resource": "nvidia.com/gpu",
             "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
             "tolerations": [TOLERATION]},
    "a100-mig-1g": {"resource": "nvidia.com/mig-1g.10gb",
                    "node_selector": {"nvidia.com/mig.strategy": "mixed"},
                    "tolerations": [TOLERATION],
                    "priority_class_name": "gpuhub-mig"},
}

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: dummy
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: dummy
  user: {token: not-a-real-token}
contexts:
- name: dummy
  context: {cluster: dummy, user: dummy, namespace: gpuhub}
current-context: dummy
"""


@pytest.fixture(scope="module", autouse=True)
def kubeconfig(tmp_path_factory):
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(KUBECONFIG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(path))
        # kubernetes_asyncio read $KUBECONFIG when it was imported.
        mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in-cluster
        yield path


def run(coro):
    return asyncio.run(coro)


def make_spawner(config: Config | None = None, name="alice") -> KubeGPUSpawner:
    """Call inside a running loop (KubeSpawner makes its API client there)."""
    if config is None:
        config = Config()
        config.KubeGPUSpawner.gpu_pools = copy.deepcopy(POOLS)
    user = types.SimpleNamespace(name=name, id=7, url=f"/user/{name}/", groups=[])
    return KubeGPUSpawner(_mock=True, user=user, config=config)


def workload(pool: str, gpus: int, node="gpu-node-3", wid="w0123456789ab"):
    return {"id": wid, "state": "running", "team": "ml", "pool": pool, "gpus": gpus,
            "priority": "interactive",
            "placement": [{"node": node, "gpus": list(range(gpus))}]}


async def manifest(spawner: KubeGPUSpawner) -> dict:
    pod = await spawner.get_pod_manifest()
    async with ApiClient() as api:
        data = api.sanitize_for_serialization(pod)
    kubernetes_validate.validate(data, K8S_VERSION, strict=True)
    for value in data["metadata"]["labels"].values():
        assert LABEL_RE.match(value) and len(value) <= 63, value
    return data


def admitted(spawner, request: GpuRequest, w):
    """What admit() leaves on the spawner, then the settings applied."""
    spawner.gpu_request = request
    spawner.workload_id = w["id"] if w else None
    spawner.apply_gpu_settings(spawner.gpu_settings(request, w))


def gpu_parts(m: dict) -> dict:
    spec = m["spec"]
    c = spec["containers"][0]
    return {
        "limits": c.get("resources", {}).get("limits") or {},
        "requests": c.get("resources", {}).get("requests") or {},
        "node_selector": spec.get("nodeSelector") or {},
        "tolerations": spec.get("tolerations") or [],
        "affinity": spec.get("affinity"),
        "priority": spec.get("priorityClassName"),
        "labels": {k: v for k, v in m["metadata"]["labels"].items() if k.startswith("gpuhub.io/")},
        "annotations": {k: v for k, v in m["metadata"]["annotations"].items()
                        if k.startswith("gpuhub.io/")},
        "env": {e["name"]: e.get("value") for e in c.get("env") or []},
    }


# ---- one manifest per kind of GPU ---------------------------------------------
@pytest.mark.parametrize("pool,gpus,resource,selector,priority", [
    pytest.param("a100", 2, "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                 "gpuhub-interactive", id="a100x2"),
    pytest.param("a100-mig-1g", 1, "nvidia.com/mig-1g.10gb", {"nvidia.com/mig.strategy": "mixed"},
                 "gpuhub-mig", id="mig-1g"),
    pytest.param("h100", 8, "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "gpuhub-interactive", id="h100x8"),
])
def test_gpu_pod_manifest(pool, gpus, resource, selector, priority):
    async def go():
        s = make_spawner()
        admitted(s, GpuRequest("ml", pool, gpus), workload(pool, gpus))
        return gpu_parts(await manifest(s))

    p = run(go())
    assert p["limits"] == {resource: str(gpus)}
    assert p["requests"] == {resource: str(gpus)}
    assert p["node_selector"] == selector
    assert p["tolerations"] == [TOLERATION]
    terms = p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-3"]}]}]
    assert p["priority"] == priority
    assert p["labels"] == {"gpuhub.io/team": "ml", "gpuhub.io/pool": pool,
                           "gpuhub.io/workload": "w0123456789ab"}
    assert p["annotations"] == {"gpuhub.io/team": "ml", "gpuhub.io/pool": pool,
                                "gpuhub.io/workload": "w0123456789ab",
                                "gpuhub.io/gpus": str(gpus), "gpuhub.io/node": "gpu-node-3"}
    # The device plugin numbers the pod's GPUs itself: no host indices.
    assert "CUDA_VISIBLE_DEVICES" not in p["env"]
    assert p["env"]["GPUHUB_WORKLOAD_ID"] == "w0123456789ab"
    assert p["env"]["GPUHUB_TEAM"] == "ml"


def test_cpu_only_pod_manifest():
    async def go():
        s = make_spawner()
        admitted(s, GpuRequest("ml", "", 0), None)
        return gpu_parts(await manifest(s))

    p = run(go())
    assert not any("nvidia.com" in r for r in {**p["limits"], **p["requests"]})
    assert p["node_selector"] == {} and p["tolerations"] == [] and p["affinity"] is None
    assert p["priority"] is None
    assert p["labels"] == {"gpuhub.io/team": "ml"}
    assert p["annotations"] == {"gpuhub.io/team": "ml", "gpuhub.io/gpus": "0"}
    assert p["env"]["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert p["env"]["CUDA_VISIBLE_DEVICES"] == ""


def test_pool_not_configured_is_an_error():
    async def go():
        s = make_spawner()
        with pytest.raises(ValueError, match="'v100' is not configured"):
            s.gpu_settings(GpuRequest("ml", "v100", 1), workload("v100", 1))
    run(go())


@pytest.mark.parametrize("pools,message", [
    ({"a100": {"node_selectors": {"x": "y"}}}, "unknown keys"),
    ({"a100": "nvidia.com/gpu"}, "must be a dict"),
    ({"a100": {"tolerations": {"key": "x"}}}, "must be a list"),
])
def test_gpu_pools_are_checked(pools, message):
    async def go():
        s = make_spawner()
        with pytest.raises(TraitError, match=message):
            s.gpu_pools = pools
    run(go())


def test_gpu_settings_is_pure():
    async def go():
        s = make_spawner()
        before = {n: copy.deepcopy(getattr(s, n)) for n in GPU_TRAITS}
        request, w = GpuRequest("ml", "a100", 2), workload("a100", 2)
        first = s.gpu_settings(request, w)
        assert s.gpu_settings(request, w) == first
        assert {n: getattr(s, n) for n in GPU_TRAITS} == before
        first["node_selector"]["x"] = "y"  # the result is not the config's objects
        first["tolerations"].append({"key": "z"})
        assert s.gpu_pools["a100"]["node_selector"] == POOLS["a100"]["node_selector"]
        assert s.gpu_pools["a100"]["tolerations"] == [TOLERATION]
    run(go())


def test_pinning_and_priority_can_be_turned_off():
    async def go():
        c = Config()
        c.KubeGPUSpawner.gpu_pools = {"a100": {"node_selector": {"pool": "a100"}}}
        c.KubeGPUSpawner.pin_to_scheduled_node = False
        c.KubeGPUSpawner.priority_class_names = {}
        c.KubeSpawner.priority_class_name = "site-default"
        s = make_spawner(c)
        admitted(s, GpuRequest("ml", "a100", 1), workload("a100", 1))
        return gpu_parts(await manifest(s))

    p = run(go())
    assert p["limits"] == {"nvidia.com/gpu": "1"}  # the default resource
    assert p["affinity"] is None
    assert p["priority"] == "site-default"


# ---- nothing of one spawn reaches the next -------------------------------------
SITE = {
    "node_selector": {"hub.jupyter.org/node-purpose": "user"},
    "tolerations": [{"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user",
                     "effect": "NoSchedule"}],
    "node_affinity_required": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}],
    "extra_labels": {"site": "lab"},
    "extra_resource_limits": {"example.com/fpga": "0"},
}


def site_config() -> Config:
    c = Config()
    c.KubeGPUSpawner.gpu_pools = copy.deepcopy(POOLS)
    for name, value in SITE.items():
        setattr(c.KubeSpawner, name, copy.deepcopy(value))
    return c


def test_gpu_settings_merge_with_configured_values():
    async def go():
        s = make_spawner(site_config())
        admitted(s, GpuRequest("ml", "h100", 8), workload("h100", 8, node="h100-7"))
        return gpu_parts(await manifest(s))

    p = run(go())
    assert p["limits"] == {"example.com/fpga": "0", "nvidia.com/gpu": "8"}
    assert p["node_selector"] == {**SITE["node_selector"], **POOLS["h100"]["node_selector"]}
    assert p["tolerations"] == SITE["tolerations"] + [TOLERATION]
    # Terms are ORed: the pin is ANDed into the configured term, not added beside it.
    terms = p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h100-7"]}]}]
    assert p["labels"]["gpuhub.io/pool"] == "h100"


def test_failed_gpu_spawn_does_not_leak_into_next_cpu_spawn():
    config = site_config()

    async def go():
        s = make_spawner(config)
        other = make_spawner(config, name="bob")  # same configured objects
        clean = gpu_parts(await manifest(s))
        admitted(s, GpuRequest("ml", "a100", 2), workload("a100", 2))
        # KubeSpawner's own overrides (profiles, group overrides) merge in place.
        s._apply_overrides({"node_selector": {"extra": "override"},
                            "extra_labels": {"profile": "big"}})
        gpu = gpu_parts(await manifest(s))
        assert gpu["limits"]["nvidia.com/gpu"] == "2"
        assert gpu["node_selector"]["extra"] == "override"
        # The spawn failed: JupyterHub clears the state, then a CPU spawn.
        s.clear_state()
        assert s.gpu_request is None and s.workload_id is None
        restored = {n: getattr(s, n) for n in SITE}
        admitted(s, GpuRequest("ml", "", 0), None)
        cpu = gpu_parts(await manifest(s))
        return clean, cpu, gpu_parts(await manifest(other)), restored

    clean, cpu, other, restored = run(go())
    assert restored == SITE
    assert "nvidia.com/gpu" not in cpu["limits"] and "nvidia.com/gpu" not in cpu["requests"]
    assert cpu["limits"] == clean["limits"] == {"example.com/fpga": "0"}
    assert cpu["node_selector"] == SITE["node_selector"]
    assert cpu["tolerations"] == SITE["tolerations"]
    assert cpu["affinity"] == clean["affinity"]  # the site's zone only, no hostname pin
    assert "kubernetes.io/hostname" not in str(cpu["affinity"])
    assert cpu["priority"] is None
    assert cpu["labels"] == {"gpuhub.io/team": "ml"}
    assert "gpuhub.io/pool" not in cpu["annotations"]
    # Another user's spawner from the same config never saw any of it.
    other.pop("env"), clean.pop("env")
    assert other == clean
    # Nor did the configuration.
    for name, value in SITE.items():
        assert config.KubeSpawner[name] == value


def test_plain_kubespawner_keeps_overrides_across_spawns():
    """Why clear_state restores: KubeSpawner's own overrides stay on the
    spawner object, which JupyterHub reuses for the server's next spawn.
    If kubespawner changes this, the restore is harmless."""
    async def go():
        c = Config()
        c.KubeSpawner.node_selector = {"a": "1"}
        plain = KubeSpawner(_mock=True, config=c)
        ours = make_spawner(site_config())
        for s in (plain, ours):
            s._apply_overrides({"node_selector": {"gpu": "yes"}})
            s.clear_state()
        return plain.node_selector, ours.node_selector

    plain, ours = run(go())
    assert plain == {"a": "1", "gpu": "yes"}
    assert ours == SITE["node_selector"]


# ---- start / stop / poll, with KubeSpawner's Kubernetes calls faked --------------
class Fake:
    def __init__(self, spawner, w, fail=None):
        self.spawner, self.w, self.fail = spawner, w, fail
        self.released: list = []
        self.manifests: list = []
        self.timeout_seen = None

    async def admit(self):
        s = self.spawner
        s.forget_stop()  # as the real admit: a new run
        s.gpu_request = GpuRequest("ml", self.w["pool"], self.w["gpus"]) if self.w else \
            GpuRequest("ml", "", 0)
        s.workload_id = self.w["id"] if self.w else None
        return self.w

    async def release(self, reason, wid=None):
        wid = wid or self.spawner.workload_id
        self.spawner.workload_id = None
        if wid:
            self.released.append((wid, reason))

    async def _start(self):
        self.timeout_seen = self.spawner.start_timeout
        self.manifests.append(gpu_parts(await manifest(self.spawner)))
        if self.fail:
            raise self.fail
        return "http://10.0.0.5:8888"


def faked(spawner, w, fail=None) -> Fake:
    f = Fake(spawner, w, fail)
    spawner.admit, spawner.release, spawner._start = f.admit, f.release, f._start
    return f


def test_start_applies_gpu_settings_and_bounds_the_pod_wait():
    async def go():
        s = make_spawner()
        s.pod_start_timeout = 300
        f = faked(s, workload("a100", 2))
        url = await s.start()
        return s, f, url

    s, f, url = run(go())
    assert url == "http://10.0.0.5:8888"
    assert f.manifests[0]["limits"] == {"nvidia.com/gpu": "2"}
    assert f.timeout_seen == 300 and s.start_timeout == 24 * 3600
    assert f.released == []


def test_a_server_mounts_its_teams_space_and_the_next_spawn_does_not_keep_it():
    async def go():
        config = Config()
        config.KubeGPUSpawner.gpu_pools = copy.deepcopy(POOLS)
        config.KubeGPUSpawner.team_space_claim = "gpuhub-team-{team}"
        s = make_spawner(config)
        pods = []

        async def capture():
            pods.append(await manifest(s))  # validated against the Kubernetes schema
            return "http://10.0.0.5:8888"
        for claim in ("gpuhub-team-{team}", ""):
            s.team_space_claim = claim
            faked(s, workload("a100", 1))
            s._start = capture
            await s.start()
            s.clear_state()
        return pods

    with_space, without = run(go())
    spec = with_space["spec"]
    assert {"name": "gpuhub-team-space",
            "persistentVolumeClaim": {"claimName": "gpuhub-team-ml"}} in spec["volumes"]
    container = spec["containers"][0]
    assert {"name": "gpuhub-team-space", "mountPath": "/team"} in container["volumeMounts"]
    assert {"name": "GPUHUB_TEAM_DIR", "value": "/team"} in container["env"]
    assert "gpuhub-team-space" not in str(without["spec"]) and "GPUHUB_TEAM_DIR" not in str(without)


def test_failed_start_releases_and_next_spawn_is_clean():
    async def go():
        s = make_spawner(site_config())
        f = faked(s, workload("a100", 2), fail=TimeoutError("pod did not start"))
        with pytest.raises(TimeoutError):
            await s.start()
        released = list(f.released)
        s.clear_state()  # JupyterHub's stop, then the next spawn's start
        f = faked(s, None)
        await s.start()
        return released, f

    released, f = run(go())
    assert released == [("w0123456789ab", "the server failed to start")]
    cpu = f.manifests[0]
    assert cpu["limits"] == {"example.com/fpga": "0"}
    assert cpu["node_selector"] == SITE["node_selector"]
    assert cpu["tolerations"] == SITE["tolerations"]
    assert "kubernetes.io/hostname" not in str(cpu["affinity"])


def test_unconfigured_pool_fails_the_start_and_releases():
    async def go():
        s = make_spawner()
        f = faked(s, workload("v100", 1))
        with pytest.raises(web.HTTPError) as e:
            await s.start()
        return f, e.value

    f, err = run(go())
    assert err.status_code == 500 and "v100" in err.log_message
    assert f.released == [("w0123456789ab", "the server failed to start")]
    assert f.manifests == []  # no pod was asked for


def test_stop_and_poll_release(monkeypatch):
    stopped = []

    async def kube_stop(self, now=False):
        stopped.append(self.start_timeout)

    pod_status = {"value": None}

    async def kube_poll(self):
        return pod_status["value"]

    monkeypatch.setattr(KubeSpawner, "stop", kube_stop)
    monkeypatch.setattr(KubeSpawner, "poll", kube_poll)

    async def go():
        s = make_spawner()
        s.pod_start_timeout = 120
        f = faked(s, workload("a100", 1))
        await s.start()
        await s.stop()
        out = [list(f.released), list(stopped)]
        # the pod vanished (evicted, deleted by hand)
        f.released.clear()
        await s.start()
        pod_status["value"] = 1
        out.append((await s.poll(), list(f.released)))
        # GPUs reclaimed by the scheduler: the server is stopped
        f.released.clear()
        pod_status["value"] = None
        await s.start()

        async def lost():
            return "its GPUs were taken back (preempted: reclaimed)"

        s.workload_lost = lost
        out.append((await s.poll(), list(f.released)))
        # still running
        f.released.clear()
        await s.start()

        async def fine():
            return None

        s.workload_lost = fine
        out.append((await s.poll(), list(f.released)))
        return out

    on_stop, timeouts, gone, lost, running = run(go())
    # The service's record of each says why, as the hub's page does.
    assert on_stop == [("w0123456789ab", "the server stopped: the hub stopped it (the hub was "
                                         "shut down, or its start failed)")]
    assert timeouts == [120]
    assert gone == (1, [("w0123456789ab", "the server is gone (1): it exited with status 1 "
                                          "(it crashed; its log is the hub's)")])
    assert lost == (1, [("w0123456789ab", "the server stopped: its GPUs were taken back "
                                          "(preempted: reclaimed)")])
    assert running == (None, [])


def test_progress_reports_admission_then_pod_events():
    async def go():
        s = make_spawner()
        s.events_enabled = False
        s._progress_messages = [{"progress": 20, "message": "waiting"},
                                {"progress": 50, "message": "got 1 GPU"}]
        s._pod_starting = True
        return [m async for m in s.progress()]

    assert [m["message"] for m in run(go())] == ["waiting", "got 1 GPU"]


def test_options_form_is_the_gpu_form():
    async def go():
        return make_spawner()

    s = run(go())
    assert s.options_form == s._gpu_options_form
    assert s.start_timeout == 24 * 3600


# ---- label values ---------------------------------------------------------------
@pytest.mark.parametrize("value", ["ml", "a100-mig-1g", "w0123456789ab", "A.b_c-9", "x" * 63, ""])
def test_valid_label_values_are_kept(value):
    assert label_value(value) == value


@pytest.mark.parametrize("value", [
    "ML Research", "-team-", "x" * 64, "data/science", "ümlaut", "{gpu}", "___", "a b",
    "team." + "y" * 80 + "!", " ", "🚀 rocket",
])
def test_invalid_label_values_are_sanitized(value):
    out = label_value(value)
    assert LABEL_RE.match(out) and 0 < len(out) <= 63, out
    assert label_value(value) == out  # deterministic


def test_sanitized_label_values_stay_distinct():
    values = ["a b", "a-b", "a/b", "a  b", "x" * 64, "x" * 65, "x" * 63 + "!"]
    outs = [label_value(v) for v in values]
    assert len(set(outs)) == len(values)
    assert label_value("ML Research").startswith("ML-Research-")
    assert label_value(None) == ""


def test_odd_team_names_in_labels_and_annotations():
    async def go():
        s = make_spawner()
        team = "Data Science {gpu} " + "z" * 60
        w = dict(workload("a100", 1), team=team)
        admitted(s, GpuRequest(team, "a100", 1), w)
        return team, gpu_parts(await manifest(s))

    team, p = run(go())
    assert p["labels"]["gpuhub.io/team"] == label_value(team)
    assert p["annotations"]["gpuhub.io/team"] == team  # unsanitized, braces kept


# ---- the cluster hub config ----------------------------------------------------
HUB_ENV = {
    "GPUHUB_HUB_DB_URL": "postgresql+psycopg://jupyterhub:pw@postgres:5432/jupyterhub",
    "GPUHUB_SPAWNER_TOKEN": "spawner-token-123",
    "GPUHUB_SERVICE_API_TOKEN": "service-token-456",
    "GPUHUB_NOTEBOOK_IMAGE": "registry.example.com/gpuhub/notebook:1.2",
}


def load_config(path: str) -> Config:
    c = Config()
    ns = {"c": c, "get_config": lambda: c, "__file__": path}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), ns)
    return c


KUBE_CONFIG = os.path.join(ROOT, "hub_config", "kubernetes", "jupyterhub_config.py")


def test_kubernetes_hub_config_loads(monkeypatch):
    for k, v in HUB_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GPUHUB_SERVICE_URL", raising=False)
    c = load_config(KUBE_CONFIG)
    assert c.JupyterHub.spawner_class == "gpuspawner.spawner.kube.KubeGPUSpawner"
    assert c.JupyterHub.db_url == HUB_ENV["GPUHUB_HUB_DB_URL"]
    assert c.KubeSpawner.image == HUB_ENV["GPUHUB_NOTEBOOK_IMAGE"]
    services = {s["name"]: s for s in c.JupyterHub.services}
    # the chart's Service name and port (helm/gpuhub: service.port)
    assert services["gpuhub"]["url"] == "http://gpuhub-service:10101"
    assert "command" not in services["gpuhub"]  # external: its own Deployment
    assert services["gpuhub"]["api_token"] == "service-token-456"
    assert services["gpuhub-spawner"]["api_token"] == "spawner-token-123"
    assert c.GPUSpawnerMixin.gpuhub_token == "spawner-token-123"
    assert c.GPUSpawnerMixin.gpuhub_api_url == \
        "http://gpuhub-service:10101/services/gpuhub/api/v1"
    assert c.ConfigurableHTTPProxy.should_start is False
    assert c.JupyterHub.cleanup_servers is False
    pools = c.KubeGPUSpawner.gpu_pools
    assert {p["resource"] for p in pools.values()} == {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"}
    assert len(pools) == 3
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpuhub-spawner"]["services"] == ["gpuhub-spawner"]
    assert "custom:gpuhub:admin" in roles["gpuhub-spawner"]["scopes"]


def test_kubernetes_hub_config_needs_its_secrets(monkeypatch):
    for k, v in HUB_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GPUHUB_SPAWNER_TOKEN")
    with pytest.raises(RuntimeError, match="GPUHUB_SPAWNER_TOKEN"):
        load_config(KUBE_CONFIG)


def test_kubernetes_hub_config_scopes_match_the_embedded_hub(monkeypatch, tmp_path):
    for k, v in HUB_ENV.items():
        monkeypatch.setenv(k, v)
    # The hub config refuses a data directory users' accounts cannot pass
    # through to; pytest's own are 0700 (as root, when isolating).
    monkeypatch.setenv("GPUHUB_DATA_DIR", data_dir_in(str(tmp_path)))
    kube = load_config(KUBE_CONFIG)
    embedded = load_config(os.path.join(ROOT, "hub_config", "jupyterhub_config.py"))
    assert kube.JupyterHub.custom_scopes == embedded.JupyterHub.custom_scopes
    assert kube.JupyterHub.load_roles == embedded.JupyterHub.load_roles
    assert kube.Spawner.server_token_scopes == embedded.Spawner.server_token_scopes
    k_svc = {s["name"]: s for s in kube.JupyterHub.services}
    e_svc = {s["name"]: s for s in embedded.JupyterHub.services}
    assert k_svc["gpuhub"]["oauth_client_allowed_scopes"] == \
        e_svc["gpuhub"]["oauth_client_allowed_scopes"]


def test_kubernetes_hub_config_pools_make_valid_pods(monkeypatch):
    for k, v in HUB_ENV.items():
        monkeypatch.setenv(k, v)
    c = load_config(KUBE_CONFIG)

    async def go():
        out = {}
        for pool in c.KubeGPUSpawner.gpu_pools:
            s = make_spawner(c)
            admitted(s, GpuRequest("ml", pool, 1), workload(pool, 1))
            out[pool] = await manifest(s)  # validated
        return out

    pods = run(go())
    for pool, m in pods.items():
        spec = m["spec"]
        assert spec["priorityClassName"] == "gpuhub-interactive"
        assert spec["containers"][0]["image"] == HUB_ENV["GPUHUB_NOTEBOOK_IMAGE"]
        assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"].startswith("home-")
        assert m["metadata"]["labels"]["gpuhub.io/pool"] == pool
