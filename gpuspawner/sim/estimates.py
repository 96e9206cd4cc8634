"""How good are start estimates? Measured on a replay.

``StartEstimates`` rides along a simulation: after each cycle it asks the
forecast for the expected start of every job submitted at that instant
(the estimate a user would see at submit), and every ``every_s`` seconds of
simulated time for every job still waiting (what they would see later);
when a job first starts it compares. Run times are learned as the service
learns them (``RuntimeModel``, from jobs that finished), and ranges from
the errors of estimates whose jobs already started (``Calibration``): no
look-ahead.

``summary()`` keys (seconds; buckets as ``metrics.SIZE_BUCKETS``):

* ``at_submit``, ``later``: per bucket and ``all``: ``n``, ``median_abs_err_s``,
  ``p90_abs_err_s``, ``within_range`` (share of starts inside the range shown),
  ``unknown`` (share of estimates that said "unknown").
* ``at_submit.waited_10min``: the same over jobs that waited over 10 minutes,
  plus ``median_rel_err`` (|error| / real wait) and ``range_within_estimate``
  (share whose range is no wider than the estimated wait).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..scheduler.forecast.calibration import Calibration
from ..scheduler.forecast import ROLLOUT_PENDING, forecast
from ..scheduler.forecast.runtimes import RuntimeModel, workload_keys
from .metrics import percentile, size_bucket

WAITED = 600.0


@dataclass
class _Shown:
    at: float
    planned: Optional[float]  # planned start (None: unknown)
    expected: Optional[float] = None
    earliest: Optional[float] = None
    latest: Optional[float] = None


class StartEstimates:
    def __init__(self, policy, every_s: float = 3600.0, coverage: float = 0.8,
                 rollout_pending: int = ROLLOUT_PENDING):
        self.policy = policy
        self.rollout_pending = rollout_pending  # 0: the plan alone, as before the rollout
        self.every_s = every_s
        self.runtimes = RuntimeModel()
        self.calibration = Calibration(coverage)
        self.submitted_at: dict[str, float] = {}
        self.gpus: dict[str, int] = {}
        self.at_submit: dict[str, _Shown] = {}
        self.later: dict[str, list[_Shown]] = {}
        self.outcomes: list[tuple[str, str, _Shown, float]] = []  # (kind, id, shown, real start)
        self._next_sweep = None

    def runtime(self, w, elapsed: float) -> Optional[float]:
        return self.runtimes.predict(workload_keys(w), w.time_limit, elapsed)

    def after_cycle(self, sched, now: float, submitted: list[str]) -> None:
        """``submitted``: jobs submitted at ``now`` (some may have started)."""
        for wid in submitted:
            w = sched.state.pending.get(wid) or (sched.state.running[wid].workload
                                                 if wid in sched.state.running else None)
            if w is None:
                continue
            self.submitted_at[wid] = now
            self.gpus[wid] = w.gpus
        sweep = self._next_sweep is None or now >= self._next_sweep
        waiting = [wid for wid in submitted if wid in sched.state.pending]
        started = [wid for wid in submitted if wid in sched.state.running]
        for wid in started:
            self.at_submit[wid] = self._show(now, now, wid)
        if not waiting and not sweep:
            return
        only = None if sweep else set(waiting)
        estimates = forecast(sched.state, self.policy, now, self.runtime, only=only,
                             rollout_pending=self.rollout_pending)
        for wid in waiting:
            self.at_submit[wid] = self._show(now, estimates[wid].start, wid)
        if sweep:
            self._next_sweep = now + self.every_s
            for wid, e in estimates.items():
                if wid not in waiting and wid in self.submitted_at:
                    self.later.setdefault(wid, []).append(self._show(now, e.start, wid))

    def _show(self, now: float, planned: Optional[float], wid: str) -> _Shown:
        if planned is None:
            return _Shown(now, None)
        r = self.calibration.range(self.gpus[wid], now, planned)
        return _Shown(now, planned, r.expected, r.earliest, r.latest)

    def started(self, wid: str, now: float) -> None:
        """First start of a job."""
        shown = self.at_submit.pop(wid, None)
        if shown is None:
            return
        self.outcomes.append(("at_submit", wid, shown, now))
        if shown.planned is not None:
            self.calibration.record(self.gpus[wid], shown.planned - shown.at, now - shown.at)
        for s in self.later.pop(wid, ()):
            self.outcomes.append(("later", wid, s, now))

    def finished(self, w, run_s: float) -> None:
        self.runtimes.record(workload_keys(w), run_s, w.time_limit)

    def summary(self) -> dict:
        out: dict = {}
        for kind in ("at_submit", "later"):
            rows = [(wid, s, start) for k, wid, s, start in self.outcomes if k == kind]
            groups: dict[str, list] = {"all": rows}
            for row in rows:
                groups.setdefault(size_bucket(self.gpus[row[0]]), []).append(row)
            out[kind] = {name: _figures(group) for name, group in groups.items()}
            if kind == "at_submit":
                waited = [r for r in rows if r[2] - self.submitted_at[r[0]] > WAITED]
                figures = _figures(waited)
                known = [(s, start) for _, s, start in waited if s.planned is not None]
                if known:
                    figures["median_rel_err"] = percentile(
                        [abs(s.expected - start) / (start - s.at) for s, start in known], 50)
                    figures["range_within_estimate"] = sum(
                        1 for s, _ in known if s.latest - s.earliest <= s.expected - s.at
                    ) / len(known)
                out[kind]["waited_10min"] = figures
        return out


def _figures(rows: list) -> dict:
    if not rows:
        return {"n": 0}
    known = [(s, start) for _, s, start in rows if s.planned is not None]
    out = {"n": len(rows), "unknown": 1 - len(known) / len(rows)}
    if known:
        errors = [abs(s.expected - start) for s, start in known]
        out["median_abs_err_s"] = percentile(errors, 50)
        out["p90_abs_err_s"] = percentile(errors, 90)
        out["within_range"] = sum(1 for s, start in known
                                  if s.earliest - 1e-6 <= start <= s.latest + 1e-6) / len(known)
    return out


def format_estimates(summary: dict) -> str:
    """The accuracy table ``gpuhub simulate --estimates`` prints."""
    def hours(v):
        return "-" if v is None else (f"{v / 3600:.2f} h" if v >= 3600 else f"{v:.0f} s")

    def share(v):
        return "-" if v is None else f"{v:.0%}"

    lines = ["  start estimates   n     median |err|  p90 |err|   within range  unknown"]
    for kind in ("at_submit", "later"):
        for bucket, f in summary.get(kind, {}).items():
            if not f.get("n"):
                continue
            label = f"{kind.replace('_', ' ')} {bucket}"
            lines.append(f"  {label:<17} {f['n']:<5} {hours(f.get('median_abs_err_s')):<13} "
                         f"{hours(f.get('p90_abs_err_s')):<11} {share(f.get('within_range')):<13} "
                         f"{share(f.get('unknown'))}")
    w = summary.get("at_submit", {}).get("waited_10min", {})
    if w.get("n"):
        lines.append(f"  of jobs that waited over 10 min: median |err| / wait "
                     f"{w.get('median_rel_err', 0):.2f}; range no wider than the estimate "
                     f"{share(w.get('range_within_estimate'))}")
    return "\n".join(lines)
