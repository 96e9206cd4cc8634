"""What the service says of itself while a benchmark runs, from its
Prometheus metrics (``/services/gpuhub/metrics``, an admin's token): its
cycle's timing (whole, planning in the worker, applying on the event loop)
and the event loop's stalls (``gpuhub_event_loop_lag_seconds``, from the
service's loop-lag probe) with two of their causes, Python's full garbage
collections and the loop's waits for another thread's transaction, and the
stalls' time by what the loop's thread did meanwhile
(``gpuhub_event_loop_stall_seconds_total``), and the submits the intake stored
and in how many transactions (``gpuhub_intake_rows_total``,
``gpuhub_intake_batches_total``), as differences between two scrapes.

Quantiles come from the histograms' buckets: each is the upper bound of the
bucket it falls in (so "p99 ≤ 75 ms"), never an interpolation.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import requests

from gpuspawner.service.loop.lag import RUNNING, WAITING_FOR_CPU, WAITING_OTHER

_BUCKET = re.compile(r'^(gpuhub_\w+)_bucket\{le="([^"]+)"\} ([0-9.e+-]+)$', re.M)
_SUM = re.compile(r'^(gpuhub_\w+)_sum ([0-9.e+-]+)$', re.M)
STALL_CAUSES = "gpuhub_event_loop_stall_seconds_total"
INTAKE_ROWS, INTAKE_BATCHES = "gpuhub_intake_rows_total", "gpuhub_intake_batches_total"
REASONS_DONE, REASONS_GAVE_WAY = ("gpuhub_reasons_remade_total:done",
                                  "gpuhub_reasons_remade_total:gave_way")
# A counter, with at most one label: read as "NAME" or "NAME:VALUE".
_COUNTER = re.compile(r'^(gpuhub_\w+_total)(?:\{\w+="(\w+)"\})? ([0-9.e+-]+)$', re.M)
# The causes as a row says them.
CAUSE_WORDS = {WAITING_FOR_CPU: "waiting for a CPU", RUNNING: "running on the loop",
               WAITING_OTHER: "waiting for the interpreter or a call"}
HISTOGRAMS = ("gpuhub_cycle_seconds", "gpuhub_cycle_plan_seconds", "gpuhub_cycle_apply_seconds",
              "gpuhub_event_loop_lag_seconds", "gpuhub_gc_full_pause_seconds",
              "gpuhub_event_loop_write_turn_wait_seconds")
STALL_MS = 50.0


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound, cumulative count), ascending
    total: float = 0.0

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def minus(self, before: "Histogram") -> "Histogram":
        old = dict(before.buckets)
        return Histogram([(le, n - old.get(le, 0.0)) for le, n in self.buckets],
                         self.total - before.total)

    def quantile(self, q: float) -> float:
        """The upper bound (seconds) of the bucket holding the q-quantile (0..1)."""
        if not self.count:
            return 0.0
        want = q * self.count
        for le, n in self.buckets:
            if n >= want:
                return le
        return math.inf

    def longest(self) -> float:
        """The upper bound (seconds) of the highest bucket that got any."""
        longest, below = 0.0, 0.0
        for le, n in self.buckets:
            if n > below:
                longest = le
            below = n
        return longest

    def over(self, seconds: float) -> float:
        """How many observations exceeded ``seconds`` (a bucket bound)."""
        within = max((n for le, n in self.buckets if le <= seconds), default=0.0)
        return self.count - within


def parse(text: str) -> dict[str, Histogram]:
    out: dict[str, Histogram] = {}
    for name, le, n in _BUCKET.findall(text):
        if name in HISTOGRAMS:
            out.setdefault(name, Histogram([])).buckets.append(
                (math.inf if le == "+Inf" else float(le), float(n)))
    for name, total in _SUM.findall(text):
        if name in out:
            out[name].total = float(total)
    for name, label, value in _COUNTER.findall(text):
        # A counter: a histogram's sum without buckets.
        out[f"{name}:{label}" if label else name] = Histogram([], float(value))
    for h in out.values():
        h.buckets.sort()
    return out


def scrape(hub_url: str, token: str) -> dict[str, Histogram]:
    r = requests.get(f"{hub_url}/services/gpuhub/metrics",
                     headers={"Authorization": f"token {token}"}, timeout=30)
    r.raise_for_status()
    return parse(r.text)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1) if math.isfinite(seconds) else math.inf


def summary(name: str, before: dict[str, Histogram], after: dict[str, Histogram]) -> dict:
    """A row: the cycles and the loop's stalls between two scrapes."""
    empty = Histogram([])
    d = {k: after.get(k, empty).minus(before.get(k, empty)) for k in HISTOGRAMS}
    causes = {c: after.get(f"{STALL_CAUSES}:{c}", empty).minus(
        before.get(f"{STALL_CAUSES}:{c}", empty)).total for c in CAUSE_WORDS}
    cycle, plan = d["gpuhub_cycle_seconds"], d["gpuhub_cycle_plan_seconds"]
    apply, lag = d["gpuhub_cycle_apply_seconds"], d["gpuhub_event_loop_lag_seconds"]
    gc_full = d["gpuhub_gc_full_pause_seconds"]
    turn = d["gpuhub_event_loop_write_turn_wait_seconds"]
    counted = {k: after.get(k, empty).minus(before.get(k, empty)).total
               for k in (INTAKE_ROWS, INTAKE_BATCHES, REASONS_DONE, REASONS_GAVE_WAY)}
    return {"name": name, "cycles": int(cycle.count),
            "cycle_mean_ms": _ms(cycle.total / cycle.count) if cycle.count else 0.0,
            "cycle_p50_ms": _ms(cycle.quantile(0.5)), "cycle_p99_ms": _ms(cycle.quantile(0.99)),
            "plan_p99_ms": _ms(plan.quantile(0.99)), "apply_p99_ms": _ms(apply.quantile(0.99)),
            "loop_stall_max_ms": _ms(lag.longest()),
            "loop_stalls_over_50ms": int(lag.over(STALL_MS / 1000)),
            "gc_full": int(gc_full.count), "gc_full_max_ms": _ms(gc_full.longest()),
            "write_turn_waits": int(turn.count), "write_turn_wait_max_ms": _ms(turn.longest()),
            "stall_causes_ms": {c: _ms(seconds) for c, seconds in causes.items()},
            "intake_rows": int(counted[INTAKE_ROWS]),
            "intake_batches": int(counted[INTAKE_BATCHES]),
            "reasons_remade": int(counted[REASONS_DONE]),
            "reasons_gave_way": int(counted[REASONS_GAVE_WAY])}


def format_summary(r: dict) -> str:
    return (f"{r['name']:<44} {r['cycles']} cycles, mean {r['cycle_mean_ms']:.1f} ms, "
            f"p50 ≤ {r['cycle_p50_ms']:g} ms, p99 ≤ {r['cycle_p99_ms']:g} ms "
            f"(planning p99 ≤ {r['plan_p99_ms']:g}, on the loop p99 ≤ {r['apply_p99_ms']:g}); "
            f"event loop's longest stall ≤ {r['loop_stall_max_ms']:g} ms, "
            f"{r['loop_stalls_over_50ms']} over {STALL_MS:g} ms{_causes(r)}; "
            f"{r['gc_full']} full GCs, longest ≤ {r['gc_full_max_ms']:g} ms; "
            f"waited for the write turn {r['write_turn_waits']} times, "
            f"longest ≤ {r['write_turn_wait_max_ms']:g} ms{_batches(r)}{_reasons(r)}")


def _batches(r: dict) -> str:
    """The submits stored and in how many transactions (nothing where none were)."""
    rows, batches = r.get("intake_rows", 0), r.get("intake_batches", 0)
    return (f"; stored {rows} submits in {batches} transactions "
            f"({rows / batches:.1f} a transaction)") if batches else ""


def _reasons(r: dict) -> str:
    """How often the reasons and estimates were remade, and stopped part-way
    for a cycle (nothing where neither happened)."""
    done, gave_way = r.get("reasons_remade", 0), r.get("reasons_gave_way", 0)
    return (f"; reasons remade {done} times, {gave_way} more stopped part-way for a cycle"
            if done or gave_way else "")


def _shares(r: dict) -> dict[str, float]:
    """The stalls' time by cause, in percent (empty where none was told)."""
    causes = r.get("stall_causes_ms") or {}
    total = sum(causes.values())
    return {c: 100 * ms / total for c, ms in causes.items()} if total else {}


def _causes(r: dict) -> str:
    """The stalls' time by cause, in shares (nothing where none was told)."""
    shares = _shares(r)
    return " (" + ", ".join(f"{pct:.0f}% {CAUSE_WORDS[c]}" for c, pct in shares.items()) + ")" \
        if shares else ""


def stalls_words(r: dict) -> str:
    """A row's loop stalls in a few words: "12, longest ≤ 75 ms, 79% running on
    the loop" (its largest cause), or "none"."""
    n = r.get("loop_stalls_over_50ms", 0)
    if not n:
        return "none"
    shares = _shares(r)
    top = max(shares, key=shares.get) if shares else None
    return f"{n}, longest ≤ {r['loop_stall_max_ms']:g} ms" + (
        f", {shares[top]:.0f}% {CAUSE_WORDS[top]}" if top else "")
