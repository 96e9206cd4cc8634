"""The scheduler facade: one object the service and the simulator drive.

It owns a ``ClusterState`` and a ``Policy``. Every method is deterministic
and does no I/O: callers feed it what happened (submit, exit, cancel, node
health, quota change) and ask it what to do next (``cycle``), then tell it
which decisions were carried out (``apply``).
"""
from __future__ import annotations

from typing import Iterable, Optional

from . import events as ev
from .cycle import CycleResult, Searches, plan_cycle, plan_cycle_steps
from .model import (TOPOLOGY_REQUIRED, Node, RunState, Team, Workload, combined_selector,
                    dataset_rules_text, selector_conflict)
from .node_load import counted_request, too_big_for_pool
from .policy import Policy
from .quota import describe_ceiling, units
from .shares import share_fits_pool
from .state import ClusterState


class SchedulerError(ValueError):
    """A request the scheduler cannot take (unknown or duplicate workload)."""


class Scheduler:
    def __init__(self, nodes: Iterable[Node] = (), teams: Iterable[Team] = (),
                 policy: Policy = Policy(), state: Optional[ClusterState] = None):
        """``state``: decide over an existing state instead of a new one of
        ``nodes`` and ``teams`` (a copy the forecast runs forward:
        forecast/rollout.py)."""
        self.policy = policy
        self.state = state if state is not None else self._new_state(nodes, teams, policy)
        self._shape_reasons: dict[tuple, Optional[str]] = {}
        # Reservation searches that stay valid from cycle to cycle while
        # nothing starts or ends.
        self.searches = Searches()

    @staticmethod
    def _new_state(nodes: Iterable[Node], teams: Iterable[Team], policy: Policy) -> ClusterState:
        spacing = policy.sweep_task_spacing

        def order_time(w: Workload) -> float:
            return w.submit_time + (w.sweep_index or 0) * spacing
        if policy.order_by_priority:
            value = policy.priority_value

            def queue_key(w: Workload):
                return (-value(w.priority), order_time(w), w.id)
        else:
            def queue_key(w: Workload):
                return (order_time(w), w.id)
        return ClusterState(nodes, teams, queue_key=queue_key,
                            priority_value=policy.priority_value,
                            group_by_team=policy.quotas, half_life=policy.usage_half_life)

    # ---- inputs ----------------------------------------------------------
    def validate(self, w: Workload) -> Optional[str]:
        """Why ``w`` can never run here, or None. Checked at submission."""
        if w.priority not in self.policy.priority_classes:
            return (f"unknown priority class {w.priority!r}; known: "
                    f"{', '.join(sorted(self.policy.priority_classes))}")
        too_big = too_big_for_pool(w, self.state.nodes.values())
        if too_big is not None:
            return too_big
        if w.gpus == 0:
            return None
        state = self.state
        pools = sorted(state.capacity)
        if w.pool not in state.capacity:
            return f"unknown pool {w.pool!r}; known pools: {', '.join(pools) or 'none'}"
        team = state.teams.get(w.team)
        if team is not None and team.allowed_pools is not None and w.pool not in team.allowed_pools:
            return (f"team {w.team} may not use pool {w.pool} "
                    f"(allowed: {', '.join(sorted(team.allowed_pools)) or 'none'})")
        conflict = selector_conflict(team, w)
        if conflict is not None:
            return conflict
        if w.gpu_share:
            reason = share_fits_pool(w, state.nodes.values())
            if reason is not None:
                return reason
        selector = combined_selector(team, w)
        key = (w.pool, tuple(sorted(selector.items())), w.gpus_per_node, w.num_nodes,
               w.topology, w.topology_key)
        if key not in self._shape_reasons:
            self._shape_reasons[key] = self._shape_reason(w, selector)
        if self._shape_reasons[key] is not None:
            return self._data_reason(w, team) or self._shape_reasons[key]
        if self.policy.quotas:
            quota = state.ledger.quota(w.team, w.pool)
            if w.gpu_units > quota.ceiling:
                return (f"needs {units(w.gpu_units)} {w.pool} GPUs but team {w.team} "
                        f"may hold at most "
                        f"{int(quota.ceiling)} ({describe_ceiling(quota)})")
        return None

    def _data_reason(self, w: Workload, team: Optional[Team]) -> Optional[str]:
        """Its datasets' residency, when that alone leaves it no nodes."""
        if not any(w.dataset_nodes.values()):
            return None
        if self._shape_reason(w, combined_selector(team, w, datasets=False)) is not None:
            return None  # no node would do even without its datasets' rule
        return f"{dataset_rules_text(w)}: {self._shape_reason(w, combined_selector(team, w))}"

    def _shape_reason(self, w: Workload, selector: dict) -> Optional[str]:
        """Why no set of nodes can ever hold this shape (cached per shape)."""
        nodes = [n for n in self.state.nodes.values() if n.pool == w.pool and n.matches(selector)]
        where = f"{w.pool} node" + (" labelled " + ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
                                    if selector else "")
        if not nodes:
            return f"no {where} exists"
        biggest = max(n.gpus for n in nodes)
        if w.gpus_per_node > biggest:
            return (f"asks for {w.gpus_per_node} GPUs on one node but every {where} "
                    f"has at most {biggest}")
        fitting = [n for n in nodes if n.gpus >= w.gpus_per_node]
        if w.num_nodes > len(fitting):
            return (f"asks for {w.num_nodes} nodes with {w.gpus_per_node} GPUs each but only "
                    f"{len(fitting)} {where}(s) have that many")
        if w.topology == TOPOLOGY_REQUIRED and w.num_nodes > 1:
            domains: dict[str, int] = {}
            for n in fitting:
                d = n.topology.get(w.topology_key, "")
                domains[d] = domains.get(d, 0) + 1
            if max(domains.values()) < w.num_nodes:
                return (f"asks for {w.num_nodes} nodes in one {w.topology_key} but no "
                        f"{w.topology_key} of {w.pool} has more than {max(domains.values())}")
        return None

    def submit(self, w: Workload, now: float) -> ev.Event:
        if w.id in self.state.pending or w.id in self.state.running:
            raise SchedulerError(f"workload {w.id} already exists")
        w = counted_request(w, self.state.whole_cpu_pools)  # whole cores where Slurm runs it
        reason = self.validate(w)
        if reason is not None:
            return ev.Event(ev.REJECTED, w.id, now, message=reason)
        self.state.add_pending(w)
        return ev.Event(ev.QUEUED, w.id, now, message="queued", attempt=w.attempt)

    def cancel(self, wid: str, now: float) -> ev.Event:
        """Withdraw a pending workload. Running work is stopped by the caller,
        which then reports it with ``finished``."""
        if wid not in self.state.pending:
            raise SchedulerError(f"workload {wid} is not pending")
        self.state.remove_pending(wid)
        return ev.Event(ev.CANCELLED, wid, now, message="cancelled while queued")

    def finished(self, wid: str, now: float, requeue: Optional[bool] = None) -> ev.Event:
        """A running workload exited. A preempted one (inside its grace period)
        is requeued as attempt + 1 unless ``requeue`` says otherwise."""
        r = self.state.running.get(wid)
        if r is None:
            raise SchedulerError(f"workload {wid} is not running")
        if requeue is None:
            requeue = r.state is RunState.TERMINATING
        if requeue:
            again = self.state.requeue(wid, now, preempted_by=r.preempted_for)
            return ev.Event(ev.REQUEUED, wid, now, attempt=again.attempt,
                            message=f"requeued as attempt {again.attempt}")
        self.state.release(wid, now)
        return ev.Event(ev.FINISHED, wid, now, message="finished")

    def set_node(self, node: Node) -> None:
        self.state.set_node(node)
        self._shape_reasons.clear()

    def set_team(self, team: Team) -> None:
        self.state.set_team(team)

    # ---- decisions -------------------------------------------------------
    def cycle(self, now: float, explain: bool = True) -> CycleResult:
        """Decide what to do now. Changes nothing. ``explain=False`` leaves
        out the waiting reasons, which costs less with long queues."""
        return plan_cycle(self.state, self.policy, now, explain, self.searches)

    def cycle_steps(self, now: float, explain: bool = True):
        """``cycle`` step by step: a generator that yields now and then and
        returns the result (``result = yield from sched.cycle_steps(now)``).
        Nothing may change the state until it has returned."""
        return (yield from plan_cycle_steps(self.state, self.policy, now, explain,
                                            self.searches))

    def apply(self, events: Iterable[ev.Event], now: float) -> list[ev.Event]:
        """Record decisions as carried out; returns the follow-up events
        (requeues of evicted work)."""
        follow_ups = []
        victims: dict[str, list[str]] = {}
        for e in events:
            if e.type == ev.ADMITTED:
                self.state.start(e.workload_id, e.placement or (), now)
            elif e.type == ev.PREEMPTED:
                self.state.preempt(e.workload_id, e.preemptor_id, e.kill_at)
                victims.setdefault(e.preemptor_id, []).append(e.workload_id)
            elif e.type == ev.NOMINATED:
                self.state.nominate(e.workload_id, e.placement, victims.get(e.workload_id, ()))
            elif e.type == ev.NOMINATION_DROPPED:
                self.state.drop_nomination(e.workload_id)
            elif e.type == ev.EVICTED:
                # A victim evicted inside its grace period still remembers
                # who preempted it.
                victim_of = self.state.running[e.workload_id].preempted_for
                again = self.state.requeue(e.workload_id, now, preempted_by=victim_of)
                follow_ups.append(ev.Event(ev.REQUEUED, e.workload_id, now, attempt=again.attempt,
                                           message=f"requeued as attempt {again.attempt}"))
        return follow_ups

    def apply_result(self, result: CycleResult, now: float) -> list[ev.Event]:
        """``apply`` the events of a cycle and keep its reservations."""
        reserved = [r.workload_id for r in result.reservations]
        if reserved != self.state.reserved_order:
            self.state.reserved_order = reserved
            self.state.changes += 1
        return self.apply(result.events, now)

    def step(self, now: float, explain: bool = True) -> CycleResult:
        """``cycle`` then ``apply``, for callers with nothing to persist."""
        result = self.cycle(now, explain)
        result.events.extend(self.apply_result(result, now))
        return result
