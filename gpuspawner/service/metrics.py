"""Prometheus metrics of the scheduler service, at /services/gpuhub/metrics.

Gauges are computed from the scheduler's state at scrape time (nothing to
keep in sync); the cycle-time histogram and the event counter are updated by
the loop.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuspawner.service.loop.lag import CAUSES


class StateCollector:
    """GPUs per pool and team, and queued workloads, read from the core."""

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        state = self.engine.scheduler.state
        capacity = GaugeMetricFamily("gpuhub_pool_gpus", "Healthy GPUs of a pool", labels=["pool"])
        free = GaugeMetricFamily("gpuhub_pool_free_gpus", "GPUs of a pool nobody holds",
                                 labels=["pool"])
        for pool, n in sorted(state.capacity.items()):
            capacity.add_metric([pool], n)
            free.add_metric([pool], state.index.pool_free[pool])
        held = GaugeMetricFamily("gpuhub_team_gpus", "GPUs a team holds", labels=["team", "pool"])
        for (team, pool), n in sorted(state.held_gpus().items()):
            held.add_metric([team, pool], n)
        queued = GaugeMetricFamily("gpuhub_queued_workloads", "Workloads waiting for GPUs",
                                   labels=["team", "pool", "kind"])
        for key, (n, _gpus) in sorted(state.pending_counts.items()):
            queued.add_metric(list(key), n)
        yield from (capacity, free, held, queued)


class IntakeCollector:
    """The API's submits stored by the intake (loop/intake.py), and in how
    many transactions: rows over batches is how well its batching works
    (a batch of one pays a whole commit)."""

    def __init__(self, intake):
        self.intake = intake

    def collect(self):
        yield CounterMetricFamily("gpuhub_intake_batches", "Transactions the intake stored "
                                  "submits in", value=self.intake.batches)
        yield CounterMetricFamily("gpuhub_intake_rows", "Submits the intake stored",
                                  value=self.intake.rows)


class ReplicaCollector:
    """Model-deployment replicas per revision, ready or starting, read from
    the serving controller at scrape time."""

    def __init__(self, serving):
        self.serving = serving

    def collect(self):
        replicas = GaugeMetricFamily("gpuhub_deployment_replicas",
                                     "Replicas of a deployment's revision that run, by readiness",
                                     labels=["team", "deployment", "revision", "state"])
        names = {d.id: (d.team, d.name) for d in self.serving.by_name.values()}
        counts: dict[tuple, int] = {}
        for r in self.serving.replicas.values():
            if r.deployment_id in names:
                key = (*names[r.deployment_id], str(r.revision), "ready" if r.ready else "starting")
                counts[key] = counts.get(key, 0) + 1
        for key, n in sorted(counts.items()):
            replicas.add_metric(list(key), n)
        yield replicas


CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5,
                 0.75, 1, 2.5, 5)
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
               0.5, 1, 2, 5)


def _at_zero(counter: Counter, *values: str) -> Counter:
    """``counter`` with each of its label's ``values`` shown from the start, at 0."""
    for value in values:
        counter.labels(value)
    return counter


class ServiceMetrics:
    def __init__(self, engine):
        self.registry = CollectorRegistry()
        self.registry.register(StateCollector(engine))
        self.registry.register(IntakeCollector(engine.intake))
        self.cycle_seconds = Histogram(
            "gpuhub_cycle_seconds", "Time of one scheduling cycle, persisting included",
            buckets=CYCLE_BUCKETS, registry=self.registry)
        self.cycle_plan_seconds = Histogram(
            "gpuhub_cycle_plan_seconds", "Time to plan a cycle (in a worker thread, off the "
            "event loop)", buckets=CYCLE_BUCKETS, registry=self.registry)
        self.cycle_apply_seconds = Histogram(
            "gpuhub_cycle_apply_seconds", "Time a cycle's decisions held the event loop "
            "(persisted in one transaction, applied, carried out)", buckets=CYCLE_BUCKETS,
            registry=self.registry)
        self.loop_lag = Histogram(
            "gpuhub_event_loop_lag_seconds", "How late the event loop ran a callback that asked "
            "to run every 10 ms (loop/lag.py): every request waits that long too",
            buckets=LAG_BUCKETS, registry=self.registry)
        self.gc_full_pause = Histogram(
            "gpuhub_gc_full_pause_seconds", "How long each of Python's full garbage collections "
            "held the interpreter (loop/lag.py): the event loop stalls that long",
            buckets=LAG_BUCKETS, registry=self.registry)
        self.loop_stall_causes = _at_zero(Counter(
            "gpuhub_event_loop_stall_seconds", "Time of the event loop's stalls of 50 ms or more "
            "by what its thread did meanwhile, as the kernel counts it (loop/lag.py): waited for "
            "a CPU (waiting_for_cpu: the machine is busy), ran (running: the loop's own work), "
            "or neither (waiting_other: for the interpreter another thread held, or in a "
            "blocking call)", ["cause"], registry=self.registry), *CAUSES)
        self.reasons_remade = _at_zero(Counter(
            "gpuhub_reasons_remade", "The queue's waiting reasons and start estimates remade "
            "(done), or stopped part-way for a cycle that a submit or an exit asked for "
            "(gave_way; loop/driver.py)", ["outcome"], registry=self.registry),
            "done", "gave_way")
        self.write_turn_wait = Histogram(
            "gpuhub_event_loop_write_turn_wait_seconds", "How long the event loop waited for "
            "another thread's database transaction (the cycle's, the intake's) before its own "
            "could begin: every request waits that long too", buckets=LAG_BUCKETS,
            registry=self.registry)
        self.events = Counter("gpuhub_scheduler_events", "Scheduler decisions by type",
                              ["type"], registry=self.registry)
        self.queue_wait = Histogram(
            "gpuhub_queue_wait_seconds", "From submission to admission (first attempts)",
            ["team", "kind"], registry=self.registry,
            buckets=(1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600))
        self.attempts = Counter("gpuhub_attempts_ended", "Attempts that ended, by outcome "
                                "(succeeded, failed, preempted, evicted, lost, cancelled, stopped)",
                                ["outcome", "kind"], registry=self.registry)
        self.culls = Counter("gpuhub_culls", "Servers the culler stopped (from its audit entries)",
                             registry=self.registry)
        self.log_follows = Gauge("gpuhub_log_follows",
                                 "Followed logs (server-sent event streams) open now",
                                 registry=self.registry)
        self.endpoint_requests = Counter(
            "gpuhub_endpoint_requests", "Requests the router passed to a replica, by its status",
            ["team", "deployment", "revision", "code"], registry=self.registry)
        self.endpoint_seconds = Histogram(
            "gpuhub_endpoint_request_seconds", "Time from the router to the replica's answer",
            ["team", "deployment", "revision"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))

    def count_decisions(self, events, state, now: float) -> None:
        """A cycle's decisions, and the queue wait of first admissions."""
        for e in events:
            self.events.labels(e.type).inc()
            w = state.pending.get(e.workload_id)
            if e.type == "admitted" and w is not None and w.attempt == 0:
                self.queue_wait.labels(w.team, w.kind).observe(now - w.submit_time)

    def observe_stall(self, causes: dict[str, float]) -> None:
        """One stall of the event loop, divided among its causes (seconds)."""
        for cause, seconds in causes.items():
            self.loop_stall_causes.labels(cause).inc(seconds)

    def watch_serving(self, serving) -> None:
        self.registry.register(ReplicaCollector(serving))
        serving.metrics = self

    def endpoint_request(self, team: str, name: str, revision: int, status: int,
                         seconds: float) -> None:
        self.endpoint_requests.labels(team, name, str(revision), str(status)).inc()
        self.endpoint_seconds.labels(team, name, str(revision)).observe(seconds)
