"""Trace-driven simulation: replay jobs through the real core on a virtual clock.

Events (submissions, job exits, preempted jobs leaving at the end of their
grace period, a waiting job's preemption delay running out) are processed in
time order; after each batch of events at
one instant the scheduler runs one cycle and its decisions are applied, as
the service would. A preempted job keeps the progress it made (it resumes
from its checkpoint) but pays ``restart_cost_s`` on every restart.

A trace with GPU shares (``gpu_share``) is replayed with sharing on pools
that split their GPUs (``share_units``), or with ``sharing=False`` as if
every share asked for a whole GPU; the figures of ``metrics.SharingMeter`` say
what sharing saved and what it cost.
"""
from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..scheduler import JOB, NOTEBOOK, Scheduler, Workload, events as ev
from ..scheduler.invariants import check_all
from ..scheduler.kinds import preemption_wait
from ..scheduler.policy import Policy
from ..scheduler.quota import QuotaLedger
from .cluster import Cluster
from gpuspawner.scheduler.workflow.dependencies import FAILED, STOPPED, SUCCEEDED
from .metrics import JobRecord, SharingMeter, summarize
from .pipelines import Pipelines, sweep_indices
from .trace import TraceJob

if TYPE_CHECKING:
    from .estimates import StartEstimates

# Ties at one instant: submissions first. WAKE is a cycle the service's timer
# would run: when a waiting workload's preemption delay is over.
SUBMIT, EXIT, LEAVE, WAKE = 0, 1, 2, 3
GIB = 1 << 30


class SimulationError(ValueError):
    pass


class ShapeError(SimulationError):
    """A job whose GPUs cannot be laid out on the cluster's nodes: it is
    rejected (with this message), the replay goes on."""


@dataclass
class _Job:
    trace: TraceJob
    workload: Optional[Workload]
    remaining: float
    record: JobRecord
    started_at: Optional[float] = None
    token: int = 0  # invalidates a scheduled exit when the job is preempted
    preempted_at: Optional[float] = None


@dataclass
class SimResult:
    policy: str
    metrics: dict
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    records: list[JobRecord] = field(default_factory=list)


def split_over_nodes(gpus: int, gpus_per_node: int, nodes_in_pool: int) -> Optional[int]:
    """How many nodes a job of ``gpus`` GPUs spans: the fewest that hold an
    equal share each (20 GPUs on 8-GPU nodes: 4 × 5), None if no count up to
    ``nodes_in_pool`` does."""
    for nodes in range(max(1, math.ceil(gpus / gpus_per_node)), min(gpus, nodes_in_pool) + 1):
        if gpus % nodes == 0:
            return nodes
    return None


@dataclass(frozen=True)
class PoolShapes:
    """Per pool, the GPUs of its largest node and its number of nodes: what
    splitting a job over nodes needs (worked out once per replay, not per job)."""

    gpus_per_node: dict[str, int]
    nodes: dict[str, int]

    @classmethod
    def of(cls, cluster: Cluster) -> "PoolShapes":
        nodes: dict[str, int] = {}
        for n in cluster.nodes:
            nodes[n.pool] = nodes.get(n.pool, 0) + 1
        return cls(cluster.pool_gpus_per_node(), nodes)


def to_workload(job: TraceJob, cluster: Cluster, sweep_index: Optional[int] = None,
                sharing: bool = True, shapes: Optional[PoolShapes] = None) -> Workload:
    """The trace job as the scheduler sees it; without ``sharing`` a share
    asks for a whole GPU. ``shapes``: ``PoolShapes.of(cluster)``, for a
    caller converting many jobs."""
    shapes = shapes or PoolShapes.of(cluster)
    gpn = shapes.gpus_per_node
    pool = job.gpu_type or next(iter(gpn))
    if pool not in gpn:
        raise SimulationError(f"job {job.job_id}: gpu_type {pool!r} is not a pool of the cluster "
                              f"({', '.join(gpn)})")
    if job.num_nodes:
        nodes = job.num_nodes
        if job.num_gpus % nodes:
            raise ShapeError(f"job {job.job_id}: {job.num_gpus} GPUs do not split evenly over "
                             f"the {nodes} nodes its num_nodes asks for")
    else:
        count = shapes.nodes[pool]
        nodes = split_over_nodes(job.num_gpus, gpn[pool], count)
        if nodes is None:
            raise ShapeError(f"job {job.job_id}: {job.num_gpus} GPUs do not split into equal "
                             f"shares of at most {gpn[pool]} over at most {count} {pool} nodes")
    return Workload(
        id=job.job_id, team=job.team, user=job.user, pool=pool, kind=job.kind or JOB,
        gpus_per_node=job.num_gpus // nodes, num_nodes=nodes,
        submit_time=job.submit_time_s, priority=job.priority or "",
        time_limit=job.time_limit_s, topology="preferred" if nodes > 1 else "none",
        sweep_index=sweep_index, gpu_share=(job.gpu_share or 0.0) if sharing else 0.0,
        cpus=job.cpus or 0.0, memory=round((job.memory_gib or 0.0) * GIB))


def _asks_at_least(pending: Iterable[Workload], idle: float) -> bool:
    """The waiting workloads ask for at least ``idle`` GPUs (units) in all."""
    asked = 0.0
    for w in pending:
        asked += w.gpu_units
        if asked >= idle:
            return True
    return idle <= 0


def simulate(trace: list[TraceJob], cluster: Cluster, policy: Policy, *,
             restart_cost_s: float = 60.0, check: bool = False,
             estimates: Optional["StartEstimates"] = None,
             progress: Optional[Callable[[float], None]] = None,
             sharing: bool = True) -> SimResult:
    """Replay ``trace``; ``estimates`` (``sim.estimates.StartEstimates``),
    when given, measures start estimates along the way. ``progress`` is
    called now and then with the share of the replay done (0 to 1: half for
    the submissions, half for the jobs ending); what it raises ends the
    replay (a cancel). ``sharing=False`` rounds every GPU share up to a
    whole GPU."""
    wall = time.perf_counter()
    sched = Scheduler(cluster.nodes, cluster.teams, policy)
    # Independent accounting of the cluster's quotas, whatever the policy enforces.
    quotas = QuotaLedger(cluster.capacity, {t.name: t for t in cluster.teams})
    violations = 0
    jobs: dict[str, _Job] = {}
    queue: list = []
    seq = itertools.count()
    pipelines = Pipelines(trace)
    indices = sweep_indices(trace)
    shapes = PoolShapes.of(cluster)
    rejected_at_start = []
    for job in trace:
        record = JobRecord(job.job_id, job.team, job.submit_time_s, job.duration_s, job.num_gpus,
                           kind=job.kind or JOB, gpu_share=job.gpu_share or 0.0)
        try:
            w = to_workload(job, cluster, indices.get(job.job_id), sharing, shapes)
        except ShapeError as e:
            record.rejected = str(e)
            jobs[job.job_id] = _Job(job, None, job.duration_s, record)
            rejected_at_start.append(job.job_id)
            continue
        jobs[job.job_id] = _Job(job, w, job.duration_s, record)
        heapq.heappush(queue, (job.submit_time_s, SUBMIT, next(seq), job.job_id, 0))

    in_use: dict[str, float] = {}
    timeline: list[tuple[float, dict[str, float]]] = []
    # Only for traces that ask for shares: no cost for the others.
    meter = SharingMeter() if any(job.gpu_share for job in trace) else None
    backlog_time = busy_backlog = 0.0
    # The part of the backlog that could use every idle GPU (the waiting work
    # asks for at least as many GPUs as are idle): what is idle then is lost
    # to placement and order, not to a lack of work (a trace's drain-down tail,
    # one big gang waiting on a half-empty cluster).
    saturated_time = busy_saturated = 0.0
    last_t = trace[0].submit_time_s if trace else 0.0
    capacity = cluster.total_gpus
    preemptions = cycles = 0
    history: list[ev.Event] = []
    problems: list[str] = []
    ended = sum(1 for j in jobs.values() if j.workload is None)
    submitted_count = 0
    released: list[str] = []

    def job_ended(wid: str, state: str, now: float) -> None:
        """What waits for it may go, or never will (cancelled, as ended)."""
        nonlocal ended
        go, cancelled = pipelines.ended(wid, state, now)
        released.extend(go)
        for cid, why in cancelled:
            jobs[cid].record.rejected = f"cancelled: {why}"
            ended += 1
    for wid in rejected_at_start:
        job_ended(wid, FAILED, jobs[wid].trace.submit_time_s)

    woken: list[str] = []

    def wake_after_delay(w: Workload, now: float) -> None:
        """The cycle the service's timer runs when ``w``'s preemption delay is
        over: without it the replay would wait for the next event to preempt."""
        wait = preemption_wait(w, policy.preemption_delay) if policy.preemption else 0.0
        if wait > 0:
            heapq.heappush(queue, (now + wait, WAKE, next(seq), w.id, 0))

    while queue:
        if progress is not None and cycles % 64 == 0:
            progress((submitted_count + ended) / (2 * len(trace)))
        now = queue[0][0]
        if sched.state.pending:
            backlog_time += now - last_t
            busy = sum(in_use.values())
            busy_backlog += (now - last_t) * busy / capacity
            if _asks_at_least(sched.state.pending.values(), capacity - busy):
                saturated_time += now - last_t
                busy_saturated += (now - last_t) * busy / capacity
        if meter is not None:
            meter.advance(now)
        last_t = now
        submitted = []
        woken_only = True
        while queue and queue[0][0] == now:
            _, kind, _, wid, token = heapq.heappop(queue)
            job = jobs[wid]
            if kind == WAKE:
                woken.append(wid)
                continue
            if kind == SUBMIT:
                submitted_count += 1
                if pipelines.blocked(wid):
                    continue  # waits outside the scheduler, holding nothing
                woken_only = False
                submitted.append(wid)
                e = sched.submit(job.workload, now)
                if e.type == ev.REJECTED:
                    job.record.rejected = e.message
                    ended += 1
                    job_ended(wid, FAILED, now)
                else:
                    wake_after_delay(job.workload, now)
            elif token != job.token:
                continue  # exit of an attempt that was preempted meanwhile
            else:
                woken_only = False
                job.record.run_time += now - job.started_at
                w = sched.state.running[wid].workload
                if kind == LEAVE and w.kind == NOTEBOOK:
                    # A preempted notebook server is stopped by its spawner,
                    # not started again elsewhere.
                    sched.finished(wid, now, requeue=False)
                    job.record.finish = now
                    ended += 1
                    job_ended(wid, STOPPED, now)
                elif kind == LEAVE:
                    sched.finished(wid, now, requeue=True)
                    job.remaining += restart_cost_s
                    # The grace period ran without progress, the restart repeats work.
                    job.record.lost_gpu_s += w.gpu_units * (now - job.preempted_at + restart_cost_s)
                else:
                    sched.finished(wid, now, requeue=False)
                    if estimates is not None:
                        estimates.finished(w, job.trace.duration_s)
                    job.record.finish = now
                    job.record.timed_out = job.remaining > (w.time_limit or math.inf)
                    ended += 1
                    job_ended(wid, FAILED if job.record.timed_out else SUCCEEDED, now)
                in_use[w.team] -= w.gpu_units
                quotas.charge(w.team, w.pool, -w.gpu_units)
        while released:  # their dependencies were met just now
            wid = released.pop(0)
            submitted.append(wid)
            # Eligible from now (as the service's eligible_at): ordered and aged from its release.
            jobs[wid].workload = replace(jobs[wid].workload, submit_time=now)
            woken_only = False
            if sched.submit(jobs[wid].workload, now).type == ev.REJECTED:
                jobs[wid].record.rejected = "rejected"
                ended += 1
                job_ended(wid, FAILED, now)
            else:
                wake_after_delay(jobs[wid].workload, now)
        if woken_only and not any(wid in sched.state.pending for wid in woken):
            woken.clear()
            continue  # what the timer woke for has started meanwhile: nothing to decide
        woken.clear()
        result = sched.cycle(now, explain=check)
        sched.apply_result(result, now)
        cycles += 1
        if estimates is not None:
            estimates.after_cycle(sched, now, submitted)
        for e in result.events:
            job = jobs[e.workload_id]
            if e.type == ev.ADMITTED:
                w = sched.state.running[e.workload_id].workload
                job.started_at = now
                if job.record.first_start is None:
                    job.record.first_start = now
                    if estimates is not None:
                        estimates.started(w.id, now)
                job.token += 1
                run_for = min(job.remaining, w.time_limit or math.inf)
                heapq.heappush(queue, (now + run_for, EXIT, next(seq), w.id, job.token))
                in_use[w.team] = in_use.get(w.team, 0) + w.gpu_units
                quotas.charge(w.team, w.pool, w.gpu_units)
                q = quotas.quota(w.team, w.pool)
                if quotas.used[(w.team, w.pool)] > q.ceiling or not quotas.borrowing_ok(w.pool):
                    violations += 1
            elif e.type == ev.PREEMPTED:
                preemptions += 1
                job.record.preemptions += 1
                done = now - job.started_at
                if job.remaining - done > e.kill_at - now:  # still running at the kill
                    job.remaining -= done
                    job.preempted_at = now
                    job.token += 1
                    heapq.heappush(queue, (e.kill_at, LEAVE, next(seq), e.workload_id, job.token))
        if meter is not None:
            meter.observe(sched.state)
        if check:
            history.extend(result.events)
            found = check_all(sched.state, policy, result.reservations, history,
                              result.quota_holds)
            problems.extend(f"t={now:.0f}: {p}" for p in found)
        if not timeline or timeline[-1][1] != in_use:
            timeline.append((now, {t: g for t, g in in_use.items() if g}))

    records = [j.record for j in jobs.values()]
    metrics = summarize(records)
    if meter is not None:
        metrics.update(meter.summary(records, sharing))
    metrics.update({
        "policy": policy.name,
        "utilization_backlog": busy_backlog / backlog_time if backlog_time else 1.0,
        "utilization_saturated": busy_saturated / saturated_time if saturated_time else 1.0,
        "preemptions": preemptions,
        "quota_violations": violations,
        "cycles": cycles,
        "wall_s": time.perf_counter() - wall,
    })
    sweeps, chains = pipelines.makespans()
    if sweeps:
        metrics["sweep_makespan_s"] = sweeps
    if chains:
        metrics["pipeline_makespan_s"] = chains
    return SimResult(policy.name, metrics, timeline, problems, records)
