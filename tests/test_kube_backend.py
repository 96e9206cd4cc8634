"""The Kubernetes backend.

- Manifests: every generated object is validated against the Kubernetes
  OpenAPI schema (kubernetes-validate, strict), and checked for what an
  operator would notice (GPU limits, pinned nodes, grace, deadline, gang
  rendezvous, isolation).
- Status and inventory: tables from API JSON to exits and nodes.
- The backend's bookkeeping against ``FakeKube``: an in-memory stand-in for
  the API server that stores what is created and deleted and nothing more —
  no controller runs, so the tests set a Job's status the way the Job
  controller would.
- The API layer (``KubeApi``) against a local HTTP server that answers the
  Kubernetes REST paths: the real ``kubernetes_asyncio`` client sends real
  requests, the server records them.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from dataclasses import replace
from urllib.parse import parse_qs

import kubernetes_validate
import pytest
import yaml
from tornado import httpserver, web

from gpuspawner import cli
from gpuspawner.backends.base import EXITED, LOST, STOPPED, TIME_LIMIT, LaunchSpec
from gpuspawner.backends.kubernetes.manifests import (KUEUE_QUEUE, KubeSettings, job_manifest, job_name,
                                                kueue_queues, rendezvous_service, team_namespace)
from gpuspawner.backends.kubernetes.status import attempt_exit, nodes_from_k8s
from gpuspawner.backends.kubernetes.api import KubeApi
from gpuspawner.backends.kubernetes.backend import KubernetesBackend
from gpuspawner.scheduler.model import Quota, Team
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.service.workloads import queries

K8S = kubernetes_validate.latest_version()
POOLS = {"a100": {"resource": "nvidia.com/gpu",
                  "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]},
         "a100-mig-1g.10gb": {"resource": "nvidia.com/mig-1g.10gb"}}
SETTINGS = KubeSettings(namespace="gpuhub-jobs", image="registry.example/gpuhub-runner:1.0",
                        pools=POOLS, priority_class_names={"batch": "gpuhub-batch"},
                        checkpoint_claim="gpuhub-checkpoints", workspace_claim="home",
                        workspace_mount="/home")


def spec(placement=(("gpu-1", (0, 1)),), gpus_per_node=2, **kw) -> LaunchSpec:
    base = dict(workload_id="w0123abcd", attempt=1, argv=("python", "train.py", "--epochs", "3"),
                attempt_dir="", cwd="/home/alice/project", env={"GPUHUB_TEAM": "vision"},
                time_limit=7200,
                grace_period=45, placement=placement, pool="a100", team="vision",
                user="alice@example.org", priority="batch", gpus_per_node=gpus_per_node)
    base.update(kw)
    return LaunchSpec(**base)


def valid(obj: dict) -> dict:
    kubernetes_validate.validate(obj, K8S, strict=True)
    return obj


# ---- manifests --------------------------------------------------------------------------

def test_single_node_job():
    job = valid(job_manifest(spec(), SETTINGS))
    pod = job["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert job["metadata"]["name"] == "gpuhub-w0123abcd-1"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert c["command"] == ["python", "train.py", "--epochs", "3"]
    assert pod["terminationGracePeriodSeconds"] == 45
    assert job["spec"]["activeDeadlineSeconds"] == 7200 and job["spec"]["backoffLimit"] == 0
    assert pod["restartPolicy"] == "Never" and pod["priorityClassName"] == "gpuhub-batch"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-1"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GPUHUB_CHECKPOINT_DIR"] == "/checkpoints/w0123abcd" and "RANK" not in env
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]] == \
        ["gpuhub-checkpoints", "home"]
    assert c["workingDir"] == "/home/alice/project"
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/checkpoints", "/home"}
    # the user's address is not a valid label value: cleaned, the original in an annotation
    assert job["metadata"]["labels"]["gpuhub.jupyter.org/user"].startswith("alice-example.org-")
    assert job["metadata"]["annotations"]["gpuhub.jupyter.org/user"] == "alice@example.org"
    assert rendezvous_service(spec(), SETTINGS) is None


@pytest.mark.parametrize("service_account, mounted", [
    ("", False),                 # the namespace's default account: its token stays out
    ("trainer", None),           # one an admin chose: Kubernetes' default, as configured
])
def test_a_job_gets_no_cluster_credential_it_was_not_given(service_account, mounted):
    """Only the job's own variables and its user's token (from the spec):
    none of the service's environment, and no service-account token."""
    job = valid(job_manifest(spec(env={"GPUHUB_TEAM": "vision", "GPUHUB_TOKEN": "alices"}),
                             replace(SETTINGS, service_account=service_account)))
    pod = job["spec"]["template"]["spec"]
    assert pod.get("automountServiceAccountToken") is mounted
    assert pod.get("serviceAccountName") == (service_account or None)
    names = {e["name"] for e in pod["containers"][0]["env"]}
    assert names == {"GPUHUB_TEAM", "GPUHUB_TOKEN", "GPUHUB_WORKLOAD_ID", "GPUHUB_ATTEMPT",
                     "GPUHUB_CHECKPOINT_DIR"}


def test_gang_is_an_indexed_job_with_rendezvous():
    gang = spec(placement=(("gpu-1", (0, 1, 2, 3)), ("gpu-2", (0, 1, 2, 3))), gpus_per_node=4)
    job = valid(job_manifest(gang, SETTINGS))
    svc = valid(rendezvous_service(gang, SETTINGS))
    s, pod = job["spec"], job["spec"]["template"]["spec"]
    assert (s["completions"], s["parallelism"], s["completionMode"]) == (2, 2, "Indexed")
    assert pod["subdomain"] == svc["metadata"]["name"] == job["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == "gpuhub-w0123abcd-1-0.gpuhub-w0123abcd-1"
    assert env["WORLD_SIZE"]["value"] == "2"
    assert "job-completion-index" in env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"] == "kubernetes.io/hostname"
    values = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert values == ["gpu-1", "gpu-2"]


def test_cpu_only_mig_and_kueue_variants():
    cpu = valid(job_manifest(spec(placement=(), gpus_per_node=0, time_limit=None), SETTINGS))
    assert "limits" not in cpu["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert "activeDeadlineSeconds" not in cpu["spec"]
    mig = valid(job_manifest(spec(placement=(("gpu-3/mig-1g.10gb", (5,)),), gpus_per_node=1,
                                  pool="a100-mig-1g.10gb"), SETTINGS))
    pod = mig["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-3"]
    per_team = KubeSettings(**{**SETTINGS.__dict__, "team_namespaces": True, "kueue": True})
    job = valid(job_manifest(spec(), per_team))
    assert job["metadata"]["namespace"] == "gpuhub-jobs-vision"
    assert job["metadata"]["labels"][KUEUE_QUEUE] == "team-vision"


@pytest.mark.parametrize("cpus, memory, gpus, expected", [
    pytest.param(1.0, 8 << 30, 2, {"requests": {"cpu": "1", "memory": "8Gi"},
                                   "limits": {"cpu": "1", "memory": "8Gi", "nvidia.com/gpu": "2"}},
                 id="a job's default with its GPUs"),
    pytest.param(0.5, 2 << 30, 0, {"requests": {"cpu": "500m", "memory": "2Gi"},
                                   "limits": {"cpu": "500m", "memory": "2Gi"}},
                 id="half a CPU, no GPU"),
    pytest.param(2.25, 1536 << 20, 0, {"requests": {"cpu": "2250m", "memory": "1536Mi"},
                                       "limits": {"cpu": "2250m", "memory": "1536Mi"}},
                 id="fractions and MiB"),
    pytest.param(None, None, 0, {"requests": {"cpu": "1", "memory": "4Gi"}},
                 id="an attempt stored before requests: the site's requests"),
])
def test_a_pod_asks_for_the_cpus_and_memory_its_workload_asked_for(cpus, memory, gpus, expected):
    """What the workload asked for is the pod's request and its limit, so
    Kueue and the kubelet count it and the container is held to it."""
    placement = (("gpu-1", tuple(range(gpus))),) if gpus else ()
    job = valid(job_manifest(spec(placement=placement, gpus_per_node=gpus, cpus=cpus,
                                  memory=memory), SETTINGS))
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == expected


def test_service_interpreter_becomes_the_images_python():
    import sys
    job = job_manifest(spec(argv=(sys.executable, "-m", "papermill", "nb.ipynb")), SETTINGS)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:3] == \
        ["python3", "-m", "papermill"]


def test_unknown_pool_is_refused_by_name():
    with pytest.raises(ValueError, match="pool 'h100' is not in KubernetesBackend.pools"):
        job_manifest(spec(pool="h100"), SETTINGS)


def test_team_namespace_isolation():
    settings = KubeSettings(namespace="gpuhub", team_namespaces=True, hub_namespace="hub")
    ns, policy = [valid(o) for o in team_namespace(Team("nlp"), settings)]
    assert ns["metadata"]["name"] == policy["metadata"]["namespace"] == "gpuhub-nlp"
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {}}, {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "hub"}}}]
    assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Ingress"]


def test_kueue_queues_carry_the_quotas():
    teams = [Team("vision", {"a100": Quota(8, 4, None, cpus=64, memory=512 << 30)}),
             Team("nlp", {"a100": Quota(4, None, 2)})]
    objs = kueue_queues(teams, {"a100": 16, "a100-mig-1g.10gb": 7}, SETTINGS)
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ResourceFlavor", "ResourceFlavor", "ClusterQueue", "LocalQueue",
                     "ClusterQueue", "LocalQueue"]
    nlp = objs[2]
    assert nlp["metadata"]["name"] == "team-nlp" and nlp["spec"]["cohort"] == "gpuhub"
    # One group covers what pods ask for: cpu, memory and every pool's GPU resource.
    [group] = nlp["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu",
                                         "nvidia.com/mig-1g.10gb"]
    a100, mig = ({r["name"]: r for r in f["resources"]} for f in group["flavors"])
    assert a100["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 4,
                                      "lendingLimit": 2}
    assert a100["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 0
    assert mig["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 0 == mig["nvidia.com/gpu"]["nominalQuota"]
    # nlp has no CPU or memory ceiling: quotas too large to bind
    assert (a100["cpu"]["nominalQuota"], a100["memory"]["nominalQuota"]) == ("100k", "1Pi")
    # vision's ceilings are nominal quotas it may not borrow past
    [vision] = objs[4]["spec"]["resourceGroups"]
    v100 = {r["name"]: r for r in vision["flavors"][0]["resources"]}
    assert v100["nvidia.com/gpu"]["borrowingLimit"] == 4
    assert v100["cpu"] == {"name": "cpu", "nominalQuota": "64", "borrowingLimit": "0"}
    assert v100["memory"] == {"name": "memory", "nominalQuota": "512Gi", "borrowingLimit": "0"}
    # every flavor lists the group's resources in its order (Kueue's rule)
    for f in group["flavors"] + vision["flavors"]:
        assert [r["name"] for r in f["resources"]] == group["coveredResources"]


# ---- status and inventory ---------------------------------------------------------------

def cond(kind, reason="", at="2026-11-30T01:00:00Z"):
    return {"type": kind, "status": "True", "reason": reason, "lastTransitionTime": at}


def pod(exit_code=None, reason=None, disrupted=False):
    status: dict = {"containerStatuses": []}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    if reason:
        status["reason"] = reason
    if disrupted:
        status["conditions"] = [cond("DisruptionTarget", "DeletionByTaintManager")]
    return {"metadata": {"name": "p"}, "status": status}


T = 1_796_000_000.0


@pytest.mark.parametrize(
    "job, pods, stopped, expected",
    [
        pytest.param({"status": {"active": 1}}, [pod()], False, None, id="running"),
        pytest.param({"status": {"conditions": [cond("Complete")]}}, [pod(0)], False,
                     (EXITED, 0), id="succeeded"),
        pytest.param({"status": {"conditions": [cond("Failed", "BackoffLimitExceeded")]}},
                     [pod(3)], False, (EXITED, 3), id="exit-code"),
        pytest.param({"status": {"conditions": [cond("Failed", "DeadlineExceeded")]}},
                     [pod()], False, (TIME_LIMIT, None), id="time-limit"),
        pytest.param({"status": {"conditions": [cond("Failed", "BackoffLimitExceeded")]}},
                     [pod(137, reason="Evicted")], False, (LOST, None), id="evicted"),
        pytest.param({"status": {"conditions": [cond("Failed", "PodFailurePolicy")]}},
                     [pod(143, disrupted=True)], False, (LOST, None), id="node-failure"),
        pytest.param({"status": {"conditions": [cond("Failed", "BackoffLimitExceeded")]}},
                     [pod(143)], True, (STOPPED, 143), id="stopped-by-us"),
        pytest.param(None, [], True, (STOPPED, None), id="deleted-by-us"),
        pytest.param(None, [], False, (LOST, None), id="deleted-by-someone-else"),
    ],
)
def test_attempt_exit(job, pods, stopped, expected):
    x = attempt_exit("w1", 0, job, pods, stopped, T)
    assert (None if x is None else (x.reason, x.returncode)) == expected


def k8s_node(name, allocatable, product="NVIDIA-A100-SXM4-80GB", ready=True, cordoned=False,
             zone=None, capacity=None):
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": {"cpu": "64", **allocatable},
                       "capacity": {"cpu": "64", **(capacity or allocatable)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_nodes_from_capacity_and_feature_discovery_labels():
    nodes = nodes_from_k8s([
        k8s_node("gpu-1", {"nvidia.com/gpu": "8"}, zone="eu-1a"),
        k8s_node("gpu-2", {"nvidia.com/gpu": "8"}, ready=False),
        k8s_node("gpu-3", {"nvidia.com/gpu": "4"}, cordoned=True),
        k8s_node("gpu-4", {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu": "0"}),
        k8s_node("cpu-1", {}, product="none"),
        k8s_node("gpu-5", {"nvidia.com/gpu": "6"}, capacity={"nvidia.com/gpu": "8"}),
    ])
    got = [(n.name, n.pool, n.gpus, n.healthy, n.drained) for n in nodes]
    assert got == [("gpu-1", "a100-sxm4-80gb", 8, True, False),
                   ("gpu-2", "a100-sxm4-80gb", 8, False, False),
                   ("gpu-3", "a100-sxm4-80gb", 4, True, True),
                   ("gpu-4/mig-1g.10gb", "a100-sxm4-80gb-mig-1g.10gb", 7, True, False),
                   ("gpu-5", "a100-sxm4-80gb", 8, True, False)]
    assert nodes[0].topology == {"zone": "eu-1a"}
    # two GPUs the device plugin no longer offers (XID errors): unhealthy slots
    assert nodes[-1].unhealthy_gpus == {6, 7} and len(nodes[-1].usable_gpus()) == 6


# ---- the backend against an in-memory API ------------------------------------------------

class FakeKube:
    """Stores objects; runs no controller. Tests play the Job controller."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.nodes = [k8s_node("gpu-1", {"nvidia.com/gpu": "8"})]
        self.calls: list[tuple] = []
        self.refuse = ""
        self.logs: dict[str, str] = {}

    async def create(self, manifest, exist_ok=False):
        if self.refuse:
            raise self.refuse if isinstance(self.refuse, BaseException) else \
                RuntimeError(self.refuse)
        m = manifest["metadata"]
        key = (manifest["kind"], m["namespace"], m["name"])
        if key in self.objects:
            if exist_ok:
                return
            raise RuntimeError(f"409 {key} already exists")
        self.calls.append(("create", manifest["kind"], m["name"]))
        self.objects[key] = json.loads(json.dumps(manifest))

    async def delete_job(self, name, namespace, grace_seconds):
        self.calls.append(("delete", name, grace_seconds))
        self.objects.pop(("Job", namespace, name), None)

    async def delete_service(self, name, namespace):
        self.calls.append(("delete-service", name))
        self.objects.pop(("Service", namespace, name), None)

    async def delete_deployment(self, name, namespace, grace_seconds):
        self.calls.append(("delete-deployment", name, grace_seconds))
        self.objects.pop(("Deployment", namespace, name), None)

    async def delete_config_map(self, name, namespace):
        self.calls.append(("delete-config-map", name))
        self.objects.pop(("ConfigMap", namespace, name), None)

    async def list_jobs(self):
        return [o for (kind, _, _), o in self.objects.items() if kind == "Job"]

    async def list_deployments(self):
        return [o for (kind, _, _), o in self.objects.items() if kind == "Deployment"]

    async def list_pods(self):
        return [o for (kind, _, _), o in self.objects.items() if kind == "Pod"]

    async def list_nodes(self):
        return self.nodes

    async def list_kind(self, kind):
        return await getattr(self, f"list_{kind}")(), ""

    async def pod_log(self, name, namespace):
        return self.logs.get(name, "")

    # what the Job controller and kubelet would do
    def finish(self, name, namespace="gpuhub-jobs", code=0, reason="BackoffLimitExceeded"):
        job = self.objects[("Job", namespace, name)]
        kind = "Complete" if code == 0 else "Failed"
        job["status"] = {"conditions": [cond(kind, "" if code == 0 else reason)]}
        pod_name = f"{name}-abcde"
        self.objects[("Pod", namespace, pod_name)] = {
            "metadata": {"name": pod_name, "namespace": namespace,
                         "labels": {"job-name": name, "app.kubernetes.io/managed-by": "gpuhub"}},
            "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code}}}]}}
        self.logs[pod_name] = f"epoch 3 done, exit {code}\n"


class Clock:
    def __init__(self):
        self.t = T

    def __call__(self):
        return self.t


def run(coro):
    return asyncio.run(coro)


def test_backend_runs_reports_once_keeps_logs_and_cleans_up(tmp_path):
    async def scenario():
        api, clock = FakeKube(), Clock()
        b = KubernetesBackend(SETTINGS, api, clock=clock)
        s = spec(attempt_dir=str(tmp_path / "attempt-1"))
        name = b.start(s).ref
        await b.settle()
        assert ("create", "Job", name) in api.calls
        assert b.poll() == []            # not listed since it was created
        clock.t += 1
        await b.refresh()
        assert b.poll() == [] and b.running() == {("w0123abcd", 1)}
        api.finish(name, code=3)
        clock.t += 1
        await b.refresh()
        [x] = b.poll()
        assert (x.reason, x.returncode) == (EXITED, 3)
        await b.settle()
        assert b.poll() == []            # once
        assert open(tmp_path / "attempt-1" / "output.log").read() == "epoch 3 done, exit 3\n"
        assert ("delete", name, 0) in api.calls and ("Job", "gpuhub-jobs", name) not in api.objects
    run(scenario())


def test_stop_deletes_with_the_grace_period_and_reports_stopped():
    async def scenario():
        api, clock = FakeKube(), Clock()
        b = KubernetesBackend(SETTINGS, api, clock=clock)
        gang = spec(placement=(("gpu-1", (0,)), ("gpu-2", (0,))), gpus_per_node=1)
        name = b.start(gang).ref
        await b.settle()
        assert [c[1] for c in api.calls if c[0] == "create"] == ["Service", "Job"]
        b.stop("w0123abcd", 1, 45)
        b.stop("w0123abcd", 1, 45)       # a second stop sends nothing more
        await b.settle()
        assert [c for c in api.calls if c[0] == "delete"] == [("delete", name, 45)]
        clock.t += 1
        await b.refresh()
        [x] = b.poll()
        assert x.reason == STOPPED
        await b.settle()
        assert ("delete-service", name) in api.calls
    run(scenario())


def test_a_create_the_api_server_never_answers_fails_the_attempt_and_says_why(caplog):
    """A timeout's own text is empty: the attempt must still fail (an empty
    reason read as "created"), and the log must say what happened."""
    async def scenario():
        api, clock = FakeKube(), Clock()
        b = KubernetesBackend(SETTINGS, api, clock=clock)
        api.refuse = asyncio.TimeoutError()
        b.start(spec())
        await b.settle()
        [x] = b.poll()
        assert (x.reason, x.returncode) == (EXITED, 127)
    run(scenario())
    assert "did not answer within 60 s" in caplog.text


def test_refused_create_fails_the_attempt_and_vanished_job_is_lost():
    async def scenario():
        api, clock = FakeKube(), Clock()
        b = KubernetesBackend(SETTINGS, api, clock=clock)
        api.refuse = 'jobs.batch is forbidden: User "system:serviceaccount:hub:gpuhub" cannot create'
        b.start(spec())
        await b.settle()
        [x] = b.poll()
        assert (x.reason, x.returncode) == (EXITED, 127)
        api.refuse = ""
        name = b.start(spec(attempt=2)).ref
        await b.settle()
        api.objects.pop(("Job", "gpuhub-jobs", name))   # someone deleted it by hand
        clock.t += 1
        await b.refresh()
        [x] = b.poll()
        assert x.reason == LOST
    run(scenario())


def test_recover_adopts_and_reports_what_ended_meanwhile():
    async def scenario():
        api, clock = FakeKube(), Clock()
        first = KubernetesBackend(SETTINGS, api, clock=clock)
        running, ended = spec(), spec(workload_id="w9", attempt=0)
        for s in (running, ended):
            first.start(s)
        await first.settle()
        api.finish(job_name("w9", 0))
        second = KubernetesBackend(SETTINGS, api, clock=clock)   # the service restarted
        assert second.recover([running, ended]) == []
        await second.refresh()
        exits = second.poll()
        assert [(x.workload_id, x.reason, x.returncode) for x in exits] == [("w9", EXITED, 0)]
        assert second.running() == {("w0123abcd", 1)}
    run(scenario())


def test_node_that_goes_not_ready_or_cordoned_is_reported():
    async def scenario():
        api = FakeKube()
        b = KubernetesBackend(SETTINGS, api, clock=Clock())
        await b.refresh()
        assert b.take_node_changes() == []
        api.nodes = [k8s_node("gpu-1", {"nvidia.com/gpu": "8"}, ready=False, cordoned=True)]
        await b.refresh()
        [node] = b.take_node_changes()
        assert (node.name, node.healthy, node.drained) == ("gpu-1", False, True)
        assert b.take_node_changes() == []
        # Ready again, but one GPU gone from allocatable (XID): one unhealthy slot
        api.nodes = [k8s_node("gpu-1", {"nvidia.com/gpu": "7"}, capacity={"nvidia.com/gpu": "8"})]
        await b.refresh()
        [node] = b.take_node_changes()
        assert (node.healthy, node.drained, node.unhealthy_gpus) == (True, False, {7})
    run(scenario())


# ---- the API layer against a server that speaks the REST paths --------------------------

class Recorder(web.RequestHandler):
    def initialize(self, seen, answers):
        self.seen, self.answers = seen, answers

    def _answer(self, method):
        body = json.loads(self.request.body) if self.request.body else None
        self.seen.append((method, self.request.path, self.request.query, body))
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(self.answers.get(self.request.path, {"kind": "Status"})))

    def get(self, *_):
        if self.request.path.endswith("/log"):
            self.seen.append(("GET", self.request.path, self.request.query, None))
            self.set_header("Content-Type", "text/plain")
            return self.finish("hello from the pod\n")
        self._answer("GET")

    def post(self, *_):
        self._answer("POST")

    def delete(self, *_):
        self._answer("DELETE")


def serve_on_a_free_port(app: web.Application) -> tuple[httpserver.HTTPServer, int]:
    """``app`` listening on 127.0.0.1 at a port the kernel picked (bound
    once: nothing can take the port between choosing and listening)."""
    from tornado.netutil import bind_sockets
    sockets = bind_sockets(0, "127.0.0.1")
    server = httpserver.HTTPServer(app)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]


def recording_api(handler: type, seen: list, answers: dict):
    """The real ``KubeApi`` on a local server whose ``handler`` records the
    requests and answers from ``answers``: (api, server)."""
    from kubernetes_asyncio import client
    app = web.Application([(r"/(.*)", handler, {"seen": seen, "answers": answers})])
    server, port = serve_on_a_free_port(app)
    return KubeApi(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))), server


@pytest.mark.parametrize("call", ["create", "delete_job", "list_pods", "pod_log"])
def test_a_call_the_api_server_takes_and_never_answers_fails_instead_of_waiting_for_ever(call):
    """An API server that accepts the connection and then says nothing (a
    failover that drops requests silently): each one-shot call gives up after
    its timeout with an error (the attempt fails visibly, a shutdown's settle
    ends) instead of holding its task for good."""
    import socket
    from kubernetes_asyncio import client
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)            # the kernel completes the handshakes; nobody reads
    host = "http://127.0.0.1:%d" % silent.getsockname()[1]
    calls = {"create": lambda api: api.create(job_manifest(spec(), SETTINGS)),
             "delete_job": lambda api: api.delete_job("gpuhub-w1-0", "gpuhub-jobs", 30),
             "list_pods": lambda api: api.list_pods(),
             "pod_log": lambda api: api.pod_log("p-1", "gpuhub-jobs")}

    async def scenario():
        api = KubeApi(client.ApiClient(client.Configuration(host=host)), call_timeout=(1, 0.5))
        try:
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(calls[call](api), 30)
            return time.monotonic() - t0
        finally:
            await api.close()
    try:
        assert asyncio.run(scenario()) < 10     # the call's own timeout, not the guard's 30 s
    finally:
        silent.close()


def test_kube_api_sends_the_requests_the_api_server_expects():
    async def scenario():
        seen: list = []
        job_list = {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": [
            {"metadata": {"name": "gpuhub-w1-0", "namespace": "gpuhub-jobs"},
             "status": {"succeeded": 1}}]}
        answers = {"/apis/batch/v1/jobs": job_list,
                   "/api/v1/pods": {"kind": "PodList", "metadata": {}, "items": []},
                   "/api/v1/nodes": {"kind": "NodeList", "metadata": {}, "items": [
                       k8s_node("gpu-1", {"nvidia.com/gpu": "8"})]}}
        api, server = recording_api(Recorder, seen, answers)
        try:
            await api.create(job_manifest(spec(), SETTINGS))
            await api.delete_job("gpuhub-w0123abcd-1", "gpuhub-jobs", 45)
            jobs = await api.list_jobs()
            nodes = await api.list_nodes()
            assert await api.list_pods() == []
            assert await api.pod_log("p-1", "gpuhub-jobs") == "hello from the pod\n"
        finally:
            await api.close()
            server.stop()
        create, delete, list_jobs = seen[0], seen[1], seen[2]
        assert create[:2] == ("POST", "/apis/batch/v1/namespaces/gpuhub-jobs/jobs")
        assert create[3]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == \
            {"nvidia.com/gpu": "2"}
        assert delete[:2] == ("DELETE", "/apis/batch/v1/namespaces/gpuhub-jobs/jobs/gpuhub-w0123abcd-1")
        assert delete[3]["gracePeriodSeconds"] == 45 and delete[3]["propagationPolicy"] == "Background"
        assert parse_qs(list_jobs[2]) == {"labelSelector": ["app.kubernetes.io/managed-by=gpuhub"]}
        assert jobs[0]["status"]["succeeded"] == 1
        assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    run(scenario())


# ---- the service on a cluster -------------------------------------------------------------

class ThreadedApiServer:
    """A stand-in for the API server: tornado in a thread of its own on a
    free port, answering with the handler a subclass gives (``handler()``)."""

    def __init__(self):
        import threading
        self.ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        self.ready.wait(10)

    def handler(self) -> type:
        raise NotImplementedError

    def _serve(self):
        from tornado.ioloop import IOLoop
        asyncio.set_event_loop(asyncio.new_event_loop())
        _, self.port = serve_on_a_free_port(web.Application([(r"/(.*)", self.handler())]))
        self.loop = IOLoop.current()
        self.ready.set()
        self.loop.start()

    def stop(self):
        self.loop.add_callback(self.loop.stop)


class FakeApiServer(ThreadedApiServer):
    """The REST paths the service uses: GPU nodes to list, Jobs stored as posted."""

    def __init__(self, nodes):
        self.nodes, self.jobs = nodes, {}
        super().__init__()

    def handler(self) -> type:
        server = self

        class Handler(web.RequestHandler):
            def get(self, path):
                self.set_header("Content-Type", "application/json")
                if path == "api/v1/nodes":
                    return self.finish({"kind": "NodeList", "metadata": {}, "items": server.nodes})
                if path == "apis/batch/v1/jobs":
                    return self.finish({"kind": "JobList", "metadata": {},
                                        "items": list(server.jobs.values())})
                self.finish({"kind": "PodList", "metadata": {}, "items": []})

            def post(self, path):
                job = json.loads(self.request.body)
                server.jobs[job["metadata"]["name"]] = job
                self.set_status(201)
                self.finish(job)
        return Handler


def start_service(tmp_path, monkeypatch, api: ThreadedApiServer, config: str):
    """``GpuHubService`` with the kubernetes backend, its kubeconfig pointing
    at ``api``, initialised in an event loop of its own: (app, loop)."""
    from gpuspawner.service.app import GpuHubService
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": f"http://127.0.0.1:{api.port}"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "t"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # its own port: the default one may be held by anything else on the host
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://127.0.0.1:{ports_below_ephemeral(1)}")
    (tmp_path / "gpuhub_config.py").write_text('c.GpuHubService.backend = "kubernetes"\n' + config)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    app = GpuHubService()
    try:
        app.initialize([f"--GpuHubService.config_file={tmp_path / 'gpuhub_config.py'}",
                        f"--GpuHubService.data_dir={tmp_path / 'data'}"])
    except BaseException:
        stop_service(app, loop)
        raise
    return app, loop


def stop_service(app, loop) -> None:
    if getattr(app, "engine", None) is not None:
        loop.run_until_complete(app.engine.backend.api.close())
    app.close()
    loop.close()
    asyncio.set_event_loop(None)


def test_service_takes_its_nodes_from_the_cluster_and_runs_jobs_there(tmp_path, monkeypatch):
    from gpuspawner.service.access.identity import Identity
    from gpuspawner.vocab.specs import parse_job
    api = FakeApiServer([k8s_node("gpu-1", {"nvidia.com/gpu": "8"}),
                         k8s_node("gpu-2", {"nvidia.com/gpu": "8"}, ready=False),
                         k8s_node("cpu-1", {})])
    try:
        app, loop = start_service(tmp_path, monkeypatch, api, (
            'c.KubernetesJobs.pools = {"a100-sxm4-80gb": {}}\n'
            'c.GpuHubService.teams = {"a": {"quotas": {"a100-sxm4-80gb": {"nominal": 8}}}}\n'))
    except BaseException:
        api.stop()
        raise
    try:
        assert sorted(app.engine.nodes) == ["gpu-1", "gpu-2"]
        [pool] = queries.pools_view(app.engine.cluster, app.engine.store,
                                    Identity("root", admin=True))
        assert (pool["name"], pool["capacity"], pool["total"]) == ("a100-sxm4-80gb", 8, 16)
        alice = Identity("alice", teams=frozenset({"a"}), can_submit=True)
        wid = app.engine.submit(alice, parse_job({"command": ["python", "train.py"], "gpus": 4,
                                                  "pool": "a100-sxm4-80gb"})).id
        # Its launch is built in a start thread; the Job is created on the
        # loop at the cycle after (Starter.start_built): a cycle at a time.
        for _ in range(100):
            app.engine.tick()
            loop.run_until_complete(app.engine.backend.settle())
            if job_name(wid, 0) in api.jobs:
                break
            time.sleep(0.05)
        job = api.jobs[job_name(wid, 0)]
        pod = job["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-1"]
        # the node that was not Ready comes back: the next listing says so
        api.nodes[1] = k8s_node("gpu-2", {"nvidia.com/gpu": "8"})
        loop.run_until_complete(app.engine.backend.refresh())
        app.engine.tick()
        assert app.engine.scheduler.state.capacity["a100-sxm4-80gb"] == 16
        # the quotas as cluster objects, from the same database
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["kube-manifests", "--namespaces", "--kueue",
                             "--config", str(tmp_path / "gpuhub_config.py"),
                             "--data-dir", str(tmp_path / "data")]) == 0
        objects = list(yaml.safe_load_all(out.getvalue()))
        assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
            ("Namespace", "gpuhub-jobs-a"), ("NetworkPolicy", "gpuhub-team-isolation"),
            ("ResourceFlavor", "a100-sxm4-80gb"), ("ClusterQueue", "team-a"),
            ("LocalQueue", "team-a")]
        for o in objects[:2]:
            valid(o)
        resources = objects[3]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert {r["name"]: r for r in resources}["nvidia.com/gpu"]["nominalQuota"] == 8
    finally:
        stop_service(app, loop)
        api.stop()
