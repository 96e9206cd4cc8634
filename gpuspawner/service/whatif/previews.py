"""What-if previews in the service: the period's history read from the
database, replayed in a worker process (``sim.whatif_worker``) under the
current and the proposed settings, the result kept in the database, and
"Apply" through the quota-change path (``Engine.set_team``), audited with
the preview's figures.

The event loop never runs a replay: the history is read in a thread, the
replay runs in a process of its own at a lower CPU priority, and the loop
only reads its progress lines. A preview is cancelled by killing that
process. Who may do what: admins preview any change and apply it; a team
lead previews changes of their own teams' settings and sees their teams'
figures (and the cluster's), and an admin applies it.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import secrets
import sys
from typing import Any, Callable, Optional

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuspawner.isolation.resources import from_spec as resources_of
from gpuspawner.scheduler.model import Node
from gpuspawner.sim import whatif
from gpuspawner.sim.cluster import Cluster
from gpuspawner.sim.history import (History, PastAttempt, PastWorkload, cluster_of, history_trace,
                           pseudonymise)
from gpuspawner.sim.whatif_worker import request
from gpuspawner.store import Attempt, AuditEntry, EventRow, PreviewRow, Store, WorkloadRow
from gpuspawner.service.loop.facades import ClusterView, Records
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.vocab.times import parse_time
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.rebuild import load_teams, placement_from_json
from gpuspawner.vocab.specs import SpecError
from gpuspawner.times import iso

log = logging.getLogger("gpuhub.whatif")

RUNNING, DONE, FAILED, CANCELLED, INTERRUPTED = "running", "done", "failed", "cancelled", \
    "interrupted"
PERIOD = re.compile(r"([0-9]{1,5}(?:\.[0-9]{1,3})?)([dhm])")
UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0}
# Where a policy knob is set for real (the preview only shows what it would do).
KNOB_CONFIG = {"preemption_delay": "c.GpuHubService.preemption_delay"}


def parse_since(value: Optional[str], now: float, longest_s: float) -> float:
    """The start of the period: ``14d``, ``36h``, ``90m`` back from now, or
    an ISO date (and time) or UNIX seconds."""
    if not value:
        raise SpecError("since", "is required: a period such as 14d, 36h or 90m, or its start "
                                 "(an ISO date such as 2026-11-01, or UNIX seconds)")
    m = PERIOD.fullmatch(value)
    since = now - float(m[1]) * UNITS[m[2]] if m else parse_time(value, "since", now)
    if since >= now:
        raise SpecError("since", f"the period must start in the past, got {value!r}")
    if now - since > longest_s:
        raise SpecError("since", f"the longest period is {longest_s / 86400:g} days "
                                 f"(GpuHubService.whatif_max_days), got {value!r}")
    return since


def past_workloads(s: Session, since: float, until: float) -> list[PastWorkload]:
    """Every workload submitted in [since, until), with its attempts and how
    often it was preempted."""
    window = (WorkloadRow.submitted_at >= since, WorkloadRow.submitted_at < until)
    ids = select(WorkloadRow.id).where(*window).scalar_subquery()
    attempts: dict[str, list[PastAttempt]] = {}
    for wid, start, end, placement in s.execute(
            select(Attempt.workload_id, Attempt.started_at, Attempt.ended_at, Attempt.placement)
            .where(Attempt.workload_id.in_(ids)).order_by(Attempt.workload_id, Attempt.number)):
        gpus = tuple((node, g) for node, gs in placement_from_json(placement) for g in gs)
        attempts.setdefault(wid, []).append(PastAttempt(start, end, gpus))
    preempted = dict(s.execute(select(EventRow.workload_id, func.count())
                               .where(EventRow.type == "preempted", EventRow.workload_id.in_(ids))
                               .group_by(EventRow.workload_id)).all())
    return [PastWorkload(id=r.id, kind=r.kind, team=r.team, user=r.user, pool=r.pool,
                         gpus_per_node=r.gpus_per_node, submitted_at=r.submitted_at,
                         attempts=tuple(attempts.get(r.id, ())), num_nodes=r.num_nodes,
                         priority=r.priority, time_limit=r.time_limit,
                         preemptions=preempted.get(r.id, 0), name=r.name, sweep=r.sweep_id,
                         after=tuple((d["id"], d["condition"]) for d in r.after or ()),
                         gpu_share=r.gpu_share or 0.0,
                         cpus=resources_of(r.spec).cpus or 0.0,
                         memory=resources_of(r.spec).memory_bytes or 0)
            for r in s.execute(select(WorkloadRow).where(*window)).scalars()]


def read_history(store: Store, nodes: list[Node], since: float, until: float,
                 pseudonymous: bool = False) -> tuple[History, Cluster]:
    """The period's history and the cluster as it is now (blocking: run it
    in a thread)."""
    with store.session() as s:
        cluster = cluster_of(nodes, load_teams(s))
        history = history_trace(past_workloads(s, since, until), since, until, cluster.capacity)
    return pseudonymise(history, cluster) if pseudonymous else (history, cluster)


def settings_changed_during(s: Session, since: float, until: float) -> list[str]:
    """Teams whose quotas or weight an admin changed within the period."""
    entries = s.scalars(select(AuditEntry).where(AuditEntry.action == "set-team",
                                                 AuditEntry.time >= since,
                                                 AuditEntry.time < until)
                        .order_by(AuditEntry.time)).all()
    return [f"team {e.target} at {_utc_text(e.time)}" for e in entries]


def _utc_text(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Previews:
    """The service's previews: start, follow, cancel, apply."""

    def __init__(self, records: Records, cluster: ClusterView, set_team: Callable[..., list],
                 *, default_team: str = "", max_running: int = 2,
                 longest_s: float = 30 * 86400.0, restart_cost_s: float = 60.0,
                 buckets: int = 24, python: str = sys.executable):
        """``set_team(who, team, weight, quotas, audit_detail=)``: how an
        applied preview changes a team (workloads/operations.py), its warnings."""
        self.records = records
        self.cluster = cluster
        self.set_team = set_team
        self.default_team = default_team
        self.max_running = max_running
        self.longest_s = longest_s
        self.restart_cost_s = restart_cost_s
        self.buckets = buckets
        self.python = python
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.progress: dict[str, float] = {}
        self._busy = 0  # previews started or starting
        self._tasks: set[asyncio.Task] = set()

    def recover(self) -> None:
        """At start: a preview that was running when the service stopped is not."""
        with self.records.store.transaction() as s:
            for row in s.scalars(select(PreviewRow).where(PreviewRow.state == RUNNING)):
                row.state, row.finished_at = INTERRUPTED, self.records.clock()
                row.error = "the service restarted while it ran: preview again"

    # ---- start -------------------------------------------------------------------------
    async def start(self, who: Identity, since_text: Optional[str], changes: Any) -> PreviewRow:
        if not (who.admin or who.leads):
            raise Forbidden("a what-if preview needs the scope custom:gpuhub:admin, or "
                            "custom:gpuhub:team-admin for a lead's own team")
        now = self.records.clock()
        since = parse_since(since_text, now, self.longest_s)
        if self._busy >= self.max_running:
            raise Conflict(f"{self._busy} previews are running, the most at once "
                           f"(GpuHubService.whatif_max_running): wait for one or cancel it")
        self._busy += 1
        row = None
        try:
            nodes = [ln.node for ln in self.cluster.nodes.values()]
            history, cluster, notes = await asyncio.to_thread(self._gather, nodes, since, now)
            try:
                changes = whatif.validate_changes(
                    changes, cluster, default_team=self.default_team,
                    allowed_teams=None if who.admin else who.leads)
            except whatif.ChangeError as e:
                raise SpecError("set" + (f".{e.field}" if e.field else ""), e.message) from None
            row = PreviewRow(id="p" + secrets.token_hex(6), actor=who.name,
                             teams=None if who.admin else sorted(who.leads), created_at=now,
                             since=since, until=now, changes=changes,
                             baseline=whatif.team_settings(cluster), state=RUNNING,
                             progress=0.0, error="", applied_by="")
            with self.records.store.transaction() as s:
                s.add(row)
            data = await asyncio.to_thread(  # the whole history as JSON: not on the loop
                request, history, cluster, self.cluster.policy, changes,
                default_team=self.default_team, buckets=self.buckets,
                restart_cost_s=self.restart_cost_s)
            proc = await asyncio.create_subprocess_exec(
                self.python, "-m", "gpuspawner.sim.whatif_worker", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=1 << 26)  # the result is one line
        except BaseException as e:
            self._busy -= 1
            if row is not None:
                self._save(row.id, state=FAILED, error=f"could not start the replay: {e}")
            raise
        self.procs[row.id] = proc
        self.progress[row.id] = 0.0
        task = asyncio.ensure_future(self._follow(row.id, proc, data, notes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return row

    def _gather(self, nodes: list[Node], since: float, until: float):
        history, cluster = read_history(self.records.store, nodes, since, until)
        with self.records.store.session() as s:
            changed = settings_changed_during(s, since, until)
        notes = [f"Left out: {n} workload(s) that {why}." for why, n in history.left_out.items()]
        if changed:
            notes.append("Quotas or weights changed during the period (" + "; ".join(changed)
                         + "): what happened ran partly under other settings than the current "
                           "ones, which the fidelity figures then include.")
        return history, cluster, notes

    async def _follow(self, pid: str, proc, data: bytes, notes: list[str]) -> None:
        result, error = None, ""
        try:
            try:
                proc.stdin.write(data)
                await proc.stdin.drain()
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # killed (cancelled) before it read its input
            stderr = asyncio.ensure_future(proc.stderr.read())
            last_saved = 0.0
            async for line in proc.stdout:
                message = json.loads(line)
                if "progress" in message:
                    self.progress[pid] = message["progress"]
                    if self.records.clock() - last_saved >= 2.0:
                        last_saved = self.records.clock()
                        self._save(pid, progress=message["progress"])
                elif "result" in message:
                    result = message["result"]
                elif "error" in message:
                    error = message["error"]
            code = await proc.wait()
            tail = (await stderr).decode("utf-8", "replace").strip().splitlines()[-5:]
            if result is not None:
                result["assumptions"] = [*result["assumptions"], *notes]
                self._save(pid, state=DONE, progress=1.0, result=result)
            elif pid not in self.procs:
                pass  # cancelled: cancel() recorded it
            else:
                self._save(pid, state=FAILED, error=error or "the replay ended without a "
                           f"result (exit {code}): " + " ".join(tail))
        except Exception as e:  # a preview's failure must not reach the service
            log.exception("preview %s failed", pid)
            self._save(pid, state=FAILED, error=f"{type(e).__name__}: {e}")
        finally:
            self.procs.pop(pid, None)
            self.progress.pop(pid, None)
            self._busy -= 1

    def _save(self, pid: str, **values) -> None:
        with self.records.store.transaction() as s:
            row = s.get(PreviewRow, pid)
            if row is None or row.state != RUNNING:
                return  # cancelled meanwhile
            for k, v in values.items():
                setattr(row, k, v)
            if values.get("state", RUNNING) != RUNNING:
                row.finished_at = self.records.clock()

    # ---- read, cancel ---------------------------------------------------------------------
    def get(self, who: Identity, pid: str) -> PreviewRow:
        with self.records.store.session() as s:
            row = s.get(PreviewRow, pid)
        if row is None or not (who.admin or row.actor == who.name):
            raise NotFound(f"no preview {pid}")
        return row

    def recent(self, who: Identity, limit: int = 10) -> list[PreviewRow]:
        q = select(PreviewRow).order_by(PreviewRow.created_at.desc()).limit(limit)
        if not who.admin:
            q = q.where(PreviewRow.actor == who.name)
        with self.records.store.session() as s:
            return list(s.scalars(q))

    def view(self, who: Identity, row: PreviewRow) -> dict:
        """The preview as the API shows it to ``who``."""
        result = row.result
        if result is not None and not who.admin:
            # A lead sees the teams they led when they asked, and still lead.
            result = whatif.only_teams(result, set(row.teams or ()) & who.leads)
        return {"id": row.id, "actor": row.actor, "state": row.state,
                "progress": self.progress.get(row.id, row.progress),
                "since": iso(row.since), "until": iso(row.until), "created_at": iso(row.created_at),
                "finished_at": iso(row.finished_at), "changes": row.changes,
                "error": row.error or None, "result": result, "applied_at": iso(row.applied_at),
                "applied_by": row.applied_by or None,
                "apply_refusal": self.apply_refusal(who, row)}

    def cancel(self, who: Identity, pid: str) -> PreviewRow:
        row = self.get(who, pid)
        if row.state != RUNNING:
            raise Conflict(f"preview {pid} is {row.state}: only a running preview can be "
                           f"cancelled")
        with self.records.store.transaction() as s:
            row = s.get(PreviewRow, pid)
            row.state, row.finished_at = CANCELLED, self.records.clock()
            row.error = f"cancelled by {who.name}"
        proc = self.procs.pop(pid, None)
        if proc is not None and proc.returncode is None:
            proc.kill()
        return row

    # ---- apply ----------------------------------------------------------------------------
    def apply_refusal(self, who: Identity, row: PreviewRow) -> Optional[str]:
        """Why ``who`` may not apply this preview now, or None."""
        if not who.admin:
            return ("applying changes quotas, which needs the scope custom:gpuhub:admin: an "
                    f"admin can apply preview {row.id} from its page")
        if row.state != DONE:
            return f"preview {row.id} is {row.state}: only a finished preview can be applied"
        if row.applied_at:
            return f"preview {row.id} was applied by {row.applied_by} at {_utc_text(row.applied_at)}"
        knobs = sorted(k for k in row.changes if k.startswith("policy."))
        if knobs:
            where = "; ".join(f"{k}: {KNOB_CONFIG.get(k[7:], 'not a setting of the service')}"
                              for k in knobs)
            return ("policy knobs are the service's configuration (gpuhub_config.py), not "
                    f"settings the panel saves ({where}): preview the team settings alone to "
                    "apply them")
        return None

    def apply(self, who: Identity, pid: str) -> dict:
        row = self.get(who, pid)
        refusal = self.apply_refusal(who, row)
        if refusal:
            raise (Forbidden if not who.admin else Conflict)(refusal)
        with self.records.store.session() as s:
            cluster = cluster_of([ln.node for ln in self.cluster.nodes.values()], load_teams(s))
        now_settings = whatif.team_settings(cluster)
        changed = sorted(t for t in set(now_settings) | set(row.baseline)
                         if now_settings.get(t) != row.baseline.get(t))
        if changed:
            raise Conflict(f"the settings of team(s) {', '.join(changed)} changed since preview "
                           f"{pid} was made: preview again, so that it compares with what is in "
                           f"place now")
        figures = whatif.summary(row.result)
        warnings: list[str] = []
        applied = []
        for change in whatif.team_changes(row.changes, cluster):
            warnings += self.set_team(
                who, change.team, change.weight, change.quotas or None, audit_detail={
                    "preview": pid, "preview_changes": change.settings,
                    "preview_period": [iso(row.since), iso(row.until)],
                    "preview_figures": figures})
            applied.append(change.team)
        with self.records.store.transaction() as s:
            r = s.get(PreviewRow, pid)
            r.applied_at, r.applied_by = self.records.clock(), who.name
        return {"id": pid, "applied": applied, "warnings": warnings}


