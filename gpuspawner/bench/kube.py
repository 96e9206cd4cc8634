"""``gpuhub bench kube``: what the kubernetes backend asks of the API server
at 1,000 pods, listing every 2 s against watching, and how soon an ended
pod reaches the database.

For each mode in the same run, the real scheduler service (SQLite, the
kubernetes backend, the real ``kubernetes_asyncio`` client) runs for
``seconds`` against the stand-in API server (backends/kubernetes/standin.py) holding ``pods``
GPU Hub pods with their Jobs on ``pods / 8`` nodes of 8 GPUs, objects the
size of real ones. A thread changes ``churn`` pods a minute (a status
update, as kubelets send); every few seconds a probe job is submitted, its
pod started and then set to Succeeded, and the time from that change to
the workload's state in the database is measured.

The stand-in counts the requests and the response bytes of the lists and
watches (the probes' creates and deletes are the same in both modes and
left out); the counting starts after the first listing, which both modes
make. API calls per minute and bytes per minute are over the measured
period; the ratio is list-polling over watching.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
import tempfile
import threading
import time
from typing import Callable, Optional

from ..backends.base import LaunchSpec
from ..backends.kubernetes.manifests import KubeSettings, job_manifest, job_name
from ..backends.kubernetes.standin import ApiState, StandIn
from ..backends.kubernetes.status import PRODUCT_LABEL
from gpuspawner.service.workloads import queries
from gpuspawner.service.app import GpuHubService
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from ..serving.ports import ports_below_ephemeral

POOL = "a100-sxm4-80gb"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
NS = "gpuhub-jobs"


def node(i: int) -> dict:
    name = f"gpu-{i:04d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "p4d.24xlarge",
              "topology.kubernetes.io/zone": f"eu-1{'abc'[i % 3]}", PRODUCT_LABEL: PRODUCT,
              "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
              "nvidia.com/cuda.driver.major": "580", "nvidia.com/mig.strategy": "mixed"}
    resources = {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8", "pods": "110",
                 "ephemeral-storage": "7800Gi"}
    return {"metadata": {"name": name, "labels": labels, "annotations": {
                "nvidia.com/gpu-driver-upgrade-enabled": "true"}},
            "spec": {"providerID": f"aws:///eu-1a/i-{i:017x}", "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"capacity": resources, "allocatable": resources,
                       "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 250}.{i % 250}"},
                                     {"type": "Hostname", "address": name}],
                       "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                                       "reason": f"Kubelet{t}", "message": f"kubelet says {t}",
                                       "lastHeartbeatTime": "2026-12-01T10:00:00Z",
                                       "lastTransitionTime": "2026-11-01T10:00:00Z"}
                                      for t in ("MemoryPressure", "DiskPressure", "PIDPressure",
                                                "Ready")],
                       "nodeInfo": {"kubeletVersion": "v1.31.2", "kubeProxyVersion": "v1.31.2",
                                    "containerRuntimeVersion": "containerd://1.7.22",
                                    "osImage": "Ubuntu 22.04.5 LTS", "operatingSystem": "linux",
                                    "kernelVersion": "6.8.0-1019-aws", "architecture": "amd64",
                                    "bootID": f"{i:032x}", "machineID": f"{i:032x}",
                                    "systemUUID": f"ec2{i:029x}"}}}


def job_and_pod(i: int, nodes: int) -> tuple[dict, dict]:
    """A 1-GPU Job as the backend makes it, and its running pod as the kubelet reports it."""
    spec = LaunchSpec(workload_id=f"wbench{i:05d}", attempt=0,
                      argv=("python", "train.py", "--config", f"runs/{i}.yaml"), attempt_dir="",
                      cwd=f"/home/user{i % 50}/project", env={"GPUHUB_TEAM": "bench"},
                      time_limit=86400, grace_period=30,
                      placement=((f"gpu-{i % nodes:04d}", (i // nodes % 8,)),), pool=POOL,
                      team="bench", user=f"user{i % 50}", priority="batch", gpus_per_node=1)
    settings = KubeSettings(namespace=NS, image="registry.example.org/gpuhub/runner:0.1.0",
                            pools={POOL: {}}, checkpoint_claim="gpuhub-checkpoints")
    job = job_manifest(spec, settings)
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    pod = {"metadata": {"name": f"{name}-{i:05x}", "namespace": NS,
                        "labels": {**template["metadata"].get("labels", {}),
                                   **job["metadata"]["labels"], "job-name": name,
                                   "batch.kubernetes.io/job-name": name},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                             "uid": f"{i:08x}-0000-4000-8000-000000000000",
                                             "controller": True, "blockOwnerDeletion": True}]},
           "spec": {**template["spec"], "nodeName": spec.placement[0][0]},
           "status": {"phase": "Running", "hostIP": f"10.1.0.{i % 250}",
                      "podIP": f"10.4.{i // 250}.{i % 250}", "qosClass": "Burstable",
                      "startTime": "2026-12-01T09:00:00Z",
                      "conditions": [{"type": t, "status": "True",
                                      "lastTransitionTime": "2026-12-01T09:00:05Z"}
                                     for t in ("PodReadyToStartContainers", "Initialized",
                                               "Ready", "ContainersReady", "PodScheduled")],
                      "containerStatuses": [{
                          "name": "job", "ready": True, "restartCount": 0, "started": True,
                          "image": "registry.example.org/gpuhub/runner:0.1.0",
                          "imageID": "registry.example.org/gpuhub/runner@sha256:" + "ab" * 32,
                          "containerID": "containerd://" + f"{i:064x}",
                          "state": {"running": {"startedAt": "2026-12-01T09:00:04Z"}}}]}}
    return job, pod


def populate(state: ApiState, pods: int) -> None:
    nodes = max(1, pods // 8)
    for i in range(nodes):
        state.put("nodes", node(i))
    for i in range(pods):
        job, pod = job_and_pod(i, nodes)
        state.put("jobs", job)
        state.put("pods", pod)


def churn(state: ApiState, per_minute: float, stop: threading.Event) -> None:
    """Pod status updates, spread over the pods (a readiness flip each)."""
    keys = sorted(state.objects["pods"])
    i = 0
    while not stop.wait(60.0 / per_minute if per_minute > 0 else 3600):
        key = keys[i % len(keys)]
        i += 1
        with state.lock:
            if key not in state.objects["pods"]:
                continue

            def flip(pod, n=i):
                pod["status"]["containerStatuses"][0]["ready"] = n % 2 == 0
            state.modify("pods", *key, flip)


def _config(data_dir: str, watch: bool) -> str:
    path = os.path.join(data_dir, "gpuhub_config.py")
    with open(path, "w") as f:
        f.write('c.GpuHubService.backend = "kubernetes"\n'
                f'c.KubernetesJobs.pools = {{"{POOL}": {{}}}}\n'
                f"c.KubernetesJobs.watch = {watch}\n"
                f'c.GpuHubService.teams = {{"bench": {{"quotas": {{"{POOL}": {{"nominal": 64}}}}}}}}\n')
    return path


def _environment(tmp: str, port: int) -> dict:
    kubeconfig = os.path.join(tmp, "kubeconfig")
    with open(kubeconfig, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "bench",
                   "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                   "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                   "users": [{"name": "bench", "user": {"token": "bench"}}]}, f)
    return {"KUBECONFIG": kubeconfig, "KUBERNETES_SERVICE_HOST": None,
            "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{ports_below_ephemeral(1)}"}


def _swap_env(values: dict) -> dict:
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


def list_and_watch(state: ApiState) -> tuple[int, int]:
    """(requests, response bytes) of the lists and watches so far."""
    requests = sum(v for (call, what), v in state.stats.items()
                   if call.split()[0] in ("list", "watch") and what == "requests")
    sent = sum(v for (call, what), v in state.stats.items()
               if call.split()[0] in ("list", "watch") and what == "bytes")
    return requests, sent


async def _until(check: Callable[[], bool], seconds: float, step: float = 0.002) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


async def _probe(app, state: ApiState, identity, n: int) -> Optional[float]:
    """Submit a job, run its pod, end it: seconds from the pod's Succeeded to the database's."""
    wid = app.engine.submit(identity, parse_job({"command": ["python", "probe.py", str(n)],
                                                 "gpus": 1, "pool": POOL})).id
    app.engine.wake()
    name = job_name(wid, 0)
    if not await _until(lambda: (NS, name) in state.objects["jobs"], 30):
        return None
    pod_name = f"{name}-probe"
    state.put("pods", {"metadata": {"name": pod_name, "namespace": NS, "labels": {
        "app.kubernetes.io/managed-by": "gpuhub", "job-name": name}},
        "status": {"phase": "Running"}})
    await asyncio.sleep(0.3 + (n * 0.37) % 1.0)   # not in step with the listing interval
    t0 = time.monotonic()
    state.modify("pods", NS, pod_name, lambda p: p["status"].update(
        phase="Succeeded", containerStatuses=[{"name": "job", "state": {
            "terminated": {"exitCode": 0}}}]))
    done = await _until(lambda: queries.get(app.engine.store, identity, wid).state == "succeeded",
                        30)
    return time.monotonic() - t0 if done else None


def measure(watch: bool, pods: int, seconds: float, churn_per_minute: float,
            progress: Callable[[str], None] = lambda text: None) -> dict:
    state = ApiState(window=100_000)
    populate(state, pods)
    server = StandIn(state)
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="gpuhub-bench-kube-") as tmp:
        old = _swap_env(_environment(tmp, server.port))
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = GpuHubService()
        try:
            app.initialize([f"--GpuHubService.config_file={_config(tmp, watch)}",
                            f"--GpuHubService.data_dir={os.path.join(tmp, 'data')}"])
            identity = Identity("bench", teams=frozenset({"bench"}), can_submit=True)

            async def run() -> dict:
                tasks = [loop.create_task(app.driver.run()), loop.create_task(app.engine.backend.run())]
                try:
                    await _until(lambda: app.engine.backend._listed_at is not None and
                                 (not watch or len(state.watchers) == 4), 120, 0.05)
                    first = list_and_watch(state)
                    threading.Thread(target=churn, args=(state, churn_per_minute, stop),
                                     daemon=True).start()
                    t0 = time.monotonic()
                    latencies, n = [], 0
                    while time.monotonic() - t0 < seconds:
                        latency = await _probe(app, state, identity, n)
                        n += 1
                        if latency is not None:
                            latencies.append(latency)
                        await asyncio.sleep(0.5)
                    elapsed = time.monotonic() - t0
                    stop.set()
                    end = list_and_watch(state)
                    row = _row(watch, pods, elapsed, first, end, latencies, churn_per_minute)
                    if watch:   # at least one call per kind per watch_timeout, in the long run
                        timeout = app.engine.backend.watch_timeout
                        row["watch_timeout_s"] = timeout
                        row["long_run_calls_per_min"] = max(row["calls_per_min"],
                                                            round(4 * 60 / timeout, 2))
                    return row
                finally:
                    stop.set()
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    await app.engine.backend.settle()
                    await app.engine.backend.logs.close()
                    await app.engine.backend.api.close()
            progress(f"  {'watching' if watch else 'listing every 2 s'}: {seconds:.0f} s")
            return loop.run_until_complete(run())
        finally:
            app.close()
            loop.close()
            asyncio.set_event_loop(None)
            _swap_env(old)
            server.stop()


def _row(watch, pods, elapsed, first, end, latencies, churn_per_minute) -> dict:
    calls, sent = end[0] - first[0], end[1] - first[1]
    per_minute = 60.0 / elapsed
    return {"mode": "watch" if watch else "list every 2 s", "pods": pods,
            "changes_per_min": churn_per_minute, "seconds": round(elapsed, 1),
            "first_list_calls": first[0], "first_list_bytes": first[1],
            "calls_per_min": round(calls * per_minute, 1),
            "bytes_per_min": round(sent * per_minute), "bytes": sent,
            "probes": len(latencies),
            "exit_to_db_p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
            "exit_to_db_max_ms": round(max(latencies) * 1000, 1) if latencies else None}


def run_bench(pods: int = 1000, seconds: float = 60.0, churn_per_minute: float = 60.0,
              progress: Callable[[str], None] = lambda text: None) -> list[dict]:
    logging.getLogger("gpuhub").setLevel(logging.WARNING)
    return [measure(False, pods, seconds, churn_per_minute, progress),
            measure(True, pods, seconds, churn_per_minute, progress)]


def format_rows(rows: list[dict]) -> str:
    listing, watching = rows
    lines = [f"gpuhub bench kube: {listing['pods']:,} pods and Jobs on {listing['pods'] // 8} "
             f"nodes, {listing['changes_per_min']:.0f} pod changes a minute, "
             f"{listing['seconds']:.0f} s per mode",
             f"{'mode':<16} {'calls/min':>10} {'KB/min':>10} {'KB total':>10} "
             f"{'exit->DB p50 ms':>16} {'max ms':>8} {'probes':>6}"]
    for r in rows:
        lines.append(f"{r['mode']:<16} {r['calls_per_min']:>10.1f} {r['bytes_per_min'] / 1e3:>10.1f} "
                     f"{r['bytes'] / 1e3:>10.1f} {r['exit_to_db_p50_ms'] or 0:>16.1f} "
                     f"{r['exit_to_db_max_ms'] or 0:>8.1f} {r['probes']:>6}")

    calls = watching.get("long_run_calls_per_min") or watching["calls_per_min"]
    lines.append(f"{'list / watch':<16} {listing['calls_per_min'] / calls:>9.0f}x "
                 f"{listing['bytes_per_min'] / max(1, watching['bytes_per_min']):>9.0f}x")
    if calls != watching["calls_per_min"]:
        lines.append(f"(calls: against the watch's {calls} calls/min in the long run, one per "
                     f"kind per watch_timeout = {watching['watch_timeout_s']} s; "
                     f"{watching['calls_per_min']} in the measured period)")
    lines.append(f"(both modes first list every kind once: {listing['first_list_calls']} calls, "
                 f"{listing['first_list_bytes'] / 1e6:.1f} MB; not counted above)")
    return "\n".join(lines)
