"""Runs attempts as Kubernetes Jobs (``manifests``) and model replicas
as Deployments (``serving``), and reports how they end
(``status``), through a thin asynchronous API layer (``api.KubeApi``, on
``kubernetes_asyncio`` like KubeSpawner).

The engine calls backends synchronously from the event loop, so the API
calls are tasks: ``start``/``stop``/``kill`` schedule them. ``run`` lists
the GPU Hub Jobs, Deployments, their pods and the nodes once, then watches
them (``watch.Reflector``: bookmarks, relist on 410 Gone, reconnect with
backoff); ``poll`` answers from that cache, and an event that ends an
attempt wakes the engine at once. With ``watch`` off, ``run`` lists every
kind each ``refresh_interval`` instead. While someone follows an attempt's
log, its running pods' logs are followed into it (``logs.PodLogs``).

After a service restart ``recover`` adopts the Jobs the database says are
running; the first listing says which of them ended meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional

from ...scheduler.model import Node
from ..base import EXITED, AttemptExit, Backend, LaunchSpec, Started
from .api import KINDS, error_text
from .logs import PodLogs
from .manifests import KubeSettings, job_manifest, job_name, namespace_for, rendezvous_service
from .serving import (LABEL_REPLICA, replica_address, replica_exit, replica_manifests,
                      revision_service, revision_service_name)
from .status import attempt_exit, nodes_from_k8s
from .watch import Cache, Key, Reflector

log = logging.getLogger("gpuhub.kubernetes")


@dataclass
class _Attempt:
    spec: LaunchSpec
    namespace: str
    created_at: float           # 0: adopted after a restart
    stopped: bool = False
    failed_to_create: str = ""
    gang: bool = False
    replica: bool = False       # a model replica: a Deployment, not a Job
    seen: bool = False          # its Job (Deployment) has been listed or watched
    ended_at: Optional[float] = None   # first seen ended (its log may still be coming)


class KubernetesBackend(Backend):
    """Attempts as Kubernetes Jobs (and replica Deployments) on the nodes the
    scheduler chose; its API calls run as tasks on the event loop."""

    def __init__(self, settings: KubeSettings, api, clock: Callable[[], float] = time.time,
                 refresh_interval: float = 2.0, nodes: Iterable[Node] = (), watch: bool = True,
                 watch_timeout: int = 300, backoff_base: float = 0.5, backoff_cap: float = 30.0):
        self.settings = settings
        self.api = api
        self._clock = clock
        self.refresh_interval = refresh_interval
        self.watching = watch
        self.watch_timeout, self.backoff_base, self.backoff_cap = \
            watch_timeout, backoff_base, backoff_cap
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._names: dict[Key, tuple[str, int]] = {}    # (namespace, Job name) -> attempt
        # What the cluster said last, by kind (a list, kept current by a watch).
        self.caches = {kind: Cache() for kind in KINDS}
        self._pods: dict[Key, dict[str, dict]] = {}     # (namespace, owner) -> pods by name
        self._pod_owner: dict[Key, Key] = {}
        self._synced: dict[str, float] = {}              # kind -> start of its last full list
        self._list_started: dict[str, float] = {}
        self.reflectors: list[Reflector] = []
        self.logs = PodLogs(api, on_done=lambda: self._wake())
        self._log_readers: dict[tuple[str, int], int] = {}   # attempt -> open `logs -f`
        self._wake: Callable[[], None] = lambda: None
        # The nodes as the scheduler last heard of them.
        self._nodes: dict[str, Node] = {n.name: n for n in nodes}
        self._node_changes: list[Node] = []
        self._tasks: set[asyncio.Task] = set()

    # ---- the Backend contract ------------------------------------------------------------
    def start(self, spec: LaunchSpec) -> Started:
        """Create the attempt's Job (or replica); its ``ref`` is their name."""
        key = (spec.workload_id, spec.attempt)
        if key in self._attempts:
            raise ValueError(f"attempt {key} is already running")
        if spec.serving:
            return Started(spec.workload_id, spec.attempt, self._start_replica(spec))
        job = job_manifest(spec, self.settings)  # ValueError on a pool it cannot run
        service = rendezvous_service(spec, self.settings)
        self._track(_Attempt(spec, job["metadata"]["namespace"], self._clock(),
                             gang=service is not None))
        self._spawn(self._create(self._attempts[key], [m for m in (service, job) if m]))
        return Started(spec.workload_id, spec.attempt, job["metadata"]["name"])

    def _start_replica(self, spec: LaunchSpec) -> str:
        manifests = replica_manifests(spec, self.settings)
        name, namespace = manifests[-1]["metadata"]["name"], manifests[-1]["metadata"]["namespace"]
        a = self._track(_Attempt(spec, namespace, self._clock(), replica=True))
        self._spawn(self._create(a, manifests, shared=revision_service(spec, self.settings)))
        return name

    def _track(self, a: _Attempt) -> _Attempt:
        key = (a.spec.workload_id, a.spec.attempt)
        self._attempts[key] = a
        self._names[(a.namespace, job_name(*key))] = key
        return a

    def replica_address(self, workload_id: str, attempt: int, port: int) -> Optional[str]:
        """The replica pod's IP and port, once it runs (None before)."""
        a = self._attempts.get((workload_id, attempt))
        if a is None:
            return None
        return replica_address(self._pods_of(a.namespace, job_name(workload_id, attempt)))

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
        """Attempts the cluster shows ended (each reported once)."""
        now = self._clock()
        exits = []
        for key, a in list(self._attempts.items()):
            if a.failed_to_create:
                exits.append(AttemptExit(*key, EXITED, 127, now))
            else:
                x = self._exit_of(key, a, now)
                if x is None or self._log_coming(a, now):
                    continue
                exits.append(x)
                self._spawn(self._collect(a, stop=not a.stopped))
            del self._attempts[key]
            self._names.pop((a.namespace, job_name(*key)), None)
        return exits

    def _exit_of(self, key: tuple[str, int], a: _Attempt, now: float) -> Optional[AttemptExit]:
        listed = self._listed_at
        if not a.seen and (listed is None or listed < a.created_at):
            return None  # neither seen nor listed since it was created: no news yet
        name = job_name(*key)
        ended = replica_exit if a.replica else attempt_exit
        found = self.caches["deployments" if a.replica else "jobs"].objects.get((a.namespace, name))
        return ended(*key, found, self._pods_of(a.namespace, name), a.stopped, now)

    def _log_coming(self, a: _Attempt, now: float) -> bool:
        """Whether an ended attempt's pods' logs are still being followed: its
        end is reported once they are in (``finish_wait`` at the most), so
        that ``gpuhub logs -f`` ends with the last line."""
        pods = [p["metadata"]["name"] for p in self._pods_of(a.namespace, job_name(
            a.spec.workload_id, a.spec.attempt))]
        if not self.logs.following(a.namespace, pods):
            return False
        if a.ended_at is None:
            a.ended_at = now
        return now - a.ended_at < self.logs.finish_wait

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        """Adopt what the database says runs; the next listing tells which ended."""
        for spec in specs:
            if (spec.workload_id, spec.attempt) not in self._attempts:
                self._track(_Attempt(spec, namespace_for(spec.team, self.settings), 0.0,
                                     gang=len(spec.placement) > 1, replica=bool(spec.serving)))
        return []

    def running(self) -> set[tuple[str, int]]:
        return set(self._attempts)

    def log_followed(self, workload_id: str, attempt: int, following: bool) -> None:
        """While someone follows the attempt's log (``gpuhub logs -f``), its
        running pods' logs are followed into the attempt's log; when the last
        one stops, so do the follows (what was copied stays counted)."""
        key = (workload_id, attempt)
        readers = self._log_readers.get(key, 0) + (1 if following else -1)
        if readers > 0:
            self._log_readers[key] = readers
        else:
            self._log_readers.pop(key, None)
        a = self._attempts.get(key)
        if a is None:
            return
        pods = self._pods_of(a.namespace, job_name(*key))
        if readers > 0:
            for pod in pods:
                self._follow_pod(a, pod)
        else:
            self.logs.stop(a.namespace, [p["metadata"]["name"] for p in pods])

    def _follow_pod(self, a: _Attempt, pod: dict) -> None:
        if not a.replica and a.spec.attempt_dir and \
                (pod.get("status") or {}).get("phase") == "Running":
            self.logs.follow(a.namespace, pod["metadata"]["name"],
                             self.log_path(a.spec.attempt_dir))

    def set_wake(self, wake: Callable[[], None]) -> None:
        """``wake()`` runs a scheduling cycle soon: called when a watch
        event ends an attempt or changes a node, so that it is acted on at
        once rather than at the next cycle."""
        self._wake = wake

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

    # ---- what the cluster says -------------------------------------------------------------
    @property
    def _listed_at(self) -> Optional[float]:
        """When the oldest of the latest full lists of each kind began."""
        return min(self._synced.values()) if len(self._synced) == len(KINDS) else None

    def _pods_of(self, namespace: str, owner: str) -> list[dict]:
        return list(self._pods.get((namespace, owner), {}).values())

    def _index_pod(self, key: Key, pod: Optional[dict]) -> Optional[Key]:
        """Keep pods grouped by their Job (or replica); returns the group."""
        owner = self._pod_owner.pop(key, None)
        if owner is not None:
            group = self._pods.get(owner, {})
            group.pop(key[1], None)
            if not group:
                self._pods.pop(owner, None)
        if pod is None:
            return owner
        labels = pod["metadata"].get("labels") or {}
        name = labels.get("job-name") or labels.get(LABEL_REPLICA)
        if not name:
            return None
        owner = (key[0], name)
        self._pod_owner[key] = owner
        self._pods.setdefault(owner, {})[key[1]] = pod
        return owner

    def _changed(self, kind: str, key: Key, obj: Optional[dict]) -> None:
        """One object changed (a watch event, or a difference a list found)."""
        if kind == "nodes":
            if obj is not None:
                self._update_nodes(nodes_from_k8s([obj]))
                if self._node_changes:
                    self._wake()
            return
        owner = self._index_pod(key, obj) if kind == "pods" else key
        attempt = self._names.get(owner) if owner else None
        a = self._attempts.get(attempt) if attempt else None
        if a is None:
            return
        if kind != "pods" and obj is not None:
            a.seen = True
        if kind == "pods" and obj is not None and self._log_readers.get(attempt):
            self._follow_pod(a, obj)
        if self._exit_of(attempt, a, self._clock()) is not None:
            self._wake()

    async def _list(self, kind: str) -> tuple[list[dict], str]:
        self._list_started[kind] = self._clock()
        return await self.api.list_kind(kind)

    def _listed(self, kind: str) -> None:
        self._synced[kind] = self._list_started[kind]

    # ---- the loop's tasks ----------------------------------------------------------------
    async def refresh(self) -> None:
        """List every kind once (the polling mode's cycle; tests)."""
        answers = await asyncio.gather(*(self._list(kind) for kind in KINDS))
        for kind, (items, version) in zip(KINDS, answers):
            for key, obj in self.caches[kind].replace(items, version).items():
                self._changed(kind, key, obj)
            self._listed(kind)

    async def run(self) -> None:
        """For the service to run beside its own loop: the watches (list
        once, then watch each kind), or with ``watch`` off a list of each
        kind every ``refresh_interval``."""
        if self.watching:
            self.reflectors = [Reflector(
                kind, self._list, lambda k, version: self.api.watch(k, version, self.watch_timeout),
                self._changed, self._listed, cache=self.caches[kind],
                backoff_base=self.backoff_base, backoff_cap=self.backoff_cap) for kind in KINDS]
            await asyncio.gather(*(r.run() for r in self.reflectors))
            return
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
            a.failed_to_create = error_text(e)   # never empty: it marks the attempt failed
            log.error("could not create %s: %s", manifests[-1]["metadata"]["name"],
                      a.failed_to_create)
            self._wake()

    async def _delete(self, a: _Attempt, grace: int) -> None:
        name = job_name(a.spec.workload_id, a.spec.attempt)
        try:
            if a.replica:
                await self.api.delete_deployment(name, a.namespace, grace)
            else:
                await self.api.delete_job(name, a.namespace, grace)
        except Exception as e:
            log.warning("could not delete %s: %s", name, error_text(e))

    async def _collect(self, a: _Attempt, stop: bool) -> None:
        """After the end: the rest of the pods' output into the attempt's log
        (what ``gpuhub logs`` reads), then delete the Job and rendezvous Service."""
        name = job_name(a.spec.workload_id, a.spec.attempt)
        pods = [p["metadata"]["name"] for p in self._pods_of(a.namespace, name)]
        await self.logs.collect(a.namespace, pods,
                                self.log_path(a.spec.attempt_dir) if a.spec.attempt_dir else "")
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
                log.warning("could not delete %s: %s", what, error_text(e))
