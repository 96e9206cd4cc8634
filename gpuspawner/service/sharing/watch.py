"""The memory watch of shared GPUs, wired: every ``interval`` seconds, for
each GPU that holds shares, NVML's per-process memory (Inventory.processes),
each share's processes (a job's attempt cgroups, a server's cgroup named by
its workload) and the pure decision (isolation/share_memory.judge_gpu).

A warning goes to the workload's events, its log (a job's) or a notice on
its server (a notebook's) and the audit trail; a stop ends a job as failed
with the reason, and gives a server's GPUs back (its spawner then stops it,
saying why). What each share uses and its own SM activity are kept for the
heat map and the culler (``GET /gpus``).

The warning's time is kept in memory: a restart gives a share above its
limit a fresh warning and grace, never a stop without one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

from sqlalchemy import select

from gpuspawner.culler.shares import share_utilization
from gpuspawner.isolation.attempt_pids import cgroup_pids
from gpuspawner.isolation.cgroups import server_cgroup_name
from gpuspawner.isolation.share_memory import (STOP, WARN, GpuMemory, MemoryWatch, Share, judge_gpu,
                                      share_key, share_label)
from gpuspawner.safefiles import append_own
from gpuspawner.scheduler.shares import running_shares
from gpuspawner.store import NoticeRow, WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.facades import Facades
from gpuspawner.scheduler.kinds import kind

log = logging.getLogger("gpuhub.shares")
NOTICE_KIND = "gpu-memory"


@dataclass(frozen=True)
class ShareHost:
    """What the watch needs of the loop besides the facades (the app wires it,
    ``wiring.share_watch``)."""
    # (workload, attempt) -> its processes; None: its backend cannot name them.
    attempt_pids: Callable[[str, int], Optional[frozenset]]
    # (row, why): the service ends a running share itself (above its memory).
    stop_for: Callable[[WorkloadRow, str], None]
    # (memory MiB by workload, SM % by workload): the last readings, for the views.
    publish: Callable[[dict, dict], None]


class ShareWatch:
    def __init__(self, facades: Facades, host: ShareHost, read_processes: Callable,
                 enforcement=None, watch: MemoryWatch = MemoryWatch()):
        self.records, self.cluster, self.paths = facades.records, facades.cluster, facades.paths
        self.host = host
        self.read_processes = read_processes    # (uuids, since_us) -> {uuid: ProcessReading}
        self.enforcement = enforcement          # GpuEnforcement: where servers' cgroups are
        self.watch = watch
        self.state: dict = {}
        self.since_us: dict[str, int] = {}

    def pids_of(self, row: WorkloadRow) -> Optional[frozenset]:
        """The processes of a share: its attempt's (a job's, a replica's) or
        its server's cgroup members; None when they cannot be found."""
        if kind(row.kind).run_by_backend:
            return self.host.attempt_pids(row.id, row.attempt)
        if self.enforcement is None:
            return None
        return cgroup_pids(self.enforcement.existing(server_cgroup_name(row.user, row.name, row.id)))

    def tick(self) -> list:
        """One look at every shared GPU; returns the actions taken."""
        nodes = self.cluster.nodes
        shares = running_shares(self.cluster.state)
        if not shares:
            self.state = {}
            self.host.publish({}, {})
            return []
        uuids = {gpu: nodes[gpu[0]].uuid(gpu[1]) for gpu in shares if gpu[0] in nodes}
        readings = self.read_processes(sorted(set(uuids.values())), self.since_us)
        with self.records.store.session() as s:
            rows = {r.id: r for r in s.scalars(select(WorkloadRow).where(
                WorkloadRow.id.in_([wid for on in shares.values() for wid, _ in on])))}
        plans, owners = [], {}
        for gpu, on in shares.items():
            if gpu not in uuids:
                continue
            sharing = self.cluster.pool_sharing(nodes[gpu[0]].node.pool)
            memory = sharing.gpu_memory_mib if sharing else 0
            members = []
            for wid, share in on:
                row = rows.get(wid)
                if row is None:
                    continue
                limit = int(share * memory)
                members.append(Share(wid, row.attempt, limit, self.pids_of(row),
                                     share_label(limit, memory, sharing.model if sharing else "")))
                owners.update({p: share_key(wid, row.attempt) for p in members[-1].pids or ()})
            plans.append((uuids[gpu], members))
        now, state, actions = self.records.clock(), {}, []
        memory_by, activity_by = {}, {}
        for uuid, members in plans:
            r = readings.get(uuid)
            if r is None:
                continue
            self.since_us[uuid] = r.last_seen_us
            judged = judge_gpu(members, GpuMemory(uuid, r.total_mib, r.used_mib, r.memory_mib),
                               self.state, now, self.watch, owners)
            state.update(judged.state)
            for m in members:
                memory_by[m.workload_id] = judged.used_mib.get(share_key(m.workload_id, m.attempt))
                activity_by[m.workload_id] = share_utilization(m.pids, r.sm_pct)
            for stray in judged.unaccounted:
                log.warning("GPU %s: process %d (%s MiB) belongs to no share of it%s", uuid,
                            stray.pid, stray.used_mib, f" (it is {stray.owner}'s)" if stray.owner else "")
            for a in judged.actions:
                self._act(a, rows[a.workload_id], now)
                actions.append(a)
        self.state = state
        self.host.publish(memory_by, activity_by)
        return actions

    def _act(self, a, row: WorkloadRow, now: float) -> None:
        """Tell the owner (events, the job's log or the server's notice, the
        audit trail); stop it when told to."""
        log.warning("%s/%d: %s", a.workload_id, a.attempt, a.reason)
        with self.records.store.transaction() as s:
            journal.event(s, a.workload_id, f"gpu-memory-{a.kind}", now, a.reason,
                          attempt=a.attempt, data=a.numbers)
            journal.audit(s, now, "scheduler", f"gpu-memory-{a.kind}", a.workload_id,
                          {"user": row.user, "team": row.team, "reason": a.reason, **a.numbers})
            if not kind(row.kind).run_by_backend and a.kind in (WARN, STOP):
                s.add(NoticeRow(user=row.user, server=row.name, kind=NOTICE_KIND,
                                message=a.reason, created_at=now,
                                expires_at=None if a.kind == WARN else now + 3600,
                                data={"workload_id": a.workload_id, **a.numbers}))
        if kind(row.kind).run_by_backend:
            append_own(self.paths.log_path(row.id, row.attempt), f"\n[gpuhub] {a.reason}\n")
        if a.kind == STOP:
            self.host.stop_for(row, a.reason)
