"""Expected start times in the service: the core's forecast, run times
learned from this cluster's own history, and ranges calibrated on how the
estimates shown earlier turned out.

Everything here is rebuilt from the database at start: the run times of
recently finished workloads, and for workloads that started, the estimate
first shown for them (``workloads.estimated_start`` and
``estimate_made_at``, written once, after the first cycle that left the
workload waiting). The current estimates are derived data, remade after
every cycle.
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from gpuspawner.scheduler.forecast.calibration import Calibration, StartRange, say
from gpuspawner.scheduler.forecast import ROLLOUT_PENDING, Estimate, forecast_steps
from gpuspawner.scheduler.model import Workload
from gpuspawner.scheduler.forecast.runtimes import RuntimeModel, workload_keys
from gpuspawner.store import Attempt, WorkloadRow
from gpuspawner.service.workloads.views import iso

# How many finished workloads the run-time history and the calibration
# are rebuilt from at start (the newest).
HISTORY = 2000
# First estimates written per transaction.
PERSIST_BATCH = 500
# Estimates made shown between two steps (~5 ms; 100,000 queued took ~80 ms).
SHOWN_PER_STEP = 5000


def runtime_subject(row: WorkloadRow) -> str:
    """What a run-time history is kept under beside its user: the name, or
    the notebook or command it runs."""
    spec = row.spec or {}
    return row.name or spec.get("notebook") or " ".join(spec.get("command") or ())[:200]


# What is shown of an estimate: (start, basis, reason) and, when it has a
# start, its range's (expected, earliest, latest, samples).
Shown = tuple


def shown(e: Estimate, r: Optional[StartRange]) -> Shown:
    if r is None:
        return (e.start, e.basis, e.reason)
    return (e.start, e.basis, e.reason, r.expected, r.earliest, r.latest, r.samples)


class StartEstimates:
    def __init__(self, policy, coverage: float = 0.8, limit: int = 2000, every: float = 2.0,
                 rollout_pending: int = ROLLOUT_PENDING):
        self.policy = policy
        self.limit = limit
        self.rollout_pending = rollout_pending
        self.every = every
        self.runtimes = RuntimeModel()
        self.calibration = Calibration(coverage)
        self.subjects: dict[str, str] = {}
        self.persisted: set[str] = set()  # workloads whose first estimate is in the database
        # workload -> Shown: plain tuples of numbers and strings, which the
        # garbage collector stops tracking, so that each of its full
        # collections (the event loop stops for them) does not walk a long
        # queue's estimates as well as its workloads.
        self.current: dict[str, Shown] = {}
        self.made_at = float("-inf")

    # ---- history --------------------------------------------------------
    def load(self, s: Session) -> None:
        """Run times of the newest finished workloads, and the errors of the
        estimates shown for those that started."""
        rows = s.scalars(select(WorkloadRow).where(WorkloadRow.finished_at.is_not(None))
                         .order_by(WorkloadRow.finished_at.desc()).limit(HISTORY)).all()
        ran: dict[str, float] = {}
        for a in s.scalars(select(Attempt).where(Attempt.workload_id.in_([r.id for r in rows]),
                                                  Attempt.ended_at.is_not(None))):
            ran[a.workload_id] = ran.get(a.workload_id, 0.0) + (a.ended_at - a.started_at)
        for row in reversed(rows):
            self.record_run(row, ran.get(row.id, 0.0))
        for row in s.scalars(select(WorkloadRow).where(WorkloadRow.estimate_made_at.is_not(None),
                                                       WorkloadRow.started_at.is_not(None))
                             .order_by(WorkloadRow.started_at.desc()).limit(HISTORY)).all()[::-1]:
            self.record_start(row)

    def track(self, row: WorkloadRow) -> None:
        """A workload not ended yet (at start, or submitted)."""
        self.subjects[row.id] = runtime_subject(row)
        if row.estimate_made_at is not None:
            self.persisted.add(row.id)

    def finished(self, row: WorkloadRow, run_s: float) -> None:
        """It ended for good: how long it ran joins the history."""
        self.record_run(row, run_s)
        self.subjects.pop(row.id, None)
        self.persisted.discard(row.id)

    def persist_first(self, store, now: float) -> None:
        """Each workload's first estimate with a time, written once: what its
        accuracy is judged by when it starts."""
        first = {wid: t for wid in self.current if wid not in self.persisted
                 and (t := self.planned(wid)) is not None}
        table = WorkloadRow.__table__
        first_only = (update(table)
                      .where(table.c.id == bindparam("wid"), table.c.estimate_made_at.is_(None))
                      .values(estimate_made_at=now, estimated_start=bindparam("planned")))
        items = list(first.items())
        # One statement for many, in transactions short enough that the
        # service's other writers (a cancel on the event loop) wait little:
        # 2,000 rows read and written one by one held them for seconds.
        for i in range(0, len(items), PERSIST_BATCH):
            batch = items[i:i + PERSIST_BATCH]
            with store.transaction() as s:
                s.execute(first_only, [{"wid": wid, "planned": t} for wid, t in batch])
            self.persisted.update(wid for wid, _t in batch)

    def record_run(self, row: WorkloadRow, run_s: float) -> None:
        """A workload ended after running ``run_s`` seconds over its attempts.
        Cancelled work says little about how long such work runs."""
        if row.state in ("succeeded", "failed", "stopped") and run_s > 0:
            self.runtimes.record(self._keys(row.user, row.team, row.kind, runtime_subject(row)),
                                 run_s, row.time_limit)

    def record_start(self, row: WorkloadRow) -> None:
        """A workload first started: how its first estimate turned out."""
        if row.estimate_made_at is None or row.estimated_start is None or row.started_at is None:
            return
        self.calibration.record(row.gpus_per_node * row.num_nodes,
                                row.estimated_start - row.estimate_made_at,
                                row.started_at - row.estimate_made_at)

    @staticmethod
    def _keys(user: str, team: str, kind: str, subject: str) -> tuple[str, ...]:
        return workload_keys(Workload("", team, "", 0, 0.0, user=user, kind=kind), subject)

    def runtime(self, w: Workload, elapsed: float) -> Optional[float]:
        keys = self._keys(w.user, w.team, w.kind, self.subjects.get(w.id, ""))
        return self.runtimes.predict(keys, w.time_limit, elapsed)

    # ---- the current estimates ------------------------------------------
    def refresh_steps(self, state, now: float):
        """Remake every pending workload's estimate, in steps (a generator):
        after a cycle, when ``every`` seconds have passed or what waits changed."""
        if now - self.made_at < self.every and self.current.keys() == state.pending.keys():
            return
        estimates = yield from forecast_steps(state, self.policy, now, self.runtime,
                                              limit=self.limit,
                                              rollout_pending=self.rollout_pending)
        current = {}
        for i, (wid, e) in enumerate(estimates.items()):
            w = state.pending[wid]
            r = None if e.start is None else self.calibration.range(w.gpus, now, e.start)
            current[wid] = shown(e, r)
            if i % SHOWN_PER_STEP == SHOWN_PER_STEP - 1:
                yield
        self.current = current
        self.made_at = now

    def view(self, wid: str) -> Optional[dict]:
        """``expected_start`` of a queued workload in the API, or None when
        no estimate was made yet."""
        known = self.current.get(wid)
        if known is None:
            return None
        _start, basis, reason, *in_range = known
        if not in_range:
            return {"time": None, "reason": reason, "text": "start time unknown: " + reason,
                    "basis": basis, "made_at": iso(self.made_at)}
        r = StartRange(*in_range)
        return {"time": iso(r.expected), "earliest": iso(r.earliest), "latest": iso(r.latest),
                "in_seconds": round(max(0.0, r.expected - self.made_at)),
                "text": say(self.made_at, r), "basis": basis,
                "calibrated_on": r.samples, "made_at": iso(self.made_at)}

    def planned(self, wid: str) -> Optional[float]:
        """The plan's start for ``wid`` (what is persisted as its first estimate)."""
        known = self.current.get(wid)
        return None if known is None else known[0]
