"""Start times from the policy itself: its cycles run forward on a copy of
the state, as if nothing more were submitted.

The plan (``forecast._Plan``) books the queue in today's order, so it
misses what the policy does as the queue drains: the fair-share order that
moves with what each team runs, reclaims, aged work, reservations made and
passed. On issue 32's trace, with exact run times and no arrival after the
estimate, the plan's starts were off by a median 0.61 of the wait under
``gpuhub`` (0.15 under plain backfill); the policy's own starts without
those arrivals were off by 0.17 from what happened with them
(docs/scheduler.md, "Start estimates"). The rollout is that: each running
workload ends at its expected run time (``runtime``, as the plan asks it),
every cycle the service would run is run (at each expected end, at a
preempted workload's kill, at a waiting one's preemption delay and aging),
and each pending workload's first start is what it says. Bounded by
``max_cycles``; where a running workload has no known end and nothing
else can change, it stops, and what has not started by then is not in
its answer.
"""
from __future__ import annotations

import copy
import heapq
import itertools
import math
from typing import Optional

from ..core import Scheduler
from ..events import ADMITTED, PREEMPTED
from ..kinds import preemption_wait
from ..model import RunState
from ..policy import Policy
from ..state import ClusterState
from ..steps import drain

# The most cycles one rollout runs: each costs what a live cycle over the
# same queue costs.
MAX_CYCLES = 400

# What comes due in the rollout, in the order handled at one instant.
_END, _LEAVE, _WAKE = 0, 1, 2


def rollout(state: ClusterState, policy: Policy, now: float, runtime,
            only: Optional[set[str]] = None, max_cycles: int = MAX_CYCLES) -> dict[str, float]:
    """Expected first start of pending workloads (of those in ``only``, if
    given) when the policy runs forward from ``now``. ``state`` is not
    changed. ``runtime(w, elapsed)``: the expected whole run time (None:
    no known end)."""
    return drain(rollout_steps(state, policy, now, runtime, only, max_cycles))


def rollout_steps(state: ClusterState, policy: Policy, now: float, runtime,
                  only: Optional[set[str]] = None, max_cycles: int = MAX_CYCLES):
    """``rollout`` as a generator that yields now and then (within and
    after each cycle, as ``Scheduler.cycle_steps``); ``state`` must not
    change until it has copied it, before its first yield."""
    run = _Rollout(Scheduler(policy=policy, state=copy.deepcopy(state)), runtime)
    pending = run.state.pending
    wanted = set(pending) if only is None else set(only) & set(pending)
    for wid in run.state.running:
        run.expect_end(wid, now)
    for wid in pending:
        run.wake_for(wid, now)
    starts: dict[str, float] = {}
    t: Optional[float] = now
    for _ in range(max_cycles):
        result = yield from run.sched.cycle_steps(t, explain=False)
        run.sched.apply_result(result, t)
        for e in result.events:
            if e.type == ADMITTED and e.workload_id in wanted:
                starts.setdefault(e.workload_id, t)
            if e.type in (ADMITTED, PREEMPTED):  # a preempted one leaves at its kill
                run.expect_end(e.workload_id, t)
        if wanted <= starts.keys():
            break
        t = run.next_instant()
        if t is None:
            break
        yield
    return starts


class _Rollout:
    """The copy being run forward, and what comes due in it."""

    def __init__(self, sched: Scheduler, runtime):
        self.sched, self.state, self.runtime = sched, sched.state, runtime
        self.policy = sched.policy
        self.due: list[tuple[float, int, int, str, int]] = []
        self.seq = itertools.count()
        self.attempt: dict[str, int] = {}  # wid -> the attempt whose end is due
        self.end: dict[str, float] = {}    # wid -> when its current attempt is expected to end
        self.left: dict[str, float] = {}   # wid -> the run a workload preempted here has left

    def expect_end(self, wid: str, t: float) -> None:
        r = self.state.running[wid]
        n = self.attempt[wid] = self.attempt.get(wid, 0) + 1
        if r.state is RunState.TERMINATING and r.kill_at is not None:
            # Preempted: what it ran is kept (it resumes from a checkpoint,
            # as the simulator's jobs do); it leaves at its kill.
            if wid in self.end:
                self.left[wid] = max(0.0, self.end.pop(wid) - t)
            heapq.heappush(self.due, (max(t, r.kill_at), _LEAVE, next(self.seq), wid, n))
            return
        if wid in self.left:
            run = self.left.pop(wid)
        else:
            run = self.runtime(r.workload, max(0.0, t - r.start_time))
            if run is None:
                return
            if r.workload.time_limit is not None:
                run = min(run, r.workload.time_limit)
        self.end[wid] = max(t, r.start_time + run)
        heapq.heappush(self.due, (self.end[wid], _END, next(self.seq), wid, n))

    def wake_for(self, wid: str, t: float) -> None:
        """The cycles the service's timer runs for a waiting workload: when
        its preemption delay is over, and when it ages."""
        w, policy = self.state.pending[wid], self.policy
        wait = preemption_wait(w, policy.preemption_delay) if policy.preemption else 0.0
        for at in (w.submit_time + wait, w.submit_time + (policy.aging_after or math.inf)):
            if t < at < math.inf:
                heapq.heappush(self.due, (at, _WAKE, next(self.seq), wid, 0))

    def next_instant(self) -> Optional[float]:
        """Handle everything due at the next instant something changes
        (ends, kills, wakes of waiting work); return it, or None when
        nothing more will happen."""
        due, state = self.due, self.state
        while due:
            at = due[0][0]
            changed = False
            while due and due[0][0] == at:
                _, what, _, wid, n = heapq.heappop(due)
                if what == _WAKE:
                    changed = changed or wid in state.pending
                elif wid in state.running and self.attempt.get(wid) == n:
                    self.sched.finished(wid, at, requeue=what == _LEAVE)
                    if what == _LEAVE:
                        self.wake_for(wid, at)
                    changed = True
            if changed:
                return at
        return None
