"""What ``gpuhub ls`` and ``gpuhub pools`` print: a workload's row (its GPUs,
CPUs and memory, age, expected start, its reason spelled out) and the pools'
table. Pure: rows in, text out."""
from __future__ import annotations

import re
from typing import Optional, Sequence

from ..isolation.resources import human_memory
from .common import fmt_age, format_table, parse_time


def fmt_gpus(w: dict) -> str:
    nodes = w.get("nodes") or 1
    if nodes > 1:
        return f"{nodes}x{w.get('gpus_per_node', 0)}"
    return str(w.get("gpus", 0))


def fmt_resources(w: dict) -> str:
    """CPUs/memory per node ("1/8GiB"); "-" for one submitted before requests."""
    if w.get("cpus") is None or w.get("memory") is None:
        return "-"
    return f"{w['cpus']:g}/{human_memory(w['memory'])}"


WORKLOAD_HEADERS = ("ID", "KIND", "NAME", "TEAM", "USER", "STATE", "GPUS", "CPU/MEM", "POOL",
                    "AGE", "START", "REASON")
# The scheduler's "team a is at 3/2 default GPUs ...": used/nominal.
_AT_QUOTA = re.compile(r"\bis at (\d+(?:\.\d+)?)/(\d+) (\S+) GPUs\b")  # shares: 1.25/2


def readable_reason(reason: Optional[str]) -> str:
    """The reason on one line, with "is at 3/2 default GPUs" spelled out as
    "has 3 default GPUs in use, quota 2 (borrowing 1)"."""
    def spell(m: re.Match) -> str:
        used, nominal, pool = float(m.group(1)), int(m.group(2)), m.group(3)
        text = f"has {used:g} {pool} GPU{'s' if used != 1 else ''} in use, quota {nominal}"
        return text + (f" (borrowing {used - nominal:g})" if used > nominal else "")
    return _AT_QUOTA.sub(spell, " ".join((reason or "").split()))


def workload_name(w: dict) -> str:
    """The name, or for a notebook server without one JupyterHub's default server."""
    if w.get("name"):
        return w["name"]
    return "(default)" if w.get("kind") == "notebook" else "-"


def expected_start(w: dict, now: float) -> str:
    """A queued workload's expected start, as ``squeue --start`` would say it:
    "in ~12m (5m-30m)", "unknown", or "-" before the scheduler looked at it."""
    e = w.get("expected_start")
    if not e:
        return "-"
    if e.get("time") is None:
        return "unknown"
    at, low, high = (parse_time(e.get(k)) for k in ("time", "earliest", "latest"))
    if high is not None and high - now < 60:
        return "now"
    text = f"in ~{fmt_age(at - now)}"
    if low is not None and high is not None:
        text += f" ({fmt_age(low - now)}-{fmt_age(high - now)})"
    return text


def workload_row(w: dict, now: float) -> list[str]:
    submitted = parse_time(w.get("submitted_at"))
    # The current attempt's start: a requeued workload waiting again has none.
    attempts = w.get("attempts") or []
    started = parse_time(attempts[-1].get("started_at") if attempts else w.get("started_at"))
    if w.get("state") == "queued":
        start = expected_start(w, now)
    elif w.get("state") == "held" or not started:
        start = "-"
    else:
        start = fmt_age(now - started) + " ago"
    return [w.get("id", ""), w.get("kind") or "job", workload_name(w), w.get("team", ""),
            w.get("user", ""), w.get("state", ""), fmt_gpus(w), fmt_resources(w), w.get("pool", ""),
            fmt_age(now - submitted) if submitted else "-", start,
            readable_reason(w.get("reason"))]


def format_workloads(workloads: Sequence[dict], now: float, width: Optional[int] = None) -> str:
    """The ``gpuhub ls`` table; the reasons wrapped to ``width`` when given."""
    if not workloads:
        return "No workloads."
    return format_table(WORKLOAD_HEADERS, [workload_row(w, now) for w in workloads], width)


def format_pools(pools: Sequence[dict]) -> str:
    rows = []
    for p in pools:
        capacity = str(p.get("capacity", 0))
        if p.get("total", p.get("capacity")) != p.get("capacity"):
            capacity += f" of {p['total']}"
        queued = str(p.get("queued_workloads", 0))
        if p.get("queued_workloads"):
            queued += f" ({p.get('queued_gpus', 0)} GPUs)"
        teams = ", ".join(f"{t}={n}" for t, n in sorted((p.get("teams") or {}).items())) or "-"
        rows.append([p.get("name", ""), capacity, p.get("used", 0), p.get("free", 0), queued,
                     teams])
    if not rows:
        return "No pools."
    return format_table(("POOL", "CAPACITY", "USED", "FREE", "QUEUED", "TEAMS"), rows)
