"""Runs attempts as Kubernetes Jobs (``manifests``) and model replicas
as Deployments (``serving``), and reports how they end
(``status``), through a thin asynchronous API layer (``KubeApi``, on
``kubernetes_asyncio`` like KubeSpawner).

The engine calls backends synchronously from the event loop, so the API
calls are tasks: ``start``/``stop``/``kill`` schedule them, and a refresh
task lists the GPU Hub Jobs, their pods and the nodes every few seconds;
``poll`` answers from the latest listing. A listing, not a watch: it cannot
miss an event, and survives API server restarts, at the price of one list
of each kind per interval (a label-selected list is cheap at the scale of
one hub's jobs).

After a service restart ``recover`` adopts the Jobs the database says are
running; the next listing says which of them ended meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional

from ...scheduler.model import Node
from ..base import EXITED, AttemptExit, Backend, LaunchSpec
from .manifests import (MANAGED_BY, KubeSettings, job_manifest, job_name, namespace_for,
                             rendezvous_service)
from .serving import (LABEL_REPLICA, replica_address, replica_exit, replica_manifests,
                           revision_service, revision_service_name)
from .status import attempt_exit, nodes_from_k8s

log = logging.getLogger("gpuhub.kubernetes")
SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"


class KubeApi:
    """The only code that talks to the API server: each method is one call,
    objects in and out as plain JSON dicts."""

    def __init__(self, api_client):
        from kubernetes_asyncio import client
        self._client = api_client
        self._batch = client.BatchV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._api_exception = client.exceptions.ApiException
        self._delete_options = client.V1DeleteOptions

    @classmethod
    async def connect(cls) -> "KubeApi":
        """In a pod: the service account; elsewhere: $KUBECONFIG."""
        from kubernetes_asyncio import client, config
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            # Read $KUBECONFIG now: the library reads it once, at import.
            await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        return cls(client.ApiClient())

    def _json(self, obj) -> dict:
        return self._client.sanitize_for_serialization(obj)

    async def create(self, manifest: dict, exist_ok: bool = False) -> None:
        ns, kind = manifest["metadata"]["namespace"], manifest["kind"]
        try:
            if kind == "Job":
                await self._batch.create_namespaced_job(ns, manifest)
            elif kind == "Deployment":
                await self._apps.create_namespaced_deployment(ns, manifest)
            elif kind == "ConfigMap":
                await self._core.create_namespaced_config_map(ns, manifest)
            else:
                await self._core.create_namespaced_service(ns, manifest)
        except self._api_exception as e:
            if not (exist_ok and e.status == 409):
                raise

    async def delete_job(self, name: str, namespace: str, grace_seconds: int) -> None:
        # Background: the Job goes now, its pods get their grace period.
        await self._batch.delete_namespaced_job(name, namespace, body=self._delete_options(
            propagation_policy="Background", grace_period_seconds=grace_seconds))

    async def delete_deployment(self, name: str, namespace: str, grace_seconds: int) -> None:
        await self._apps.delete_namespaced_deployment(name, namespace, body=self._delete_options(
            propagation_policy="Background", grace_period_seconds=grace_seconds))

    async def delete_service(self, name: str, namespace: str) -> None:
        await self._core.delete_namespaced_service(name, namespace)

    async def delete_config_map(self, name: str, namespace: str) -> None:
        await self._core.delete_namespaced_config_map(name, namespace)

    async def list_jobs(self) -> list[dict]:
        return self._json(await self._batch.list_job_for_all_namespaces(
            label_selector=SELECTOR))["items"]

    async def list_deployments(self) -> list[dict]:
        return self._json(await self._apps.list_deployment_for_all_namespaces(
            label_selector=SELECTOR))["items"]

    async def list_pods(self) -> list[dict]:
        return self._json(await self._core.list_pod_for_all_namespaces(
            label_selector=SELECTOR))["items"]

    async def list_nodes(self) -> list[dict]:
        return self._json(await self._core.list_node())["items"]

    async def pod_log(self, name: str, namespace: str) -> str:
        return await self._core.read_namespaced_pod_log(name, namespace)

    async def close(self) -> None:
        await self._client.close()


@dataclass
class _Attempt:
    spec: LaunchSpec
    namespace: str
    created_at: float           # 0: adopted after a restart
    stopped: bool = False
    failed_to_create: str = ""
    gang: bool = False
    replica: bool = False       # a model replica: a Deployment, not a Job


class KubernetesBackend(Backend):
    """Attempts as Kubernetes Jobs (and replica Deployments) on the nodes the
    scheduler chose; its API calls run as tasks on the event loop."""

    def __init__(self, settings: KubeSettings, api, clock: Callable[[], float] = time.time,
                 refresh_interval: float = 2.0, nodes: Iterable[Node] = ()):
        self.settings = settings
        self.api = api
        self._clock = clock
        self.refresh_interval = refresh_interval
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._jobs: dict[tuple[str, str], dict] = {}
        self._deployments: dict[tuple[str, str], dict] = {}
        self._pods: dict[tuple[str, str], list[dict]] = {}
        self._listed_at: Optional[float] = None
        # The nodes as the scheduler last heard of them.
        self._nodes: dict[str, Node] = {n.name: n for n in nodes}
        self._node_changes: list[Node] = []
        self._tasks: set[asyncio.Task] = set()

    # ---- the Backend contract ------------------------------------------------------------
    def start(self, spec: LaunchSpec) -> str:
        key = (spec.workload_id, spec.attempt)
        if key in self._attempts:
            raise ValueError(f"attempt {key} is already running")
        if spec.serving:
            return self._start_replica(spec)
        job = job_manifest(spec, self.settings)  # ValueError on a pool it cannot run
        service = rendezvous_service(spec, self.settings)
        a = _Attempt(spec, job["metadata"]["namespace"], self._clock(), gang=service is not None)
        self._attempts[key] = a
        self._spawn(self._create(a, [m for m in (service, job) if m]))
        return job["metadata"]["name"]

    def _start_replica(self, spec: LaunchSpec) -> str:
        manifests = replica_manifests(spec, self.settings)
        name, namespace = manifests[-1]["metadata"]["name"], manifests[-1]["metadata"]["namespace"]
        a = _Attempt(spec, namespace, self._clock(), replica=True)
        self._attempts[(spec.workload_id, spec.attempt)] = a
        self._spawn(self._create(a, manifests, shared=revision_service(spec, self.settings)))
        return name

    def replica_address(self, workload_id: str, attempt: int, port: int) -> Optional[str]:
        """The replica pod's IP and port, once it runs (None before)."""
        a = self._attempts.get((workload_id, attempt))
        if a is None:
            return None
        return replica_address(self._pods.get((a.namespace, job_name(workload_id, attempt)), []))

    def stop(self, workload_id: str, attempt: int, grace: float) -> None:
        """Delete the Job (or the replica's Deployment): Kubernetes sends SIGTERM,
        and SIGKILL after ``grace``."""
        a = self._attempts.get((workload_id, attempt))
        if a is not None and not a.stopped:
            a.stopped = True
            self._spawn(self._delete(a, max(0, int(round(grace)))))

    def kill(self, workload_id: str, attempt: int) -> None:
        a = self._attempts.get((workload_id, attempt))
        if a is not None:
            a.stopped = True
            self._spawn(self._delete(a, 0))

    def poll(self) -> list[AttemptExit]:
        """Attempts the latest listing shows ended (each reported once)."""
        now = self._clock()
        exits = []
        for key, a in list(self._attempts.items()):
            if a.failed_to_create:
                exits.append(AttemptExit(*key, EXITED, 127, now))
            elif self._listed_at is None or self._listed_at < a.created_at:
                continue  # not listed since it was created: no news yet
            else:
                name = job_name(*key)
                ended = replica_exit if a.replica else attempt_exit
                found = (self._deployments if a.replica else self._jobs).get((a.namespace, name))
                x = ended(*key, found, self._pods.get((a.namespace, name), []), a.stopped, now)
                if x is None:
                    continue
                exits.append(x)
                self._spawn(self._collect(a, stop=not a.stopped))
            del self._attempts[key]
        return exits

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        """Adopt what the database says runs; the next listing tells which ended."""
        for spec in specs:
            self._attempts.setdefault((spec.workload_id, spec.attempt), _Attempt(
                spec, namespace_for(spec.team, self.settings), 0.0,
                gang=len(spec.placement) > 1, replica=bool(spec.serving)))
        return []

    def running(self) -> set[tuple[str, int]]:
        return set(self._attempts)

    # ---- nodes ---------------------------------------------------------------------------
    def take_node_changes(self) -> list[Node]:
        """Nodes whose health or cordon changed since the last call (the
        engine hands them to the scheduler, which requeues work on broken ones)."""
        out, self._node_changes = self._node_changes, []
        return out

    def _update_nodes(self, nodes: list[Node]) -> None:
        for node in nodes:
            old = self._nodes.get(node.name)
            if old is not None and (old.healthy, old.drained, old.unhealthy_gpus) != \
                    (node.healthy, node.drained, node.unhealthy_gpus):
                self._node_changes.append(replace(old, healthy=node.healthy, drained=node.drained,
                                                  unhealthy_gpus=node.unhealthy_gpus))
            self._nodes[node.name] = node

    # ---- the loop's tasks ----------------------------------------------------------------
    async def refresh(self) -> None:
        started = self._clock()
        jobs, deployments, pods, nodes = await asyncio.gather(
            self.api.list_jobs(), self.api.list_deployments(), self.api.list_pods(),
            self.api.list_nodes())
        self._jobs = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in jobs}
        self._deployments = {(d["metadata"]["namespace"], d["metadata"]["name"]): d
                             for d in deployments}
        by_job: dict[tuple[str, str], list[dict]] = {}
        for p in pods:
            pod_labels = p["metadata"].get("labels") or {}
            owner = pod_labels.get("job-name") or pod_labels.get(LABEL_REPLICA)
            if owner:
                by_job.setdefault((p["metadata"]["namespace"], owner), []).append(p)
        self._pods = by_job
        self._update_nodes(nodes_from_k8s(nodes))
        self._listed_at = started

    async def run(self) -> None:
        """The refresh loop, for the service to run beside its own."""
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("listing jobs, pods and nodes failed; trying again")
            await asyncio.sleep(self.refresh_interval)

    def _spawn(self, coro) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait for the API calls in flight (tests; a clean shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _create(self, a: _Attempt, manifests: list[dict],
                      shared: Optional[dict] = None) -> None:
        """Create the attempt's objects; ``shared`` (a revision's Service)
        may exist already."""
        try:
            if shared is not None:
                await self.api.create(shared, exist_ok=True)
            for m in manifests:
                await self.api.create(m)
        except Exception as e:  # the API refused it: the attempt fails, visibly
            log.error("could not create %s: %s", manifests[-1]["metadata"]["name"], e)
            a.failed_to_create = str(e)

    async def _delete(self, a: _Attempt, grace: int) -> None:
        name = job_name(a.spec.workload_id, a.spec.attempt)
        try:
            if a.replica:
                await self.api.delete_deployment(name, a.namespace, grace)
            else:
                await self.api.delete_job(name, a.namespace, grace)
        except Exception as e:
            log.warning("could not delete %s: %s", name, e)

    async def _collect(self, a: _Attempt, stop: bool) -> None:
        """After the end: keep the pods' output in the attempt's log (what
        ``gpuhub logs`` reads), then delete the Job and rendezvous Service."""
        name = job_name(a.spec.workload_id, a.spec.attempt)
        texts = []
        for pod in sorted(self._pods.get((a.namespace, name), []),
                          key=lambda p: p["metadata"]["name"]):
            try:
                texts.append(await self.api.pod_log(pod["metadata"]["name"], a.namespace))
            except Exception as e:
                texts.append(f"[gpuhub: no log of pod {pod['metadata']['name']}: {e}]\n")
        if texts and a.spec.attempt_dir:
            os.makedirs(a.spec.attempt_dir, exist_ok=True)
            with open(os.path.join(a.spec.attempt_dir, "output.log"), "a") as f:
                f.write("".join(texts))
        if stop:
            await self._delete(a, 0)
        leftovers = []
        if a.gang:
            leftovers.append((self.api.delete_service, name))
        if a.replica:
            leftovers.append((self.api.delete_config_map, name))
            # The revision's Service goes with its last replica (a later
            # replica of the revision creates it again).
            service = revision_service_name(a.spec)
            if not any(o.replica and o.namespace == a.namespace
                       and revision_service_name(o.spec) == service
                       for o in self._attempts.values()):
                leftovers.append((self.api.delete_service, service))
        for delete, what in leftovers:
            try:
                await delete(what, a.namespace)
            except Exception as e:
                log.warning("could not delete %s: %s", what, e)

