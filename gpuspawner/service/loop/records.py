"""The database side of the scheduler's decisions and of attempts' ends:
each function changes rows in the caller's transaction and nothing else."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from gpuspawner.isolation.resources import held
from gpuspawner.scheduler import events as ev
from gpuspawner.store import Allocation, Attempt, GpuRow, NodeRow, UsageRow, WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.scheduler.kinds import kind
from gpuspawner.service.loop.rebuild import placement_to_json
from gpuspawner.vocab.states import HOLDING_STATES, QUEUED, RUNNING, STOPPED, STOPPING

# The state a workload must still be in for a decision about it to stand:
# the cycle was planned on it, and a request may have changed it meanwhile.
PLANNED_ON = {ev.ADMITTED: (QUEUED,), ev.NOMINATED: (QUEUED,), ev.PREEMPTED: (RUNNING,),
              ev.EVICTED: HOLDING_STATES}


def persist_decision(s: Session, e: ev.Event, now: float, attempt: Optional[int],
                     attempt_dir: str, allocations: list, on_first_start=lambda row: None,
                     slots_per_gpu: int = 1) -> bool:
    """Write a decision down; False (nothing written) when the workload is no
    longer as the cycle saw it (``attempt``: its attempt then;
    ``allocations``: where an admission's GPUs are noted, for
    ``allocate_all`` once the cycle's decisions are written;
    ``slots_per_gpu``: its pool's share slots, 1 where GPUs are not shared)."""
    row = s.get(WorkloadRow, e.workload_id)
    expected = PLANNED_ON.get(e.type)
    if row is None or (expected and row.state not in expected) or \
            (attempt is not None and row.attempt != attempt):
        return False
    data = {}
    if e.type == ev.ADMITTED:
        row.state, row.reason, row.nomination = RUNNING, "", None
        if row.started_at is None:
            row.started_at = now
            on_first_start(row)
        s.add(Attempt(workload_id=row.id, number=row.attempt, state=RUNNING,
                      placement=placement_to_json(e.placement),
                      gpus=gpu_units(row), started_at=now,
                      attempt_dir=attempt_dir, borrowed=e.borrowed))
        allocations.append((row, e.placement, slots_per_gpu))
        data = {"placement": placement_to_json(e.placement), "borrowed": e.borrowed}
    elif e.type == ev.NOMINATED:
        row.nomination = placement_to_json(e.placement)
        row.reason = e.message
    elif e.type == ev.NOMINATION_DROPPED:
        row.nomination = None
    elif e.type == ev.PREEMPTED:
        row.state, row.preempted_for, row.kill_at = STOPPING, e.preemptor_id, e.kill_at
        row.reason = e.message
        data = {"preemptor": e.preemptor_id, "kill_at": e.kill_at}
        # Preemptions are decisions about people's work: audited like an admin's.
        journal.audit(s, now, "scheduler", "preempt", row.id,
                      {"preemptor": e.preemptor_id, "team": row.team, "user": row.user,
                       "reason": e.message})
    elif e.type == ev.EVICTED:
        end_attempt(s, row, now, "evicted", None, e.message)
        if kind(row.kind).requeued_when_evicted:
            requeue_row(row, e.message)
        else:
            # A server is not restarted elsewhere behind its user's back:
            # it ends, its spawner sees that and stops the process.
            row.state, row.finished_at = STOPPED, now
            row.reason = f"stopped: {e.message}"
    journal.event(s, row.id, e.type, now, e.message, attempt=row.attempt, data=data)
    return True


def gpu_units(row: WorkloadRow) -> float:
    """GPUs a workload holds, in GPU units: its share of one, or whole GPUs."""
    return row.gpu_share or float(row.gpus_per_node * row.num_nodes)


def allocate_all(s: Session, allocations: list) -> None:
    """The GPUs of admissions (``(row, placement, slots_per_gpu)``) held in
    the database, after their attempts are written (the allocations' key
    refers to them; the session orders its inserts by table, not by key):
    one write of a cycle's attempts, not a flush for each."""
    if not any(gpus for _row, placement, _slots in allocations for _node, gpus in placement):
        return
    s.flush()
    for row, placement, slots_per_gpu in allocations:
        allocate(s, row, placement, slots_per_gpu)
    s.flush()  # a slot already held fails here (the primary key)


def allocate(s: Session, row: WorkloadRow, placement, slots_per_gpu: int) -> None:
    """The slots of its GPUs: all of each GPU's for whole GPUs, the lowest
    free ones of its GPU for a share (those the session holds count: its
    query flushes them first). A slot already held fails the flush (the
    primary key): a GPU is never given twice, nor shared past 100%."""
    wanted = round(row.gpu_share * slots_per_gpu) if row.gpu_share else slots_per_gpu
    for node, gpus in placement:
        for g in gpus:
            held = set(s.scalars(select(Allocation.slot).where(
                Allocation.node == node, Allocation.gpu == g))) if row.gpu_share else set()
            free = [k for k in range(slots_per_gpu) if k not in held][:wanted]
            if len(free) < wanted:
                raise ValueError(f"GPU {g} of {node} has {len(free)} free slot(s) of "
                                 f"{slots_per_gpu}; {row.id} needs {wanted}")
            for k in free:
                s.add(Allocation(node=node, gpu=g, slot=k, workload_id=row.id,
                                 attempt=row.attempt))


def end_attempt(s: Session, row: WorkloadRow, now: float, outcome: str,
                returncode: Optional[int], msg: str, free: bool = True) -> Optional[Attempt]:
    """The attempt's end, its usage, and (``free``; else the caller does it
    for several at once: ``free_gpus``) its GPUs free in the database."""
    attempt = s.get(Attempt, (row.id, row.attempt))
    if attempt is None:
        return None
    attempt.state, attempt.ended_at = outcome, now
    attempt.exit_code, attempt.reason = returncode, msg
    seconds = max(0.0, now - attempt.started_at)
    cpus, memory_gib = held(row.spec, row.num_nodes)
    s.add(UsageRow(workload_id=row.id, attempt=attempt.number, team=row.team, user=row.user,
                   project=row.project, pool=row.pool, kind=row.kind, gpus=attempt.gpus,
                   started_at=attempt.started_at, ended_at=now,
                   gpu_seconds=attempt.gpus * seconds,
                   borrowed_gpu_seconds=attempt.borrowed * seconds,
                   cpu_seconds=cpus * seconds, memory_gib_seconds=memory_gib * seconds))
    if free:
        free_gpus(s, [row.id])
    return attempt


def free_gpus(s: Session, wids) -> None:
    """The allocation rows of these workloads' GPUs gone, one statement per
    ``READ_CHUNK`` of them (a poll's ends free theirs together)."""
    for chunk in _chunks(wids):
        s.execute(delete(Allocation).where(Allocation.workload_id.in_(chunk)))


def requeue_row(row: WorkloadRow, msg: str) -> None:
    """The database side of the core's requeue: same workload, attempt + 1,
    remembering who preempted it."""
    blockers = set(row.preempted_by or ())
    if row.preempted_for:
        blockers.add(row.preempted_for)
    row.preempted_by = sorted(blockers)
    row.attempt += 1
    row.state, row.reason = QUEUED, msg
    row.kill_at, row.preempted_for, row.nomination = None, None, None


# Workloads read per statement by ``rows_by_id`` and ``rows_with_attempts`` (well
# under any database's limit on a statement's parameters).
READ_CHUNK = 500


def rows_with_attempts(s: Session, wids) -> dict[str, tuple[WorkloadRow, list[Attempt]]]:
    """These workloads' rows, each with all its attempts, in two statements
    per ``READ_CHUNK`` workloads instead of several per workload (a poll's
    ends, a cycle's starts): the session's ``get`` of them reads nothing
    more while the returned dict (which holds them) is kept."""
    out = {wid: (row, []) for wid, row in rows_by_id(s, wids).items()}
    for chunk in _chunks(out):
        for a in s.scalars(select(Attempt).where(Attempt.workload_id.in_(chunk))):
            out[a.workload_id][1].append(a)
    return out


def rows_by_id(s: Session, wids) -> dict[str, WorkloadRow]:
    """These workloads' rows, one statement per ``READ_CHUNK``: the
    session's ``get`` of them reads nothing more while the dict is kept
    (a cycle's decisions and a poll's ends are about many at once)."""
    return {row.id: row for chunk in _chunks(wids)
            for row in s.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(chunk)))}


def _chunks(wids) -> list[list[str]]:
    ids = sorted(set(wids))
    return [ids[i:i + READ_CHUNK] for i in range(0, len(ids), READ_CHUNK)]


def lost_before(attempts: list[Attempt]) -> int:
    """How many of a workload's attempts (all of them) were lost."""
    return sum(1 for a in attempts if a.state == "lost")


def ran_seconds(attempts: list[Attempt]) -> float:
    """How long the workload ran over all its ended attempts (all of them)."""
    return sum(a.ended_at - a.started_at for a in attempts if a.ended_at is not None)


def write_reasons(s: Session, reasons: list[tuple[str, str]]) -> None:
    """Why each of these queued workloads waits (one statement for all;
    a workload no longer queued keeps the reason it has)."""
    if reasons:
        table = WorkloadRow.__table__
        s.execute(update(table).where(table.c.id == bindparam("wid"), table.c.state == QUEUED)
                  .values(reason=bindparam("why")),
                  [{"wid": wid, "why": why} for wid, why in reasons])


def node_health(s: Session, node, reason: str, now: float) -> None:
    """A node the cluster now calls (un)healthy or drained (scheduler ``Node``):
    its row and its GPUs' rows, as the pools API and the heat map show them.
    An admin's drain stays; the cluster's reason replaces the last one."""
    row = s.get(NodeRow, node.name)
    if row is None:
        return
    row.healthy, row.updated_at = node.healthy, now
    row.drained = row.drained or node.drained
    for g in s.scalars(select(GpuRow).where(GpuRow.node == node.name)):
        g.healthy, g.health_reason = node.healthy, reason if not node.healthy else ""
