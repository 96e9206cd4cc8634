"""The figures a simulation reports.

Keys of ``summarize`` (all times in seconds):

* ``jobs``, ``finished``, ``rejected``, ``timed_out``: counts.
* ``avg_jct_s``, ``p50_jct_s``, ``p99_jct_s``: job completion time, submit to finish.
* ``avg_queue_s``, ``p50_queue_s``, ``p99_queue_s``: queueing delay, the time a job
  spent not running between submit and finish (every wait, re-waits after
  preemption included).
* ``makespan_s``: first submission to last finish.
* ``jain_fairness``: Jain's index over the teams' mean slowdown (JCT / run time
  alone): 1.0 when every team is slowed down equally, 1/n when one team takes
  all the delay.
* ``max_slowdown_per_team``: the worst slowdown of any job of each team.
* ``p99_queue_s_by_size``, ``avg_queue_s_by_size``: p99 and mean queueing delay per
  job-size bucket (``SIZE_BUCKETS``).
* ``team_slowdown_ratio``: the largest team mean slowdown over the cluster's mean slowdown.
* ``avg_run_s``: mean run time (``duration``) of the finished jobs.
* ``preemptions_per_job``, ``max_preemptions_per_job``: mean and largest count per job.
* ``lost_gpu_fraction``: GPU time lost to preemption (grace periods and restarts) over
  GPU time used.
The simulator adds ``utilization_backlog`` (GPUs in use / capacity, averaged
over the time some workload waited), ``utilization_saturated`` (the same over
the time the waiting work asked for at least as many GPUs as were idle),
``preemptions``, ``quota_violations`` (admissions that left a team above
nominal + borrowing limit, or a pool borrowing more than was lent, under the
cluster file's quotas), ``cycles`` and ``wall_s``. For a trace with GPU shares
it adds ``SharingMeter.summary``'s figures (``notebook_gpu_hours`` and the
rest, described there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass
class JobRecord:
    job_id: str
    team: str
    submit: float
    duration: float
    gpus: int
    first_start: Optional[float] = None
    finish: Optional[float] = None
    run_time: float = 0.0
    preemptions: int = 0
    # GPU-seconds spent on work a preemption threw away (grace period, restart).
    lost_gpu_s: float = 0.0
    timed_out: bool = False
    rejected: Optional[str] = None
    kind: str = "job"
    gpu_share: float = 0.0  # what the trace asked for, even when replayed without sharing

    @property
    def jct(self) -> float:
        return self.finish - self.submit

    @property
    def slowdown(self) -> float:
        return self.jct / max(self.duration, 1.0)


# Job-size buckets for the per-size figures: (label, smallest, largest GPUs).
SIZE_BUCKETS = (("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), (">8", 9, 1 << 30))


def size_bucket(gpus: int) -> str:
    for label, low, high in SIZE_BUCKETS:
        if low <= gpus <= high:
            return label
    return SIZE_BUCKETS[0][0]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(min(rank, len(ordered))) - 1]


def jain(values: Iterable[float]) -> float:
    xs = list(values)
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def summarize(records: list[JobRecord]) -> dict:
    done = [r for r in records if r.finish is not None]
    out = {
        "jobs": len(records),
        "finished": len(done),
        "rejected": sum(1 for r in records if r.rejected),
        "timed_out": sum(1 for r in done if r.timed_out),
    }
    if not done:
        return out
    jct = [r.jct for r in done]
    queue = [max(0.0, r.jct - r.run_time) for r in done]
    for name, values in (("jct", jct), ("queue", queue)):
        out[f"avg_{name}_s"] = sum(values) / len(values)
        out[f"p50_{name}_s"] = percentile(values, 50)
        out[f"p99_{name}_s"] = percentile(values, 99)
    out["makespan_s"] = max(r.finish for r in done) - min(r.submit for r in records)
    per_team: dict[str, list[float]] = {}
    for r in done:
        per_team.setdefault(r.team, []).append(r.slowdown)
    team_means = [sum(v) / len(v) for v in per_team.values()]
    out["jain_fairness"] = jain(team_means)
    out["max_slowdown_per_team"] = {t: max(per_team[t]) for t in sorted(per_team)}
    cluster_mean = sum(r.slowdown for r in done) / len(done)
    out["team_slowdown_ratio"] = max(team_means) / cluster_mean
    by_size: dict[str, list[float]] = {}
    for r, q in zip(done, queue):
        by_size.setdefault(size_bucket(r.gpus), []).append(q)
    out["p99_queue_s_by_size"] = {label: percentile(by_size[label], 99)
                                  for label, _, _ in SIZE_BUCKETS if label in by_size}
    out["avg_queue_s_by_size"] = {label: sum(by_size[label]) / len(by_size[label])
                                  for label, _, _ in SIZE_BUCKETS if label in by_size}
    out["avg_run_s"] = sum(r.duration for r in done) / len(done)
    out["preemptions_per_job"] = sum(r.preemptions for r in records) / len(records)
    out["max_preemptions_per_job"] = max(r.preemptions for r in records)
    used = sum(r.run_time * r.gpus for r in records)
    out["lost_gpu_fraction"] = sum(r.lost_gpu_s for r in records) / used if used else 0.0
    return out


RECORD_COLUMNS = ("job_id", "team", "gpus", "submit_s", "first_start_s", "finish_s", "run_s",
                  "preemptions")


def write_records(path, records: Iterable[JobRecord]) -> None:
    """One CSV row per job (``RECORD_COLUMNS``): enough to recompute every
    figure. ``run_s`` is the time it held GPUs (restarts and grace periods
    included); a job that never started or finished has empty cells."""
    import csv

    def cell(value):
        return "" if value is None else (f"{value:.3f}".rstrip("0").rstrip(".")
                                         if isinstance(value, float) else value)

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(RECORD_COLUMNS)
        for r in records:
            writer.writerow([cell(v) for v in (r.job_id, r.team, r.gpus, r.submit, r.first_start,
                                               r.finish, r.run_time, r.preemptions)])


class SharingMeter:
    """What GPU sharing saves and costs, measured along a replay.

    ``observe(state)`` after every cycle reads the cluster; ``advance(now)``
    before the next one integrates what it read over the time between.
    ``summary`` gives (times in seconds, GPU-hours of physical GPUs):

    * ``notebook_gpu_hours``, ``notebook_peak_gpus``: GPUs notebooks hold,
      integrated and at the peak. A shared GPU counts whole while any
      notebook is on it: a GPU a notebook touches is not free for a gang.
    * ``shared_gpus_peak``: most GPUs shared at once.
    * ``stranded_gpu_hours``: the fragmentation cost, the free slots of
      shared GPUs (as GPUs: 3 free quarters are 0.75) integrated over the
      time whole-GPU work waited. Capacity a whole-GPU job could not use
      because shares hold part of the GPU.
    * ``whole_job_{avg,p50,p99}_wait_s``: queueing delay of the jobs asking
      for whole GPUs, ``notebook_{p50,p99}_start_s``: submit to first start
      of the notebooks; ``notebooks_preempted``: notebook servers stopped by
      a preemption (reclaim of borrowed quota), ``notebooks_never_started``.
    """

    def __init__(self):
        self.t: Optional[float] = None
        self.notebook_gpus = 0
        self.stranded = 0.0
        self.whole_waiting = False
        self.notebook_gpu_s = 0.0
        self.stranded_gpu_s = 0.0
        self.notebook_peak = 0
        self.shared_peak = 0

    def advance(self, now: float) -> None:
        if self.t is not None:
            dt = now - self.t
            self.notebook_gpu_s += dt * self.notebook_gpus
            if self.whole_waiting:
                self.stranded_gpu_s += dt * self.stranded
        self.t = now

    def observe(self, state) -> None:
        notebook = "notebook"
        running = state.running
        held = sum(r.workload.gpus for r in running.values()
                   if r.workload.kind == notebook and not r.workload.gpu_share)
        held += sum(1 for holders in state.sharers.values()
                    if any(running[h].workload.kind == notebook for h in holders))
        self.notebook_gpus = held
        self.notebook_peak = max(self.notebook_peak, held)
        slots = state.slots
        self.shared_peak = max(self.shared_peak, len(slots))
        self.stranded = sum(slots.free(key) / slots.units[key] for key in slots.used
                            if key not in slots.closed)
        self.whole_waiting = any(not w.gpu_share and w.gpus for w in state.pending.values())

    def summary(self, records: list[JobRecord], sharing: bool) -> dict:
        out = {
            "sharing": sharing,
            "notebook_gpu_hours": self.notebook_gpu_s / 3600,
            "notebook_peak_gpus": self.notebook_peak,
            "shared_gpus_peak": self.shared_peak,
            "stranded_gpu_hours": self.stranded_gpu_s / 3600,
        }
        whole = [max(0.0, r.jct - r.run_time) for r in records
                 if r.finish is not None and r.kind != "notebook" and not r.gpu_share]
        if whole:
            out["whole_job_avg_wait_s"] = sum(whole) / len(whole)
            out["whole_job_p50_wait_s"] = percentile(whole, 50)
            out["whole_job_p99_wait_s"] = percentile(whole, 99)
        starts = [r.first_start - r.submit for r in records
                  if r.kind == "notebook" and r.first_start is not None]
        if starts:
            out["notebook_p50_start_s"] = percentile(starts, 50)
            out["notebook_p99_start_s"] = percentile(starts, 99)
        notebooks = [r for r in records if r.kind == "notebook"]
        out["notebooks_never_started"] = sum(1 for r in notebooks if r.first_start is None)
        # A preempted notebook server is stopped, its user's session lost.
        out["notebooks_preempted"] = sum(1 for r in notebooks if r.preemptions)
        return out
