"""Keeps each deployment's replicas as its traffic and load want them.

Every second: for each deployment and revision, the replicas it should run
(``serving.autoscale``) against the replica workloads it has; missing ones
are queued in the scheduler (within the team's nominal quota only: a
deployment is never admitted on borrowed GPUs it could lose, so a scale-up
past the quota is refused and says so), extra ones stopped. Replicas that
run are probed for their model's readiness; only ready ones get requests,
and one that served and then stays not ready is stopped and placed again.
A canary whose errors or p99 latency cross the deployment's rollback rule is
rolled back. What is measured (requests in flight, latency windows) lives in
memory: after a restart the windows start empty.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

from sqlalchemy import select
from tornado import httpclient

from gpuspawner.isolation.accounts import passages
from gpuspawner.scheduler.model import DEPLOYMENT
from gpuspawner.serving.autoscale import ScalePolicy, desired_replicas, split
from gpuspawner.serving.guard import ReplicaKeys
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.serving.replica import (model_ready_path, model_settings, server_settings,
                               write_replica_dir)
from gpuspawner.serving.traffic import (RollbackRule, Series, SmoothWeighted, Window, least_busy,
                               rollback_reason)
from gpuspawner.store import DeploymentRow, RevisionRow, WorkloadRow
from gpuspawner.service.serving.deployments import Deployments
from gpuspawner.service.loop.facades import Facades
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.records import gpu_units
from gpuspawner.vocab.states import QUEUED, RUNNING, STOPPING

log = logging.getLogger("gpuhub.serving")
CONTROLLER = Identity("gpuhub-deployments", admin=True, can_submit=True)
LOAD_WINDOW = 10.0  # seconds of in-flight samples the autoscaler averages


@dataclass
class Replica:
    workload_id: str
    deployment_id: int
    revision: int
    url: str
    attempt: int = 0
    model: str = ""  # the name MLServer serves it under
    ready: bool = False
    in_flight: int = 0
    # When the probe last found it ready (None: not yet, in this service).
    last_ready: Optional[float] = None
    # The replica's key (serving/guard.py): without it, it answers 401.
    headers: dict = field(default_factory=dict)


@dataclass
class DeploymentLoad:
    samples: deque = field(default_factory=deque)   # (time, requests in flight)
    last_request: float = 0.0
    wrr: SmoothWeighted = field(default_factory=SmoothWeighted)


def replica_units(dep: DeploymentRow) -> float:
    """GPU units one replica of ``dep`` holds: its share, or its GPUs."""
    return dep.gpu_share or dep.gpus


@dataclass(frozen=True)
class ReplicaHost:
    """What serving needs of the loop besides the facades (the app wires it,
    ``wiring.serving_controller``)."""
    # (workload, attempt, port) -> where that replica answers, as its backend placed it.
    address: Callable[[str, int, int], Optional[str]]
    # (workload, attempt, why): stop a replica that no longer serves; it is placed again.
    replace: Callable[[str, int, str], None]


class ServingController:
    def __init__(self, facades: Facades, host: ReplicaHost, clock=time.time,
                 unready_seconds: float = 30.0):
        self.records, self.cluster = facades.records, facades.cluster
        self.submissions = facades.submissions
        self.host = host
        self.deployments = Deployments(facades)
        self.keys = ReplicaKeys(facades.records.data_dir)
        self.clock = clock
        # A replica that served and then stays not ready this long (its
        # model was unloaded, its runtime wedged) is replaced; 0: never.
        self.unready_seconds = unready_seconds
        self.replicas: dict[str, Replica] = {}
        # What each replica asks for besides GPUs (CPUs, memory; the app
        # sets WorkloadResources.deployment): the scheduler admits on it,
        # the cgroup holds the replica to it.
        self.replica_resources: dict = {}
        self.windows: dict[tuple[int, int], Window] = {}
        # (deployment, revision) -> the last ten minutes in 5 s buckets, for
        # the live charts (in memory, like the windows).
        self.series: dict[tuple[int, int], Series] = {}
        self.load: dict[int, DeploymentLoad] = {}
        self.http = httpclient.AsyncHTTPClient()
        self._asked: dict[tuple[str, str], int] = {}
        # (team, name) -> the deployment as last read: the router's view,
        # refreshed every reconcile and after every change through the API.
        self.by_name: dict[tuple[str, str], DeploymentRow] = {}
        self._session = None
        self.metrics = None  # ServiceMetrics, for Prometheus (set by the service)

    @property
    def session(self):
        """One pooled, keep-alive HTTP client for the router (a new TCP
        connection per request would cost more than the model)."""
        import aiohttp
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=512),
                timeout=aiohttp.ClientTimeout(total=120))
        return self._session

    def reload(self) -> None:
        with self.records.store.session() as s:
            self.by_name = {(d.team, d.name): d for d in s.scalars(select(DeploymentRow))}

    # ---- what the router asks --------------------------------------------------------------
    def ready_replicas(self, dep_id: int, revision: Optional[int] = None) -> list[Replica]:
        return [r for r in self.replicas.values() if r.deployment_id == dep_id and r.ready
                and (revision is None or r.revision == revision)]

    def choose(self, dep: DeploymentRow) -> Optional[Replica]:
        """A revision by the traffic weights (among those with a ready
        replica), then its least busy replica."""
        weights = {int(r): w for r, w in dep.traffic.items()
                   if self.ready_replicas(dep.id, int(r))}
        rev = self.load_of(dep.id).wrr.choose(weights)
        if rev is None:
            return None
        ready = self.ready_replicas(dep.id, rev)
        wid = least_busy({r.workload_id: r.in_flight for r in ready}, [r.workload_id for r in ready])
        return self.replicas[wid]

    def load_of(self, dep_id: int) -> DeploymentLoad:
        return self.load.setdefault(dep_id, DeploymentLoad())

    def record(self, dep: DeploymentRow, replica: Replica, latency: float, status: int) -> None:
        """One answered request: a 5xx is an error (the rollback rule's)."""
        now = self.clock()
        key = (replica.deployment_id, replica.revision)
        self.windows.setdefault(key, Window()).add(now, latency, status >= 500)
        self.series.setdefault(key, Series()).add(now, latency, status >= 500)
        if self.metrics is not None:
            self.metrics.endpoint_request(dep.team, dep.name, replica.revision, status, latency)

    def stats(self, dep_id: int, revision: int) -> dict:
        return self.windows.get((dep_id, revision), Window()).summary(self.clock())

    def history(self, dep_id: int, revisions: list[int], seconds: float) -> dict[int, list[dict]]:
        now = self.clock()
        return {n: self.series.get((dep_id, n), Series()).points(now, seconds) for n in revisions}

    def _sample_replicas(self, now: float, dep_id: int, revision: int) -> None:
        mine = [r for r in self.replicas.values()
                if r.deployment_id == dep_id and r.revision == revision]
        self.series.setdefault((dep_id, revision), Series()).replicas(
            now, sum(1 for r in mine if r.ready), sum(r.in_flight for r in mine))

    # ---- the loop --------------------------------------------------------------------------
    async def run(self, interval: float = 1.0) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception:
                log.exception("reconciling deployments failed")
            await asyncio.sleep(interval)

    async def reconcile(self) -> None:
        # Its reads are made in a worker thread: on PostgreSQL each is a round
        # trip, and a server busy with the intake's commits kept the event
        # loop waiting every second (5% of its time while a queue filled).
        # Mostly no revision waits, and releasing one takes the write turn,
        # which the cycle's worker may hold writing 500 waiting reasons: with
        # 10,000 queued the loop waited up to 55 ms a second for it.
        if await asyncio.to_thread(self.deployments.any_waiting):
            self.deployments.release_waiting()  # dependencies now met (or never)
        now = self.clock()
        deps, revisions, rows = await asyncio.to_thread(self._read)
        self.by_name = {(d.team, d.name): d for d in deps.values()}
        by_rev: dict[tuple[int, int], list[WorkloadRow]] = {}
        for row in rows:
            key = (row.spec.get("deployment"), row.spec.get("revision"))
            if key[0] not in deps:
                if row.state != STOPPING:  # asked once; it is on its way out
                    self._stop(row, "its deployment was deleted")
                continue
            by_rev.setdefault(key, []).append(row)
        self._track(rows)
        # GPUs replicas already asked for but not yet got: they count against
        # the quota a scale-up is checked with.
        self._asked = {}
        for row in rows:
            if row.state == QUEUED:
                key = (row.team, row.pool)
                self._asked[key] = self._asked.get(key, 0) + gpu_units(row)
        for dep in deps.values():
            self._scale(dep, revisions, by_rev, now)
            self._maybe_roll_back(dep)
        await self._probe()
        # After the probe: the charts show a replica ready as soon as it serves.
        for dep_id, number in sorted(revisions):
            if dep_id in deps:
                self._sample_replicas(now, dep_id, number)

    def _read(self) -> tuple[dict, dict, list[WorkloadRow]]:
        """The deployments, their revisions and their replicas' workloads."""
        with self.records.store.session() as s:
            deps = {d.id: d for d in s.scalars(select(DeploymentRow))}
            revisions = {(r.deployment_id, r.number): r for r in s.scalars(select(RevisionRow))}
            rows = list(s.scalars(select(WorkloadRow).where(
                WorkloadRow.kind == DEPLOYMENT,
                WorkloadRow.state.in_((QUEUED, RUNNING, STOPPING)))))
        return deps, revisions, rows

    def _track(self, rows: list[WorkloadRow]) -> None:
        running = {r.id: r for r in rows if r.state == RUNNING}
        for wid in list(self.replicas):
            if wid not in running:
                del self.replicas[wid]
        for wid, row in running.items():
            if wid in self.replicas and self.replicas[wid].attempt != row.attempt:
                del self.replicas[wid]  # replaced: a new process, maybe elsewhere
            if wid not in self.replicas:
                # The backend knows where it listens (on a cluster: once its
                # pod has an address; until then it gets no requests).
                address = self.host.address(wid, row.attempt, row.spec["port"])
                if address:
                    self.replicas[wid] = Replica(wid, row.spec["deployment"],
                                                 row.spec["revision"], f"http://{address}",
                                                 attempt=row.attempt,
                                                 model=row.spec["serving"]["name"],
                                                 headers=self.keys.headers(wid, row.attempt))

    def _scale(self, dep: DeploymentRow, revisions: dict, by_rev: dict, now: float) -> None:
        load = self.load_of(dep.id)
        in_flight = sum(r.in_flight for r in self.replicas.values() if r.deployment_id == dep.id)
        load.samples.append((now, in_flight))
        while load.samples and load.samples[0][0] < now - LOAD_WINDOW:
            load.samples.popleft()
        average = sum(n for _, n in load.samples) / len(load.samples)
        policy = ScalePolicy(dep.min_replicas, dep.max_replicas, dep.target_in_flight,
                             dep.scale_to_zero_after, dep.gpus)
        idle = now - max(load.last_request, dep.updated_at)
        total, why = desired_replicas(policy, average, idle)
        want = split(total, {int(r): w for r, w in dep.traffic.items()})
        messages = []
        for (dep_id, number), rev in sorted(revisions.items()):
            if dep_id != dep.id:
                continue
            active = [r for r in by_rev.get((dep.id, number), []) if r.state != STOPPING]
            for row in [r for r in active if r.user != rev.created_by]:
                # Started as another user (the owner, before revisions ran as
                # their authors): replaced rather than left running as them.
                self._stop(row, f"runs as {row.user}, not as revision {number}'s author "
                                f"{rev.created_by}")
            active = [r for r in active if r.user == rev.created_by]
            need = want.get(number, 0)
            for _ in range(need - len(active)):
                refused = self._quota_refusal(dep)
                if refused:
                    messages.append(refused)
                    break
                self._start_replica(dep, rev)
                key = (dep.team, dep.pool)
                self._asked[key] = self._asked.get(key, 0) + replica_units(dep)
            for row in sorted(active, key=lambda r: r.submitted_at, reverse=True)[:max(0, len(active) - need)]:
                self._stop(row, f"scaled down ({why})")
        message = "; ".join(messages) or f"{total} replica(s): {why}"
        if message != dep.message and (messages or dep.message.startswith("scale-up refused")):
            with self.records.store.transaction() as s:
                row = s.get(DeploymentRow, dep.id)
                if row is not None:
                    row.message = message

    def _quota_refusal(self, dep: DeploymentRow) -> Optional[str]:
        need = replica_units(dep)
        if not need:
            return None
        ledger = self.cluster.state.ledger
        used = ledger.used.get((dep.team, dep.pool), 0) + self._asked.get((dep.team, dep.pool), 0)
        nominal = ledger.quota(dep.team, dep.pool).nominal
        if used + need <= nominal:
            return None
        return (f"scale-up refused: team {dep.team} holds {used:g} of its {nominal} nominal "
                f"{dep.pool} GPUs and a replica needs {need:g}; deployments run within "
                f"nominal quota only")

    def _start_replica(self, dep: DeploymentRow, rev: RevisionRow) -> None:
        wid = "w" + secrets.token_hex(6)
        port = ports_below_ephemeral(3)
        rdir = os.path.join(self.records.data_dir, "deployments", dep.team, dep.name,
                            f"r{rev.number}", wid)
        model = model_settings(dep.name, rev.model_dir, rev.runtime, rev.predictor,
                               rev.max_batch_size, rev.max_batch_time, f"r{rev.number}")
        server = server_settings(port)
        argv = write_replica_dir(rdir, model, server)
        # deployments/<team>/... lists no deployment or replica to other
        # users; each replica's account passes through to its own directory.
        passages(os.path.join(self.records.data_dir, "deployments"), rdir)
        # The revision's code runs as its author, not as the deployment's
        # owner: a lead's revision of bob's deployment must not get bob's
        # account (his files, his tokens). Its model_dir was checked to be
        # in the author's workspace (Deployments._model_dir).
        row = WorkloadRow(
            id=wid, name=f"{dep.name}-r{rev.number}", kind=DEPLOYMENT, team=dep.team,
            user=rev.created_by, project=f"deployment:{dep.name}", pool=dep.pool,
            gpus_per_node=dep.gpus, gpu_share=dep.gpu_share or 0.0, num_nodes=1,
            priority="production", time_limit=None,
            grace_period=10.0, state=QUEUED, reason="queued", attempt=0, preempted_by=[],
            submitted_at=self.clock(),
            spec={**({"resources": self.replica_resources} if self.replica_resources else {}),
                  "command": argv, "working_dir": rdir, "checkpoint_dir": rdir, "env": {},
                  "deployment": dep.id, "revision": rev.number, "port": port,
                  "serving": {"name": dep.name, "revision": rev.number, "server": server,
                              "model": model}})
        self.submissions.queue_row(row, CONTROLLER.name)

    def _stop(self, row: WorkloadRow, why: str) -> None:
        replica = self.replicas.pop(row.id, None)
        if replica is not None:
            replica.ready = False
        try:
            self.submissions.cancel(CONTROLLER, row.id)
        except Exception as e:  # already ending
            log.debug("stopping replica %s: %s", row.id, e)
        log.info("stopping replica %s: %s", row.id, why)

    def _maybe_roll_back(self, dep: DeploymentRow) -> None:
        canary = self.deployments.canary(dep)
        if canary is None or not dep.rollback:
            return
        reason = rollback_reason(self.stats(dep.id, canary), RollbackRule(**dep.rollback))
        if reason:
            self.deployments.rollback(CONTROLLER, dep.team, dep.name,
                                      why=f"automatic rollback of revision {canary}: {reason}")
            self.windows.pop((dep.id, canary), None)

    async def _probe(self) -> None:
        """Ask every replica, all at once (one at a time, ten starting
        replicas would hold the loop 10 s), whether its model is ready: the
        model's own readiness, not the server's (a server whose model was
        unloaded is up but cannot infer). A ready replica that is merely slow
        to answer keeps its state; any other answer, or none, is not ready."""
        async def probe(r: Replica) -> None:
            try:
                resp = await self.http.fetch(r.url + model_ready_path(r.model), headers=r.headers,
                                             request_timeout=1.0, raise_error=False)
                r.ready = resp.code == 200
            except httpclient.HTTPClientError:  # 599: it timed out
                pass  # slow, not gone: it stays as it was
            except Exception:  # refused, reset, closed while it shuts down: not ready
                r.ready = False
        await asyncio.gather(*(probe(r) for r in list(self.replicas.values())))
        now = self.clock()
        for r in list(self.replicas.values()):
            if r.ready:
                r.last_ready = now
            elif r.last_ready is not None and self.unready_seconds \
                    and now - r.last_ready > self.unready_seconds:
                r.last_ready = None  # asked once: the loop stops it
                self.host.replace(r.workload_id, r.attempt,
                                            f"served, then was not ready for "
                                            f"{self.unready_seconds:.0f} s")
