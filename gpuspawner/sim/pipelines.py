"""Sweeps and dependencies in a replayed trace (the ``sweep`` and ``after``
columns of sim/trace.py).

Jobs of one ``sweep`` name are one sweep: its tasks, in trace order (their
``sweep_index``, which the scheduler's queue order reads). A job's ``after``
lists what it waits for, ``TARGET[:ok|any|failed]`` separated by spaces or
``;``, a target being a job id or a sweep name. A waiting job is not in the
scheduler (it holds nothing) until its dependencies are met, when it is
submitted with its own submit time, as the service does; one that can never
be met is cancelled. The rules are the service's
(scheduler/workflow/dependencies.py). The replay reports each sweep's makespan (its
first submit to its last end) and each pipeline's (a set of jobs and sweeps
linked by ``after``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from gpuspawner.scheduler.workflow.dependencies import (CANCELLED, CONDITIONS, MET, NEVER, OK, find_cycle, resolve,
                                      sweep_outcome)

if TYPE_CHECKING:
    from .trace import TraceJob


def parse_after_cell(text: Optional[str]) -> list[dict]:
    """``"a b:any; s1:failed"`` → [{"id", "condition"}]; ValueError naming a bad entry."""
    out = []
    for entry in (text or "").replace(";", " ").split():
        target, _, condition = entry.partition(":")
        condition = condition or OK
        if not target or condition not in CONDITIONS:
            raise ValueError(f"{entry!r} is not TARGET[:{'|'.join(CONDITIONS)}]")
        out.append({"id": target, "condition": condition})
    return out


def sweep_indices(trace: Iterable["TraceJob"]) -> dict[str, int]:
    """job id -> its index in its sweep (trace order)."""
    counts: dict[str, int] = {}
    out = {}
    for job in trace:
        if job.sweep:
            out[job.job_id] = counts.get(job.sweep, 0)
            counts[job.sweep] = out[job.job_id] + 1
    return out


def check_references(trace: list["TraceJob"]) -> Optional[str]:
    """What is wrong with the trace's dependencies (an unknown target, a
    name both a job and a sweep, a cycle), or None."""
    jobs = {j.job_id for j in trace}
    sweeps = {j.sweep for j in trace if j.sweep}
    both = sorted(jobs & sweeps)
    if both:
        return f"{both[0]!r} is both a job id and a sweep name"
    edges: dict[str, list[str]] = {}
    for job in trace:
        targets = [d["id"] for d in parse_after_cell(job.after)]
        for t in targets:
            if t not in jobs and t not in sweeps:
                return f"job {job.job_id}: after names {t!r}, neither a job id nor a sweep"
        edges[job.job_id] = targets
        if job.sweep:
            edges.setdefault(job.sweep, []).append(job.job_id)
    for job in trace:
        if job.after:
            cycle = find_cycle(job.job_id, edges)
            if cycle:
                return "dependency cycle: " + " -> ".join(cycle)
    return None


class Pipelines:
    """The waiting jobs of a replay and the end of every job and sweep."""

    def __init__(self, trace: list["TraceJob"]):
        self.after = {j.job_id: parse_after_cell(j.after) for j in trace if j.after}
        self.sweep_of = {j.job_id: j.sweep for j in trace if j.sweep}
        self.members: dict[str, list[str]] = {}
        for j in trace:
            if j.sweep:
                self.members.setdefault(j.sweep, []).append(j.job_id)
        self.submit = {j.job_id: j.submit_time_s for j in trace}
        self.states: dict[str, str] = {}   # job or sweep -> its end state
        self.ends: dict[str, float] = {}
        self.waiting: set[str] = set()
        # target -> the jobs that wait for it
        self.dependents: dict[str, list[str]] = {}
        for wid, after in self.after.items():
            for d in after:
                self.dependents.setdefault(d["id"], []).append(wid)

    def blocked(self, wid: str) -> bool:
        """At its submit time: whether it waits (then it is kept here)."""
        if wid not in self.after or resolve(self.after[wid], self.states)[0] == MET:
            return False
        self.waiting.add(wid)
        return True

    def ended(self, wid: str, state: str, now: float) -> tuple[list[str], list[tuple[str, str]]]:
        """A job ended in ``state``: the waiting jobs that may go now, and
        those cancelled (with why), their own ends included."""
        go, cancelled = [], []
        stack = [(wid, state)]
        while stack:
            target, end = stack.pop()
            self.states[target], self.ends[target] = end, now
            sweep = self.sweep_of.get(target)
            if sweep and sweep not in self.states:
                counts: dict[str, int] = {}
                for m in self.members[sweep]:
                    s = self.states.get(m, "running")
                    counts[s] = counts.get(s, 0) + 1
                outcome = sweep_outcome(counts, cancel_requested=False)
                if outcome is not None:
                    stack.append((sweep, outcome))
            for dep in self.dependents.get(target, ()):
                if dep not in self.waiting:
                    continue
                verdict, why = resolve(self.after[dep], self.states)
                if verdict == MET:
                    self.waiting.discard(dep)
                    go.append(dep)
                elif verdict == NEVER:
                    self.waiting.discard(dep)
                    cancelled.append((dep, why))
                    stack.append((dep, CANCELLED))
        return go, cancelled

    def makespans(self) -> tuple[dict[str, float], dict[str, float]]:
        """(sweep -> makespan, pipeline -> makespan) in seconds; a pipeline
        is named by its first member that waits for nothing (by submit time)
        and reported once all its members ended."""
        sweeps = {}
        for name, ids in self.members.items():
            if all(i in self.ends for i in ids):
                sweeps[name] = max(self.ends[i] for i in ids) - min(self.submit[i] for i in ids)
        parent: dict[str, str] = {}

        def root(x: str) -> str:
            while parent.get(x, x) != x:
                x = parent[x]
            return x
        for wid, after in self.after.items():
            for d in after:
                parent[root(self._unit(d["id"]))] = root(self._unit(wid))
        groups: dict[str, set[str]] = {}
        for x in set(parent) | set(parent.values()):
            groups.setdefault(root(x), set()).add(x)
        pipelines = {}
        for units in groups.values():
            ids = [i for u in units for i in self.members.get(u, [u])]
            if len(units) < 2 or not all(i in self.ends for i in ids):
                continue
            waits = {self._unit(w) for w in self.after}
            start = min((u for u in units if u not in waits),
                        key=lambda u: (min(self.submit[i] for i in self.members.get(u, [u])), u))
            pipelines[start] = max(self.ends[i] for i in ids) - min(self.submit[i] for i in ids)
        return sweeps, pipelines

    def _unit(self, target: str) -> str:
        """A job of a sweep counts as its sweep in a pipeline."""
        return self.sweep_of.get(target, target)
