"""Model deployments on Kubernetes: each replica is a Deployment of one pod
pinned where the scheduler placed it, with MLServer's settings in a
ConfigMap, and a Service per revision.

- Manifests validated against the Kubernetes schema (kubernetes-validate, strict).
- How a replica ends, as a table from the API's JSON.
- The backend's bookkeeping against ``FakeKube`` (test_kube_backend).
- The real ``kubernetes_asyncio`` client's requests for the new objects.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from tornado import web

from gpuspawner.backends.base import EXITED, LOST, STOPPED
from gpuspawner.backends.kubernetes.manifests import KubeSettings
from gpuspawner.backends.kubernetes.serving import (LABEL_REPLICA, MAX_POD_RESTARTS, REPLICA_PORT,
                                              SETTINGS_MOUNT, replica_address, replica_exit,
                                              replica_manifests, revision_service)
from gpuspawner.backends.kubernetes.backend import KubernetesBackend
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.access.identity import Identity
from gpuspawner.serving.replica import model_settings, server_settings
from test_kube_backend import (SETTINGS, Clock, FakeKube, Recorder, ThreadedApiServer, k8s_node,
                               recording_api, run, spec, start_service, stop_service, valid)

MODEL = model_settings("iris", "/home/alice/models/iris-v2", "sklearn", "", 16, 0.005, "r2")
SERVING = {"name": "iris", "revision": 2, "server": server_settings(41000), "model": MODEL}


def replica_spec(**kw):
    base = dict(workload_id="wdeadbeef01", attempt=0, argv=("python", "-m", "mlserver"),
                serving=SERVING, env={"GPUHUB_REPLICA_KEY": "k" * 64}, priority="production", gpus_per_node=1,
                placement=(("gpu-1", (3,)),))
    base.update(kw)
    return spec(**base)


def test_a_replica_is_a_pinned_deployment_with_its_settings_in_a_config_map():
    config_map, deployment = (valid(m) for m in replica_manifests(replica_spec(), SETTINGS))
    name = "gpuhub-wdeadbeef01-0"
    assert config_map["metadata"]["name"] == deployment["metadata"]["name"] == name
    server = json.loads(config_map["data"]["settings.json"])
    # the pod listens on its own address at the port the probes and the router use
    assert (server["host"], server["http_port"]) == ("0.0.0.0", REPLICA_PORT)
    assert json.loads(config_map["data"]["model-settings.json"]) == MODEL
    d = deployment["spec"]
    assert d["replicas"] == 1 and d["strategy"] == {"type": "Recreate"}
    pod = d["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    assert d["selector"]["matchLabels"].items() <= d["template"]["metadata"]["labels"].items()
    [c] = pod["containers"]
    assert c["command"] == ["python3", "-m", "gpuspawner.serving.mlserver_guarded", SETTINGS_MOUNT]
    # only the guarded HTTP port: no gRPC or metrics server to reach around it
    assert [p["containerPort"] for p in c["ports"]] == [REPLICA_PORT]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # ready when the model is (as the router counts it), not merely the server
    # ...and the probes carry the replica's key, as the router does
    key = [{"name": "X-GpuHub-Replica-Key", "value": "k" * 64}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/models/iris/ready", "port": "http",
                                              "httpHeaders": key}
    assert c["livenessProbe"]["httpGet"]["httpHeaders"] == key
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-1"]
    # MLServer finds model/model-settings.json under the settings folder
    [settings] = [v for v in pod["volumes"] if v["name"] == "replica-settings"]
    assert {i["path"] for i in settings["configMap"]["items"]} == {
        "settings.json", "model/model-settings.json"}
    # the model is read from the workspace volume, at the path the service sees
    assert {"name": "workspaces", "mountPath": "/home"} in c["volumeMounts"]
    assert MODEL["parameters"]["uri"].startswith("/home/")
    labels = d["template"]["metadata"]["labels"]
    assert labels["gpuhub.jupyter.org/deployment"] == "iris"
    assert labels["gpuhub.jupyter.org/revision"] == "2"
    assert labels[LABEL_REPLICA] == "gpuhub-wdeadbeef01-0"


def test_the_revisions_service_selects_its_replicas():
    service = valid(revision_service(replica_spec(), SETTINGS))
    assert service["metadata"]["name"] == "iris-r2"
    _, deployment = replica_manifests(replica_spec(), SETTINGS)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]


def test_cpu_replica_and_team_namespace():
    s = KubeSettings(**{**SETTINGS.__dict__, "team_namespaces": True})
    config_map, deployment = (valid(m) for m in replica_manifests(
        replica_spec(gpus_per_node=0, placement=()), s))
    assert deployment["metadata"]["namespace"] == "gpuhub-jobs-vision"
    assert "limits" not in deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert valid(revision_service(replica_spec(), s))["metadata"]["namespace"] == \
        "gpuhub-jobs-vision"


def test_without_a_workspace_volume_a_replica_is_refused_by_name():
    s = KubeSettings(**{**SETTINGS.__dict__, "workspace_claim": ""})
    with pytest.raises(ValueError, match="workspace_claim"):
        replica_manifests(replica_spec(), s)


def pod(phase="Running", ip="10.4.2.7", restarts=0, last_exit=None, reason=None, deleting=False):
    status = {"phase": phase, "containerStatuses": [{"restartCount": restarts}]}
    if ip:
        status["podIP"] = ip
    if last_exit is not None:
        status["containerStatuses"][0]["lastState"] = {"terminated": {"exitCode": last_exit}}
    if reason:
        status["reason"] = reason
    meta = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T03:00:00Z"
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize("pods, expected", [
    ([pod()], f"10.4.2.7:{REPLICA_PORT}"),
    ([pod(phase="Pending", ip=None)], None),
    ([pod(deleting=True), pod(ip="10.4.2.8")], f"10.4.2.8:{REPLICA_PORT}"),
    ([], None),
])
def test_replica_address(pods, expected):
    assert replica_address(pods) == expected


DEPLOYMENT = {"metadata": {"name": "gpuhub-w-0"}}


@pytest.mark.parametrize("deployment, pods, stopped, expected", [
    (DEPLOYMENT, [pod()], False, None),                                  # serving
    (DEPLOYMENT, [pod(restarts=1, last_exit=1)], False, None),           # restarted once: fine
    (DEPLOYMENT, [pod(restarts=MAX_POD_RESTARTS, last_exit=3)], False, (EXITED, 3)),  # crash loop
    (DEPLOYMENT, [pod(phase="Failed", reason="Evicted")], False, (LOST, None)),
    (DEPLOYMENT, [pod()], True, None),                                   # deleting: wait
    (None, [], True, (STOPPED, None)),
    (None, [], False, (LOST, None)),                                     # deleted by hand
])
def test_replica_exit(deployment, pods, stopped, expected):
    x = replica_exit("w", 0, deployment, pods, stopped, 100.0)
    assert (x and (x.reason, x.returncode)) == (expected or None)


def serving_pod(api: FakeKube, name: str, ip: str, namespace="gpuhub-jobs", restarts=0):
    """What the ReplicaSet controller and the kubelet would make of it."""
    template = api.objects[("Deployment", namespace, name)]["spec"]["template"]
    p = pod(ip=ip, restarts=restarts, last_exit=137 if restarts else None)
    p["metadata"] = {"name": f"{name}-5d8f-x", "namespace": namespace,
                     "labels": template["metadata"]["labels"]}
    api.objects[("Pod", namespace, p["metadata"]["name"])] = p


def test_backend_serves_a_replica_tells_its_address_and_cleans_up_after_the_last():
    async def scenario():
        api, clock = FakeKube(), Clock()
        b = KubernetesBackend(SETTINGS, api, clock=clock)
        one, two = replica_spec(), replica_spec(workload_id="wdeadbeef02")
        name = b.start(one).ref
        b.start(two)
        await b.settle()
        created = [c[1:] for c in api.calls if c[0] == "create"]
        # the revision's Service once, each replica's ConfigMap before its Deployment
        assert created == [("Service", "iris-r2"), ("ConfigMap", name), ("Deployment", name),
                           ("ConfigMap", "gpuhub-wdeadbeef02-0"),
                           ("Deployment", "gpuhub-wdeadbeef02-0")]
        assert b.replica_address("wdeadbeef01", 0, 41000) is None  # no pod yet
        serving_pod(api, name, "10.4.2.7")
        clock.t += 1
        await b.refresh()
        assert b.poll() == []
        assert b.replica_address("wdeadbeef01", 0, 41000) == f"10.4.2.7:{REPLICA_PORT}"
        # the server keeps crashing: reported with its exit code, then removed
        serving_pod(api, name, "10.4.2.7", restarts=MAX_POD_RESTARTS)
        clock.t += 1
        await b.refresh()
        [x] = b.poll()
        assert (x.workload_id, x.reason, x.returncode) == ("wdeadbeef01", EXITED, 137)
        await b.settle()
        assert ("Deployment", "gpuhub-jobs", name) not in api.objects
        assert ("ConfigMap", "gpuhub-jobs", name) not in api.objects
        assert ("Service", "gpuhub-jobs", "iris-r2") in api.objects  # the other replica serves
        # the other one is scaled away: its grace, then the Service goes too
        b.stop("wdeadbeef02", 0, 10)
        await b.settle()
        assert ("delete-deployment", "gpuhub-wdeadbeef02-0", 10) in api.calls
        clock.t += 1
        await b.refresh()
        [x] = b.poll()
        assert x.reason == STOPPED
        await b.settle()
        assert not [k for k in api.objects if k[0] in ("Deployment", "ConfigMap", "Service")]
    run(scenario())


def test_recovered_replica_is_adopted_as_a_deployment():
    async def scenario():
        api, clock = FakeKube(), Clock()
        first = KubernetesBackend(SETTINGS, api, clock=clock)
        name = first.start(replica_spec()).ref
        await first.settle()
        serving_pod(api, name, "10.4.2.9")
        second = KubernetesBackend(SETTINGS, api, clock=clock)  # the service restarted
        second.recover([replica_spec()])
        await second.refresh()
        assert second.poll() == []   # its Deployment is there: it serves on
        assert second.replica_address("wdeadbeef01", 0, 0) == f"10.4.2.9:{REPLICA_PORT}"
    run(scenario())


def test_kube_api_sends_the_deployment_requests_and_tolerates_an_existing_service():
    from kubernetes_asyncio import client

    class Conflict(Recorder):
        def post(self, *_):
            if self.request.path.endswith("/services"):
                self.seen.append(("POST", self.request.path, "", None))
                self.set_status(409)
                self.set_header("Content-Type", "application/json")
                return self.finish({"kind": "Status", "code": 409, "reason": "AlreadyExists"})
            self._answer("POST")

    async def scenario():
        seen: list = []
        answers = {"/apis/apps/v1/deployments": {"kind": "DeploymentList", "metadata": {},
                                                 "items": []}}
        api, server = recording_api(Conflict, seen, answers)
        config_map, deployment = replica_manifests(replica_spec(), SETTINGS)
        service = revision_service(replica_spec(), SETTINGS)
        try:
            await api.create(service, exist_ok=True)            # 409: already there, fine
            with pytest.raises(client.exceptions.ApiException):
                await api.create(service)                       # 409 without exist_ok: an error
            await api.create(config_map)
            await api.create(deployment)
            await api.delete_deployment("gpuhub-wdeadbeef01-0", "gpuhub-jobs", 10)
            await api.delete_config_map("gpuhub-wdeadbeef01-0", "gpuhub-jobs")
            assert await api.list_deployments() == []
        finally:
            await api.close()
            server.stop()
        paths = [(m, p) for m, p, *_ in seen]
        assert paths == [
            ("POST", "/api/v1/namespaces/gpuhub-jobs/services"),
            ("POST", "/api/v1/namespaces/gpuhub-jobs/services"),
            ("POST", "/api/v1/namespaces/gpuhub-jobs/configmaps"),
            ("POST", "/apis/apps/v1/namespaces/gpuhub-jobs/deployments"),
            ("DELETE", "/apis/apps/v1/namespaces/gpuhub-jobs/deployments/gpuhub-wdeadbeef01-0"),
            ("DELETE", "/api/v1/namespaces/gpuhub-jobs/configmaps/gpuhub-wdeadbeef01-0"),
            ("GET", "/apis/apps/v1/deployments")]
        assert seen[4][3]["gracePeriodSeconds"] == 10
        assert seen[3][3]["spec"]["template"]["spec"]["containers"][0]["name"] == "mlserver"
    run(scenario())


# ---- the service on a cluster serves a model ------------------------------------------------

class Cluster(ThreadedApiServer):
    """The REST paths the service uses, plus a stand-in kubelet: a posted
    Deployment's pod is real MLServer, started from the Deployment's
    ConfigMap on a loopback address of its own (its "pod IP", 127.0.0.N) at
    the replica port; deleting the Deployment kills it."""

    KINDS = {"jobs": "Job", "deployments": "Deployment", "configmaps": "ConfigMap",
             "services": "Service", "pods": "Pod"}

    def __init__(self, nodes, root):
        self.nodes, self.root = nodes, root
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.servers: dict[str, subprocess.Popen] = {}
        super().__init__()

    def of(self, kind):
        return [o for (k, _, _), o in list(self.objects.items()) if k == kind]

    def handler(self) -> type:
        cluster = self

        class Handler(web.RequestHandler):
            def get(self, path):
                kind = cluster.KINDS.get(path.rsplit("/", 1)[-1])
                items = cluster.nodes if path == "api/v1/nodes" else cluster.of(kind)
                self.finish({"kind": "List", "metadata": {}, "items": items})

            def post(self, path):
                parts = path.split("/")
                obj = json.loads(self.request.body)
                key = (cluster.KINDS[parts[-1]], parts[-2], obj["metadata"]["name"])
                if key in cluster.objects:
                    self.set_status(409)
                    return self.finish({"kind": "Status", "code": 409})
                cluster.objects[key] = obj
                if key[0] == "Deployment":
                    cluster.run_pod(obj)
                self.set_status(201)
                self.finish(obj)

            def delete(self, path):
                parts = path.split("/")
                key = (cluster.KINDS[parts[-2]], parts[-3], parts[-1])
                obj = cluster.objects.pop(key, None)
                if key[0] == "Deployment" and obj is not None:
                    cluster.kill_pod(key[2])
                self.finish({"kind": "Status", "code": 200})
        return Handler

    def run_pod(self, deployment):
        name, ns = deployment["metadata"]["name"], deployment["metadata"]["namespace"]
        data = self.objects[("ConfigMap", ns, name)]["data"]
        ip = f"127.0.0.{random.randint(2, 250)}"
        folder = os.path.join(self.root, name)
        os.makedirs(os.path.join(folder, "model"))
        server = {**json.loads(data["settings.json"]), "host": ip}
        with open(os.path.join(folder, "settings.json"), "w") as f:
            json.dump(server, f)
        with open(os.path.join(folder, "model", "model-settings.json"), "w") as f:
            f.write(data["model-settings.json"])
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {**os.environ, **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
        self.servers[name] = subprocess.Popen(
            [sys.executable, *container["command"][1:-1], folder], start_new_session=True, env=env,
            stdout=open(os.path.join(folder, "log"), "w"), stderr=subprocess.STDOUT)
        template = deployment["spec"]["template"]
        self.objects[("Pod", ns, f"{name}-0")] = {
            "metadata": {"name": f"{name}-0", "namespace": ns,
                         "labels": template["metadata"]["labels"]},
            "status": {"phase": "Running", "podIP": ip, "containerStatuses": [{
                "name": "mlserver", "image": template["spec"]["containers"][0]["image"],
                "imageID": "", "ready": True, "restartCount": 0}]}}

    def kill_pod(self, name):
        for key in [k for k in self.objects if k[0] == "Pod" and k[2] == f"{name}-0"]:
            del self.objects[key]
        proc = self.servers.pop(name, None)
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop(self):
        for name in list(self.servers):
            self.kill_pod(name)
        super().stop()


def test_service_on_a_cluster_serves_a_model_through_the_replicas_pod_address(tmp_path,
                                                                                monkeypatch):
    workspaces = tmp_path / "data" / "workspaces"
    model_dir = workspaces / "alice" / "models" / "iris-v1"
    subprocess.run([sys.executable, "examples/serving/iris/train.py", str(model_dir)], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cluster = Cluster([k8s_node("gpu-1", {"nvidia.com/gpu": "8"})], str(tmp_path / "kubelet"))
    alice = Identity("alice", teams=frozenset({"a"}), can_submit=True)
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                        "data": [5.1, 3.5, 1.4, 0.2]}]}

    async def cycle():
        app.engine.tick()
        await app.engine.backend.settle()
        await app.engine.backend.refresh()
        await app.serving.reconcile()

    async def until(what, check, seconds=90):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await cycle()
            if check():
                return
            await asyncio.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}; kubelet logs: " + " ".join(
            open(os.path.join(cluster.root, n, "log")).read()[-2000:] for n in cluster.servers))

    async def scenario():
        ctl = app.serving
        dep, _ = ctl.deployments.deploy(alice, parse_deploy(
            {"name": "iris", "model_dir": "models/iris-v1", "gpus": 1}, app.default_pool))
        await until("a ready replica", lambda: ctl.ready_replicas(dep.id))
        [deployment] = cluster.of("Deployment")
        # a replica's default CPUs and memory (WorkloadResources) beside its GPU
        assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] \
            == {"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": "1"}
        assert [s["metadata"]["name"] for s in cluster.of("Service")] == ["iris-r1"]
        [replica] = ctl.ready_replicas(dep.id)
        [pod] = cluster.of("Pod")
        assert replica.url == f"http://{pod['status']['podIP']}:{REPLICA_PORT}"
        # the pod answers the router's key only (serving/guard.py)
        async with ctl.session.post(f"{replica.url}/v2/models/iris/infer", json=body) as resp:
            assert resp.status == 401
        async with ctl.session.post(f"{replica.url}/v2/models/iris/infer", json=body,
                                    headers=replica.headers) as resp:
            assert resp.status == 200
            answer = await resp.json()
        assert answer["model_version"] == "r1" and answer["outputs"][0]["data"] == [0]
        # deleted: the replica is stopped and every object it had goes
        ctl.deployments.delete(alice, "a", "iris")
        await until("nothing left on the cluster", lambda: not any(
            cluster.of(k) for k in ("Deployment", "ConfigMap", "Service", "Pod")))
        assert not cluster.servers
        await ctl.session.close()

    try:
        app, loop = start_service(tmp_path, monkeypatch, cluster, (
            'c.KubernetesJobs.pools = {"a100-sxm4-80gb": {}}\n'
            'c.KubernetesJobs.workspace_claim = "home"\n'
            f'c.KubernetesJobs.workspace_mount = {str(workspaces)!r}\n'
            'c.GpuHubService.teams = {"a": {"quotas": {"a100-sxm4-80gb": {"nominal": 8}}}}\n'))
        try:
            loop.run_until_complete(scenario())
        finally:
            stop_service(app, loop)
    finally:
        cluster.stop()
