"""The cluster's own history as a simulator trace (``gpuhub trace export``).

The service reads what was submitted in a period from its database into
``PastWorkload`` records (plain data); ``history_trace`` turns them into
trace jobs (``sim.trace``) and keeps, beside them, what really happened to
each (``Outcome``): when it first started and when it held GPUs. A replay of
the trace under the current settings is judged against those outcomes.

How a workload becomes a trace job:

* ``submit_time_s``: seconds from the start of the period to its submission.
* ``duration_s``: the time its attempts held GPUs, added up (a job preempted
  and resumed ran that long in all; the replay charges restarts on top). Work
  still running at the end of the period counts the run time it had so far.
* ``kind`` and ``priority`` as submitted (notebook sessions are
  ``interactive``, model replicas ``production`` unless they said otherwise),
  ``gpu_type`` its pool, ``num_nodes`` and ``time_limit_s`` as declared.

Left out, and counted in ``History.left_out``: work that never started (it
was cancelled while queued, or still waits), work without GPUs (it competes
for none) and work on a pool the cluster no longer has.

``History.lag`` is how long the service took, in this history, to start
work once it could: after a submission that found its GPUs free, and after
the exit of the attempt that held them before (an exit is noticed at the
next cycle, later than a submission, which wakes the loop at once). A
replay that leaves these out starts everything a little early, which adds
up along a queue.

``History.run_jitter_s`` is how much repeated work varied: for each group
of finished single-attempt workloads of one user with one name, each run
time's distance from the group's median; the 90th percentile of those. A
rerun's jobs run about that much longer or shorter than the history's.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Iterable, Optional

from ..scheduler.model import Node, Team
from .cluster import Cluster
from .pipelines import parse_after_cell
from .metrics import percentile
from .trace import TraceJob

# Why a workload of the period is not in the trace.
NEVER_STARTED = "never started (cancelled while queued, or still queued)"
NO_GPUS = "asked for no GPU"
UNKNOWN_POOL = "ran on a pool the cluster no longer has"


@dataclass(frozen=True)
class PastAttempt:
    start: float
    end: Optional[float] = None  # None while it runs
    # The GPUs it held: (node, GPU number) each.
    gpus: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PastWorkload:
    """One submission of the period, as the service recorded it (UNIX seconds)."""

    id: str
    kind: str
    team: str
    user: str
    pool: str
    gpus_per_node: int
    submitted_at: float
    attempts: tuple[PastAttempt, ...] = ()  # oldest first
    num_nodes: int = 1
    priority: str = ""
    time_limit: Optional[float] = None
    preemptions: int = 0
    name: str = ""
    # The sweep it was a task of, and what it waited for: ((target, condition), ...).
    sweep: Optional[str] = None
    after: tuple[tuple[str, str], ...] = ()
    gpu_share: float = 0.0  # its share of one GPU; 0: whole GPUs
    # CPUs and memory (bytes) it asked for on each node; 0: not recorded.
    cpus: float = 0.0
    memory: int = 0

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes


@dataclass(frozen=True)
class Outcome:
    """What really happened to one trace job, in seconds from the period's start."""

    job_id: str
    team: str
    gpus: int
    submit_s: float
    first_start_s: float
    # When it held GPUs: (start, end) per attempt.
    held: tuple[tuple[float, float], ...]
    preemptions: int = 0

    @property
    def wait_s(self) -> float:
        return self.first_start_s - self.submit_s


@dataclass
class History:
    since: float
    until: float
    jobs: list[TraceJob] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    lag: "StartLag" = field(default_factory=lambda: StartLag())
    run_jitter_s: float = 0.0

    @property
    def horizon_s(self) -> float:
        return self.until - self.since


@dataclass(frozen=True)
class StartLag:
    """Seconds from what let work start to its start, after a submission
    that found free GPUs and after the exit of the attempt on its GPUs
    before it: the median (what a replay adds) and the 90th percentile (how
    late a start may come by chance), and how many starts each is of."""

    after_submit_s: float = 0.0
    after_exit_s: float = 0.0
    submits: int = 0
    exits: int = 0
    after_submit_p90_s: float = 0.0
    after_exit_p90_s: float = 0.0


# A workload that started and ended within the clock's resolution still ran.
SHORTEST_RUN_S = 0.001


def history_trace(workloads: Iterable[PastWorkload], since: float, until: float,
                  pools: Iterable[str]) -> History:
    """The period's submissions (``since`` <= submitted < ``until``) as a trace
    sorted by submit time, with their outcomes and what was left out."""
    if until <= since:
        raise ValueError(f"the period must end after it starts (since {since}, until {until})")
    pools = set(pools)
    out = History(since, until)
    workloads = list(workloads)
    out.lag = start_lag(workloads)
    out.run_jitter_s = run_jitter(workloads)
    for w in sorted(workloads, key=lambda w: (w.submitted_at, w.id)):
        if not since <= w.submitted_at < until:
            continue
        why = (NO_GPUS if w.gpus <= 0 else UNKNOWN_POOL if w.pool not in pools
               else NEVER_STARTED if not w.attempts else None)
        if why is not None:
            out.left_out[why] = out.left_out.get(why, 0) + 1
            continue
        held = tuple((a.start - since, (until if a.end is None else a.end) - since)
                     for a in w.attempts)
        ran = sum(max(0.0, end - start) for start, end in held)
        out.jobs.append(TraceJob(
            job_id=w.id, team=w.team, user=w.user, submit_time_s=w.submitted_at - since,
            num_gpus=w.gpus, duration_s=max(ran, SHORTEST_RUN_S), time_limit_s=w.time_limit,
            gpu_type=w.pool, priority=w.priority or None,
            num_nodes=w.num_nodes if w.num_nodes > 1 else None,
            kind=None if w.kind == "job" else w.kind, gpu_share=w.gpu_share or None,
            cpus=w.cpus or None, memory_gib=w.memory / (1 << 30) if w.memory else None))
        out.outcomes[w.id] = Outcome(w.id, w.team, w.gpus, w.submitted_at - since,
                                     held[0][0], held, w.preemptions)
    out.jobs = with_dependencies(out.jobs, {w.id: w for w in workloads})
    return out


def with_dependencies(jobs: list[TraceJob], workloads: dict[str, PastWorkload]
                      ) -> list[TraceJob]:
    """The trace's ``sweep`` and ``after`` columns: what each job waited for
    among what the trace holds (a target left out of it, or outside the
    period, is dropped: the replay cannot wait for it)."""
    present = {j.job_id for j in jobs} | {workloads[j.job_id].sweep for j in jobs
                                          if workloads[j.job_id].sweep}
    out = []
    for j in jobs:
        w = workloads[j.job_id]
        after = " ".join(f"{t}:{c}" for t, c in w.after if t in present) or None
        out.append(replace(j, sweep=w.sweep, after=after) if w.sweep or after else j)
    return out


def start_lag(workloads: Iterable[PastWorkload]) -> StartLag:
    """``History.lag``: for each attempt with GPUs, its start minus the later
    of its workload's submission and the end of the attempt before it on any
    of its GPUs; the medians of those that followed a submission and of
    those that followed an exit."""
    workloads = list(workloads)
    uses: dict[tuple[str, int], list[tuple[float, Optional[float]]]] = {}
    for w in workloads:
        for a in w.attempts:
            for gpu in a.gpus:
                uses.setdefault(gpu, []).append((a.start, a.end))
    starts = {}
    for gpu, spans in uses.items():
        spans.sort(key=lambda span: span[0])
        starts[gpu] = [start for start, _ in spans]
    after_submit, after_exit = [], []
    for w in workloads:
        for n, a in enumerate(w.attempts):
            if not a.gpus:
                continue
            freed = None
            for gpu in a.gpus:
                # One attempt holds a GPU at a time: the one before ended first.
                i = bisect_left(starts[gpu], a.start) - 1
                end = uses[gpu][i][1] if i >= 0 else None
                if end is not None and end <= a.start:
                    freed = end if freed is None else max(freed, end)
            if freed is not None and freed > w.submitted_at:
                after_exit.append(a.start - freed)
            elif n == 0:
                after_submit.append(a.start - w.submitted_at)
    return StartLag(median(after_submit) if after_submit else 0.0,
                    median(after_exit) if after_exit else 0.0,
                    len(after_submit), len(after_exit),
                    percentile(after_submit, 90) if after_submit else 0.0,
                    percentile(after_exit, 90) if after_exit else 0.0)


def run_jitter(workloads: Iterable[PastWorkload]) -> float:
    """``History.run_jitter_s``: the 90th percentile distance of a run time
    from its group's median, over groups of one user's finished
    single-attempt workloads of one name (two runs at least)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for w in workloads:
        if w.name and len(w.attempts) == 1 and w.attempts[0].end is not None:
            a = w.attempts[0]
            groups.setdefault((w.user, w.name), []).append(a.end - a.start)
    spread = [abs(d - median(runs)) for runs in groups.values() if len(runs) > 1 for d in runs]
    return percentile(spread, 90) if spread else 0.0


def cluster_of(nodes: Iterable[Node], teams: Iterable[Team]) -> Cluster:
    """The cluster file of the cluster as it is now: every node with the GPUs
    it can run work on (a GPU out of service is not there), nodes without
    any left out; the teams with their quotas and weights."""
    kept = []
    for n in nodes:
        usable = len(n.usable_gpus())
        if usable:
            kept.append(Node(n.name, n.pool, usable, dict(n.topology), dict(n.labels),
                             share_units=n.share_units, cpus=n.cpus, memory=n.memory))
    return Cluster(kept, list(teams))


def pseudonymise(history: History, cluster: Cluster) -> tuple[History, Cluster]:
    """The same history and cluster with teams, users, workloads and nodes
    renamed (``team-1``, ``user-1``, ``job-000001``, ``node-1``, ``sweep-1``), numbered
    in sorted order of the real names so the trace and the cluster file
    agree. Pools keep their names (they say what hardware it is)."""
    teams = _numbered("team", {t.name for t in cluster.teams} | {j.team for j in history.jobs})
    users = _numbered("user", {j.user for j in history.jobs})
    width = max(6, len(str(len(history.jobs))))
    ids = {j.job_id: f"job-{i:0{width}d}" for i, j in enumerate(history.jobs, 1)}
    nodes = _numbered("node", {n.name for n in cluster.nodes})
    sweeps = _numbered("sweep", {j.sweep for j in history.jobs if j.sweep})
    names = {**ids, **sweeps}

    def after(cell):
        return " ".join(f"{names[d['id']]}:{d['condition']}"
                        for d in parse_after_cell(cell)) if cell else None
    jobs = [replace(j, job_id=ids[j.job_id], team=teams[j.team], user=users[j.user],
                    sweep=sweeps.get(j.sweep), after=after(j.after))
            for j in history.jobs]
    outcomes = {ids[k]: replace(o, job_id=ids[k], team=teams[o.team])
                for k, o in history.outcomes.items()}
    renamed = Cluster(
        [replace(n, name=nodes[n.name]) for n in cluster.nodes],
        [replace(t, name=teams[t.name]) for t in cluster.teams])
    return History(history.since, history.until, jobs, outcomes, dict(history.left_out)), renamed


def _numbered(prefix: str, names: set[str]) -> dict[str, str]:
    return {name: f"{prefix}-{i}" for i, name in enumerate(sorted(names), 1)}
