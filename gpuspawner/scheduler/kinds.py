"""What each kind of workload is: one row per kind, the only place that
says how a kind behaves, for the scheduler core and the service alike.

Adding a kind (an array task, say) is one row here plus its spec parser;
no other module compares kind names. Pure data: the core reads its
scheduling rules, the service its lifecycle rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .model import DEPLOYMENT, JOB, NOTEBOOK


@dataclass(frozen=True)
class Kind:
    name: str
    # Who starts and stops its processes: the service's backend, or the
    # hub's spawner (which asks the service for GPUs and gives them back).
    run_by_backend: bool
    # Who may submit it: users (their own work), or only the service and
    # the hub's spawner (an admin identity acting for a user).
    submitted_by_users: bool
    # When an attempt ends by itself: False, the workload ends with it (a
    # job's exit code decides); True, it is replaced by a new attempt, up to
    # max_replica_restarts (a serving replica never ends on its own).
    replaced_on_exit: bool
    # Evicted from broken hardware or preempted: requeued as its next
    # attempt (work that resumes from a checkpoint), or ended (a server is
    # not restarted elsewhere behind its user's back).
    requeued_when_evicted: bool
    # Why it cannot be cancelled through the API by a user (None: its owner,
    # a lead of its team or an admin may); admins may when ``admin_cancels``.
    cancel_refusal: Optional[str]
    admin_cancels: bool
    # Scheduling: it waits ``Policy.preemption_delay`` in the queue before it
    # may preempt anything (batch work can wait for GPUs to free by
    # themselves; a person at a notebook cannot).
    waits_before_preempting: bool = False
    # Scheduling: preemption may evict it whole (a team's reclaim whenever
    # its team borrows, its own team's higher priority work when its class is
    # preemptible). Otherwise only a reclaim evicts it, and only for the part
    # of its team's use above nominal.
    evictable: bool = False

    def refusal(self, wid: str, admin: bool) -> Optional[str]:
        if self.cancel_refusal is None or (admin and self.admin_cancels):
            return None
        return self.cancel_refusal.format(wid=wid, kind=self.name)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind(JOB, run_by_backend=True, submitted_by_users=True, replaced_on_exit=False,
         requeued_when_evicted=True, cancel_refusal=None, admin_cancels=True,
         waits_before_preempting=True, evictable=True),
    Kind(NOTEBOOK, run_by_backend=False, submitted_by_users=False, replaced_on_exit=False,
         requeued_when_evicted=False, admin_cancels=False,
         cancel_refusal="workload {wid} is a {kind}: stop it where it was started (the hub's "
                        "server page), which gives its GPUs back"),
    # An evicted replica ends; the serving controller places a new one.
    Kind(DEPLOYMENT, run_by_backend=True, submitted_by_users=False, replaced_on_exit=True,
         requeued_when_evicted=False, admin_cancels=True,
         cancel_refusal="workload {wid} is a replica of a deployment: scale or delete the "
                        "deployment instead"),
)}
# The kinds the backend runs, for queries.
BACKEND_KINDS = tuple(k.name for k in KINDS.values() if k.run_by_backend)


def kind(name: str) -> Kind:
    return KINDS[name]


def preemption_wait(w, preemption_delay: float) -> float:
    """How long pending workload ``w`` waits in the queue before it may
    preempt: its kind's wait (``Policy.preemption_delay``) or none."""
    return preemption_delay if kind(w.kind).waits_before_preempting else 0.0
