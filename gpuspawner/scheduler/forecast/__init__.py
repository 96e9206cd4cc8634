"""When will it start? Expected start times from the scheduler's own plan.

``forecast`` books every pending workload, in the order the next cycle
would consider it, into a profile of free GPUs over time: per node (so a
gang needs whole nodes at once, as in the real placement) and, where quotas
bound a team, per team and pool. Running work frees its GPUs at its
expected end (learned run times, ``runtimes.RuntimeModel``, capped by its
time limit); each pending workload starts at the earliest time both its
GPUs and its team's quota are free for its expected run, and is booked
there (conservative backfill: it delays nobody booked before it).

The result is a point estimate and its basis. How far to trust it is a
separate question, answered from how earlier estimates turned out
(``calibration.Calibration``). A workload whose GPUs nothing is known to
free (held by work with neither a time limit nor a run-time history, or
unhealthy) gets ``None`` with the reason: unknown, said honestly.

The plan books the queue in today's order. With a short queue
(``ROLLOUT_PENDING``) the policy's own cycles are also run forward on a copy
of the state (``rollout.py``), which follows what the plan cannot: the order
moving with what each team runs, reclaims, aged work. A start the rollout
finds replaces the plan's.

Pure: reads a ``ClusterState``, changes nothing.
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from typing import Callable, Optional

from ..cycle import STEP, ConsiderationOrder
from ..kinds import preemption_wait
from ..model import TOPOLOGY_REQUIRED, Running, RunState, Workload, combined_selector
from ..policy import Policy
from ..shares import slots_needed
from ..state import ClusterState
from ..steps import drain
from .rollout import rollout_steps

INF = math.inf
# The most pending workloads for which the policy is also run forward: a
# rollout is a copy of the state and up to ``rollout.MAX_CYCLES`` cycles over it.
ROLLOUT_PENDING = 300
# Workloads said unknown (over the limit) between two yields: a dict's worth of
# assignments, ~1 ms.
UNKNOWN_STEP = 4096

# Expected run time of a workload: (workload, seconds run so far) -> seconds,
# or None when nothing bounds it.
RunTime = Callable[[Workload, float], Optional[float]]


def limit_runtime(w: Workload, elapsed: float) -> Optional[float]:
    """The run-time guess without history: the time limit."""
    return w.time_limit


@dataclass(frozen=True)
class Estimate:
    """When a pending workload is expected to start (absolute time, the
    caller's clock), or ``None`` with ``reason``."""

    workload_id: str
    start: Optional[float]
    # "now", "plan", "reclaim", "victims" (preemption under way), "rollout"
    # (the policy run forward, rollout.py), "unknown"
    basis: str
    reason: str = ""


# Single-node searches look at nodes in the order they could first hold the
# work for a power-of-two multiple of a minute at most as long as its run.
CLASS_BASE_S = 60.0
CLASSES = 16  # up to 2^15 minutes (about 23 days); longer runs share the last


def duration_class(duration: float) -> int:
    if duration <= CLASS_BASE_S:
        return 0
    if duration == INF:
        return CLASSES - 1
    return min(CLASSES - 1, int(math.log2(duration / CLASS_BASE_S)))


def class_span(c: int) -> float:
    return CLASS_BASE_S * (2 ** c) if c else 0.0


class Profile:
    """A step function over time: ``values[i]`` holds from ``times[i]`` to
    ``times[i + 1]`` (the last one for ever)."""

    __slots__ = ("times", "values")

    def __init__(self, start: float, value: float):
        self.times = [start]
        self.values = [value]

    def add(self, start: float, end: float, delta: float) -> None:
        """``delta`` on [start, end)."""
        if end <= start:
            return
        i = self._split(start)
        j = self._split(end) if end != INF else len(self.times)
        for k in range(i, j):
            self.values[k] += delta

    def _split(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            self.times.insert(0, t)
            self.values.insert(0, self.values[0])
            return 0
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.values.insert(i + 1, self.values[i])
        return i + 1

    def earliest(self, need: float, duration: float, t0: float) -> float:
        """The earliest t >= t0 with value >= need on all of [t, t + duration)."""
        times, values = self.times, self.values
        i = max(0, bisect.bisect_right(times, t0) - 1)
        start = t0
        n = len(times)
        while i < n:
            seg_end = times[i + 1] if i + 1 < n else INF
            if values[i] < need:
                start = seg_end
                if start == INF:
                    return INF
            elif seg_end >= start + duration:
                return start
            i += 1
        return INF


class _Plan:
    """Profiles of free GPUs per node, and per team and pool of the quota
    left under its ceiling and under its nominal quota, over time."""

    def __init__(self, state: ClusterState, policy: Policy, now: float, runtime: RunTime):
        self.state = state
        self.policy = policy
        self.now = now
        self.runtime = runtime
        self.nodes = {name: Profile(now, len(state.index.free.get(name, ())))
                      for name in state.nodes}
        # Shares are booked as GPU capacity of a node ("fluid"): the free
        # slots of its open shared GPUs count as that much of a GPU.
        slots = state.slots
        for key, used in slots.used.items():
            if key not in slots.closed and used < slots.units[key] and state.placeable(*key):
                self.nodes[key[0]].values[0] += (slots.units[key] - used) / slots.units[key]
        # (pool, selector, GPUs per node) -> nodes that may ever hold it
        self._candidates: dict[tuple, frozenset[str]] = {}
        # pool -> GPUs per node -> heap of (first time a node has that many
        # free, its version, node): where to look first for single-node work
        self._soonest: dict[str, dict[int, list]] = {}
        self._version: dict[str, int] = {}
        self.ceiling: dict[tuple[str, str], Optional[Profile]] = {}
        self.nominal: dict[tuple[str, str], Optional[Profile]] = {}
        # pool -> GPUs of running work that nothing is known to free
        self.stuck: dict[str, int] = {}
        # GPUs teams borrow beyond their nominal quota: what a team back
        # within its own nominal quota takes back by preemption (reclaim).
        self.borrowed: dict[tuple[str, str], int] = {}
        self.reclaimable: dict[str, int] = {}
        if policy.quotas and policy.preemption:
            for (team, pool), used in state.ledger.used.items():
                extra = used - state.ledger.quota(team, pool).nominal
                if extra > 0:
                    self.borrowed[(team, pool)] = extra
                    self.reclaimable[pool] = self.reclaimable.get(pool, 0) + extra
        for r in state.running.values():
            self._release(r)

    def expected_end(self, r: Running) -> float:
        if r.state is RunState.TERMINATING and r.kill_at is not None:
            return max(self.now, r.kill_at)
        elapsed = max(0.0, self.now - r.start_time)
        run = self.runtime(r.workload, elapsed)
        if run is None:
            return INF
        if r.workload.time_limit is not None:
            run = min(run, r.workload.time_limit)
        return max(self.now, r.start_time + run)

    def _release(self, r: Running) -> None:
        """Running work's GPUs come back at its expected end (to the pool,
        unless unhealthy or set aside); its team's quota with them."""
        end = self.expected_end(r)
        w = r.workload
        if end == INF:
            self.stuck[w.pool] = self.stuck.get(w.pool, 0) + w.gpu_units
            return
        for node, gpus in r.placement:
            back = sum(1 for g in gpus if self.state.placeable(node, g)
                       and (node, g) not in self.state.set_aside)
            if node in self.nodes and back:
                self._change(node, end, INF, w.gpu_share or back)
        for q in self._quotas(w.team, w.pool):
            q.add(end, INF, w.gpu_units)

    def _quotas(self, team: str, pool: str) -> list[Profile]:
        """The team's quota profiles that bound it (ceiling, nominal)."""
        return [q for q in (self._ceiling(team, pool), self._nominal(team, pool)) if q]

    def _ceiling(self, team: str, pool: str) -> Optional[Profile]:
        if not self.policy.quotas:
            return None
        key = (team, pool)
        if key not in self.ceiling:
            ceiling = self.state.ledger.quota(team, pool).ceiling
            self.ceiling[key] = None if ceiling == INF else \
                Profile(self.now, ceiling - self.state.ledger.used.get(key, 0))
        return self.ceiling[key]

    def _nominal(self, team: str, pool: str) -> Optional[Profile]:
        if not (self.policy.quotas and self.policy.preemption):
            return None
        key = (team, pool)
        if key not in self.nominal:
            nominal = self.state.ledger.quota(team, pool).nominal
            self.nominal[key] = Profile(self.now, nominal - self.state.ledger.used.get(key, 0)) \
                if nominal else None
        return self.nominal[key]

    def hold_nominated(self, w: Workload, placement, start: float) -> None:
        """A preemptor waiting for its victims: it runs from ``start`` on the
        GPUs set aside for it (charged already, they come back at its end)."""
        run = self.runtime(w, 0.0)
        if run is None:
            self.stuck[w.pool] = self.stuck.get(w.pool, 0) + w.gpu_units
            return
        for q in self._quotas(w.team, w.pool):
            q.add(start + run, INF, w.gpu_units)
        for node, gpus in placement:
            back = sum(1 for g in gpus if self.state.placeable(node, g))
            if node in self.nodes and back:
                self._change(node, start + run, INF, w.gpu_share or back)

    def candidates(self, w: Workload) -> frozenset[str]:
        selector = combined_selector(self.state.teams.get(w.team), w)
        key = (w.pool, tuple(sorted(selector.items())), w.gpus_per_node, w.gpu_share)
        if key not in self._candidates:
            self._candidates[key] = frozenset(
                name for name, node in self.state.nodes.items()
                if node.pool == w.pool and node.matches(selector)
                and len(node.placeable_gpus()) >= w.gpus_per_node
                and (not w.gpu_share or slots_needed(w.gpu_share, node.share_units)))
        return self._candidates[key]

    def _heap(self, pool: str, need: int, duration: float) -> list:
        """Nodes of ``pool`` by the earliest time they have ``need`` GPUs free
        for the duration class below ``duration`` (a lower bound of when they
        have them for ``duration``)."""
        c = duration_class(duration)
        levels = self._soonest.setdefault(pool, {})
        if (need, c) not in levels:
            span = class_span(c)
            heap = [(self.nodes[n].earliest(need, span, self.now), self._version.get(n, 0), n)
                    for n, node in self.state.nodes.items() if node.pool == pool]
            heapq.heapify(heap)
            levels[(need, c)] = heap
        return levels[(need, c)]

    def _change(self, node: str, start: float, end: float, delta: float) -> None:
        """``delta`` free GPUs on ``node`` over [start, end), and where it
        stands in the soonest-free heaps renewed."""
        profile = self.nodes[node]
        profile.add(start, end, delta)
        version = self._version[node] = self._version.get(node, 0) + 1
        for (need, c), heap in self._soonest.get(self.state.nodes[node].pool, {}).items():
            heapq.heappush(heap, (profile.earliest(need, class_span(c), self.now), version, node))

    def _single_start(self, w: Workload, nodes: frozenset[str], duration: float,
                      t0: float) -> tuple[float, list[str]]:
        """The earliest start on one node, looking at nodes in the order they
        first have the GPUs free, until none can be sooner (fullest first on
        a tie)."""
        need = w.gpu_share or w.gpus_per_node
        heap = self._heap(w.pool, need, duration)
        best, best_key, seen = INF, None, []
        while heap:
            bound, version, node = heap[0]
            if version != self._version.get(node, 0):
                heapq.heappop(heap)  # stale: the node was booked since
                continue
            if bound > best:
                break
            seen.append(heapq.heappop(heap))
            if node not in nodes:
                continue
            t = self.nodes[node].earliest(need, duration, t0)
            if t == INF:
                continue
            key = (t, self._free_at(node, t), node)
            if best_key is None or key < best_key:
                best, best_key = t, key
        for entry in seen:
            heapq.heappush(heap, entry)
        return (best, [best_key[2]]) if best_key is not None else (INF, [])

    def reclaim_start(self, w: Workload, duration: float, t0: float) -> float:
        """When ``w`` would start by taking back its team's nominal quota from
        other teams' borrowed GPUs: once its team is within nominal with it
        (at once, or when the team's own work ends), after its preemption
        delay (batch jobs) and the victims' grace period. ``inf`` when
        nothing is borrowed or the nominal quota is too small."""
        nominal = self._nominal(w.team, w.pool)
        others = self.reclaimable.get(w.pool, 0) - self.borrowed.get((w.team, w.pool), 0)
        if nominal is None or others < w.gpu_units:
            return INF
        room = nominal.earliest(w.gpu_units, duration, t0)
        if room == INF:
            return INF
        wait = preemption_wait(w, self.policy.preemption_delay)
        if wait:
            room = max(room, w.submit_time + wait)
        return room + self.policy.default_grace_period

    def book(self, w: Workload, not_before: Optional[float] = None) -> Estimate:
        if w.gpus == 0:
            return Estimate(w.id, self.now, "now")
        run = self.runtime(w, 0.0)
        duration = run if run is not None else INF
        nodes = self.candidates(w)
        if len(nodes) < w.num_nodes:
            usable = sum(len(self.state.nodes[n].placeable_gpus()) for n in nodes)
            return Estimate(w.id, None, "unknown",
                            f"needs {w.num_nodes} × {w.gpus_per_node} {w.pool} GPUs but the "
                            f"healthy, undrained nodes it may use have {usable}")
        t0 = max(self.now, not_before or self.now)
        ceiling = self._ceiling(w.team, w.pool)
        t, chosen = t0, []
        while t != INF:
            t_nodes, chosen = self._gang_start(w, nodes, duration, t)
            t = ceiling.earliest(w.gpu_units, duration, t_nodes) if ceiling else t_nodes
            if t == t_nodes:
                break
        reclaim = self.reclaim_start(w, duration, t0)
        quotas = self._quotas(w.team, w.pool)
        if reclaim < t:
            # Borrowers make room (their requeue is not replanned here).
            self.reclaimable[w.pool] -= w.gpu_units
            for q in quotas:
                q.add(reclaim, reclaim + duration, -w.gpu_units)
            return Estimate(w.id, reclaim, "reclaim")
        if t == INF:
            return self._unknown(w, duration)
        for name in chosen:
            self._change(name, t, t + duration, -(w.gpu_share or w.gpus_per_node))
        for q in quotas:
            q.add(t, t + duration, -w.gpu_units)
        return Estimate(w.id, t, "now" if t <= self.now else "plan")

    def _unknown(self, w: Workload, duration: float) -> Estimate:
        if self.stuck.get(w.pool):
            why = (f"it needs GPUs that running work with no time limit and no run-time "
                   f"history holds ({self.stuck[w.pool]} {w.pool} GPUs)")
        elif duration == INF:
            why = "work booked before it has no known end"
        else:
            why = "no set of nodes is known to become free for it"
        return Estimate(w.id, None, "unknown", why)

    def _gang_start(self, w: Workload, nodes: list[str], duration: float,
                    t0: float) -> tuple[float, list[str]]:
        """The earliest start >= t0 at which ``num_nodes`` of ``nodes`` (in
        one topology domain where required) have the GPUs for ``duration``,
        and those nodes (fullest first, as best fit places)."""
        if w.topology == TOPOLOGY_REQUIRED and w.num_nodes > 1:
            domains: dict[str, list[str]] = {}
            for n in nodes:
                domains.setdefault(self.state.nodes[n].topology.get(w.topology_key, ""),
                                   []).append(n)
            best = (INF, [])
            for members in domains.values():
                if len(members) >= w.num_nodes:
                    found = self._start_on(w, members, duration, t0)
                    if found[0] < best[0]:
                        best = found
            return best
        if w.num_nodes == 1:
            return self._single_start(w, nodes, duration, t0)
        return self._start_on(w, sorted(nodes), duration, t0)

    def _start_on(self, w: Workload, nodes: list[str], duration: float,
                  t0: float) -> tuple[float, list[str]]:
        k, need = w.num_nodes, w.gpus_per_node
        t = t0
        while t != INF:
            starts = sorted((self.nodes[n].earliest(need, duration, t), n) for n in nodes)
            kth = starts[k - 1][0]
            if kth == t:
                ready = [n for s, n in starts if s == t]
                # fullest first: leaves the emptier nodes for bigger work
                ready.sort(key=lambda n: (self._free_at(n, t), n))
                return t, ready[:k]
            t = kth
        return INF, []

    def _free_at(self, node: str, t: float) -> float:
        p = self.nodes[node]
        return p.values[max(0, bisect.bisect_right(p.times, t) - 1)]


def forecast(state: ClusterState, policy: Policy, now: float,
             runtime: RunTime = limit_runtime, only: Optional[set[str]] = None,
             limit: Optional[int] = None,
             rollout_pending: int = ROLLOUT_PENDING) -> dict[str, Estimate]:
    """Expected start of every pending workload (or of those in ``only``:
    everything ahead of them is still booked). ``limit`` bounds how many are
    booked; the rest are unknown, with that reason. With at most
    ``rollout_pending`` workloads pending, the policy's own cycles are run
    forward too (``rollout``), and a start they give replaces the plan's
    (basis "rollout")."""
    return drain(forecast_steps(state, policy, now, runtime, only, limit, rollout_pending))


def forecast_steps(state: ClusterState, policy: Policy, now: float,
                   runtime: RunTime = limit_runtime, only: Optional[set[str]] = None,
                   limit: Optional[int] = None, rollout_pending: int = ROLLOUT_PENDING):
    """``forecast`` as a generator that yields now and then (as
    ``Scheduler.cycle_steps``)."""
    out = yield from _planned(state, policy, now, runtime, only, limit)
    if not 0 < len(state.pending) <= rollout_pending:
        return out
    # A start now, or on the GPUs a preemption is freeing, the plan knows as
    # well, and says why.
    asked = {wid for wid, e in out.items() if e.basis not in ("now", "victims")}
    if not asked:
        return out
    starts = yield from rollout_steps(state, policy, now, runtime, only=asked)
    for wid, start in starts.items():
        out[wid] = Estimate(wid, start, "rollout")
    return out


def _planned(state, policy, now, runtime, only, limit):
    """The plan. With aging, a workload still waiting ``aging_after`` after its submission
    moves up, right after the reservation holders: a first plan finds which
    will, a second books those first, each from the time it ages. Past
    ``limit`` bookings the rest is unknown, whatever its order."""
    out = yield from _plan(state, policy, now, runtime, only, limit, ())
    pending = state.pending
    asked = pending.keys() if only is None else [wid for wid in only if wid in pending]
    after = policy.aging_after
    if after is not None:
        aging = [w for wid in asked if (w := pending[wid]).submit_time > now - after
                 and _ages(out.get(wid), w.submit_time + after, limit is not None)]
        yield
        if aging:
            by_age = lambda w: (w.submit_time, w.id)  # noqa: E731
            if limit is None:
                aging.sort(key=by_age)
            else:  # the second plan books at most ``limit``: the rest need no order
                ahead = limit + len(state.nominations) + len(state.reserved_order)
                aging = heapq.nsmallest(ahead, aging, key=by_age)
            # What the first plan starts before any of them ages starts before
            # they move up: booked first, as the first plan booked it (after
            # them, a job about to start was planned behind every aging one).
            first_aged = min(w.submit_time for w in aging) + after
            early = [pending[wid] for wid, e in out.items()
                     if e.start is not None and e.start <= first_aged]
            out = yield from _plan(state, policy, now, runtime, only, limit, aging, early)
    if limit is not None:
        # The rest is behind the limit: not ordered (with 100,000 queued,
        # ordering the other 98,000 twice took the forecast over a second
        # without a step, and the service's next cycle waited for it).
        yield from _unknown_steps(out, asked, limit)
    if only is not None:
        return {wid: e for wid, e in out.items() if wid in only}
    return out


def _ages(e: Optional[Estimate], aged_at: float, limited: bool) -> bool:
    """Whether the plan leaves a workload waiting until it ages (``e`` None:
    not booked, behind the limit where there is one)."""
    if e is None:
        return limited
    return e.basis in ("plan", "unknown") and (e.start is None or e.start > aged_at)


def _plan(state, policy, now, runtime, only, limit, aging, early=()) -> dict[str, Estimate]:
    """One plan: the booked workloads' estimates (also those not in ``only``
    booked ahead of them), at most ``limit`` of them. ``early``, then
    ``aging`` (each from when it ages), go right after the aged work."""
    plan = _Plan(state, policy, now, runtime)
    out: dict[str, Estimate] = {}
    # Nominated preemptors start when their victims have exited, on the GPUs
    # set aside for them, which come back when they end in turn.
    for wid, nom in state.nominations.items():
        ends = [plan.expected_end(state.running[v]) for v in nom.victims if v in state.running]
        start = max(ends, default=now)
        out[wid] = Estimate(wid, start, "victims")
        plan.hold_nominated(state.pending[wid], nom.placement, start)
    remaining = None if only is None else set(only) - set(out)
    booked = 0
    order = ConsiderationOrder(state, policy, now, then=[*early, *aging])
    not_before = {w.id: w.submit_time + policy.aging_after for w in aging}
    for w in order:
        if w.id in out:
            continue
        if remaining is not None and not remaining:
            break
        if limit is not None and booked >= limit:
            break  # the rest is unknown (``_planned``)
        if booked % STEP == STEP - 1:
            yield
        out[w.id] = e = plan.book(w, not_before.get(w.id, now))
        if e.start is not None and e.start <= now:
            # What the next cycle starts counts against its team's quota
            # and share for the order of the rest. Later bookings do not:
            # counting them (even giving back what ends before them) made
            # the estimates worse on replays (median error / wait 0.44 to
            # 0.45 against 0.40, docs/scheduler.md): arrivals and reclaim
            # reorder the queue long before such a plan plays out.
            order.admitted(w)
        booked += 1
        if remaining is not None:
            remaining.discard(w.id)
    return out


def _unknown_steps(out: dict[str, Estimate], wids, limit: int):
    """Each of ``wids`` not in ``out`` is unknown: over ``limit`` ahead."""
    why = f"more than {limit} workloads are ahead of it"
    for i, wid in enumerate(wids):
        if wid not in out:
            out[wid] = Estimate(wid, None, "unknown", why)
        if i % UNKNOWN_STEP == UNKNOWN_STEP - 1:
            yield
