"""What-if: the cluster's history replayed under the current settings and
under proposed ones, side by side, with how far the replay of the current
settings is from what really happened (its fidelity).

Settings are changed by keys (the same in the API, the admin panel and
``gpuhub simulate --set``):

* ``team.TEAM.POOL.nominal``, ``team.TEAM.POOL.borrowing_limit``,
  ``team.TEAM.POOL.lending_limit``: a whole number of GPUs (a limit may be
  None: no limit);
* ``team.TEAM.weight``: the fair-share weight, in (0, 1000];
* ``policy.KNOB``: one of ``KNOBS``.

The default team's nominal quota is what the other teams do not own, as in
the service: it grows or shrinks by what their nominal quotas lose or gain.

Figures per team (``figures``): jobs that started, mean and p95 wait (submit
to first start), GPU-hours received within the period against its nominal
quota's GPU-hours, preemptions; for the cluster, the share of its GPU-hours
in use; and the mean wait per time bucket (by submit time) for the charts.
"""
from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping, Optional

from ..scheduler.model import PriorityClass, Quota, Team
from ..scheduler.policy import Policy
from .cluster import Cluster
from .history import Outcome, StartLag
from .metrics import percentile
from .simulate import SimResult, simulate
from .trace import TraceJob

QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit", "cpus", "memory_gib")
GIB = 1 << 30
MAX_WEIGHT = 1000.0
MAX_GPUS = 1_000_000
DAY = 86400.0


@dataclass(frozen=True)
class Knob:
    kind: str  # "seconds", "count" or "switch"
    optional: bool  # may be None (off)
    help: str


# Policy knobs a preview may change (the Policy fields of the same name).
KNOBS: dict[str, Knob] = {
    "preemption_delay": Knob("seconds", False, "seconds a batch job waits for GPUs to free up "
                                               "by themselves before it may preempt"),
    "default_grace_period": Knob("seconds", False, "seconds between SIGTERM and kill for "
                                                   "preempted work"),
    "min_runtime": Knob("seconds", False, "a workload is not preempted before it has run "
                                          "this long"),
    "age_protection": Knob("seconds", True, "a (re)started workload is not preempted before "
                                            "it has run as long as its age at that start, up "
                                            "to this long (none: off)"),
    "max_preemptions": Knob("count", True, "a workload preempted this many times is not "
                                           "preempted again (none: no cap)"),
    "aging_after": Knob("seconds", True, "work waiting this long is considered right after "
                                         "the reservation holders (none: no aging)"),
    "reserve_for_borrowers_after": Knob("seconds", True, "work its quota blocks only because "
                                                         "the pool is full may hold a backfill "
                                                         "reservation after this long (none: "
                                                         "never)"),
    "reserve_past_team_block": Knob("switch", False, "aged work and reservation holders "
                                                     "still reserve when a teammate was refused "
                                                     "for a full pool in the same cycle"),
    "promised_passes_borrowers": Knob("switch", False, "work its team's nominal quota holds "
                                                       "with all the team's queue may take "
                                                       "GPUs a borrower's reservation holds"),
    "usage_half_life": Knob("seconds", False, "half-life of the usage fair sharing remembers"),
    "backfill": Knob("switch", False, "EASY backfill around blocked work"),
    "preemption": Knob("switch", False, "reclaim of lent quota and priority preemption"),
    "fair_share": Knob("switch", False, "order teams borrowing capacity by weighted share"),
}


class ChangeError(ValueError):
    """A setting that cannot be previewed; ``field`` is its key ("": none)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


# ---- changes -------------------------------------------------------------------------------

def parse_value(text: str) -> Any:
    """A command line value: none/null, true/false, a whole number, a number."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_setting(text: str) -> tuple[str, Any]:
    """``team.vision.a100.nominal=4`` -> (key, value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ChangeError(text, "a setting is KEY=VALUE, e.g. team.vision.default.nominal=4")
    return key.strip(), parse_value(value)


@dataclass(frozen=True)
class Key:
    """A parsed setting key: a team's quota field or weight, or a knob."""

    scope: str  # "team" or "policy"
    name: str  # the team, or the knob
    pool: str = ""
    field: str = ""  # quota field, "weight", or the knob


def parse_key(key: str, teams: Iterable[str], pools: Iterable[str]) -> Key:
    if not isinstance(key, str) or not key:
        raise ChangeError(str(key), "is not a setting")
    scope, _, rest = key.partition(".")
    if scope == "policy":
        if rest not in KNOBS:
            raise ChangeError(key, f"unknown policy knob {rest!r}; known: {', '.join(KNOBS)}")
        return Key("policy", rest, field=rest)
    if scope != "team":
        raise ChangeError(key, "a setting starts with team. or policy. (team.TEAM.POOL.nominal, "
                               "team.TEAM.weight, policy.KNOB)")
    # Team and pool names may hold dots: the longest team name that fits wins.
    team = max((t for t in teams if rest.startswith(t + ".")), key=len, default=None)
    if team is None:
        raise ChangeError(key, f"no team in {rest!r}; teams: {', '.join(sorted(teams)) or 'none'}")
    tail = rest[len(team) + 1:]
    if tail == "weight":
        return Key("team", team, field="weight")
    pool, _, name = tail.rpartition(".")
    if name not in QUOTA_FIELDS:
        raise ChangeError(key, f"a team's setting is weight or POOL.{'|'.join(QUOTA_FIELDS)}")
    if pool not in set(pools):
        raise ChangeError(key, f"unknown pool {pool!r}; pools: {', '.join(sorted(pools))}")
    return Key("team", team, pool=pool, field=name)


def check_knob(key: str, name: str, value: Any) -> Any:
    """The value of policy knob ``name`` (a ``KNOBS`` key), checked; ``key``
    names the setting in the error."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    knob = KNOBS[name]
    if value is None and knob.optional:
        return None
    if knob.kind == "switch":
        if not isinstance(value, bool):
            raise ChangeError(key, f"must be true or false, got {value!r}")
        return value
    if knob.kind == "count":
        if not number or value != int(value) or not 0 <= value <= MAX_GPUS:
            raise ChangeError(key, f"must be a whole number >= 0"
                                   f"{' or none' if knob.optional else ''}, got {value!r}")
        return int(value)
    if not number or not math.isfinite(value) or not 0 <= value <= 365 * DAY:
        raise ChangeError(key, f"must be seconds from 0 to {365 * DAY:.0f}"
                               f"{' or none' if knob.optional else ''}, got {value!r}")
    return float(value)


def _check_value(key: str, k: Key, value: Any, capacity: Mapping[str, int]) -> Any:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if k.scope == "policy":
        return check_knob(key, k.field, value)
    if k.field == "weight":
        if not number or not 0 < value <= MAX_WEIGHT:
            raise ChangeError(key, f"must be a number in (0, {MAX_WEIGHT:.0f}], got {value!r}")
        return float(value)
    if value is None and k.field != "nominal":
        return None
    if k.field in ("cpus", "memory_gib"):  # a CPU or memory ceiling (none: no limit)
        if not number or not math.isfinite(value) or value < 0:
            raise ChangeError(key, f"must be a number >= 0 or none (no limit), got {value!r}")
        return float(value)
    if not number or value != int(value) or not 0 <= value <= MAX_GPUS:
        raise ChangeError(key, f"must be a whole number of GPUs"
                               f"{'' if k.field == 'nominal' else ' or none (no limit)'}, "
                               f"got {value!r}")
    if k.field == "nominal" and value > capacity.get(k.pool, 0):
        raise ChangeError(key, f"{int(value)} GPUs cannot be guaranteed: pool {k.pool} has "
                               f"{capacity.get(k.pool, 0)} GPUs in all")
    return int(value)


def validate_changes(changes: Mapping[str, Any], cluster: Cluster, *, default_team: str = "",
                     allowed_teams: Optional[Iterable[str]] = None) -> dict[str, Any]:
    """The changes with their values checked and normalised (keys as given).
    ``allowed_teams`` (a lead's teams; None: any) limits whose settings may
    change, and keeps policy knobs, which every team feels, to admins."""
    if not isinstance(changes, Mapping) or not changes:
        raise ChangeError("", "name at least one setting to change, e.g. "
                              "team.vision.default.nominal=4")
    teams = {t.name for t in cluster.teams}
    capacity = cluster.capacity
    allowed = None if allowed_teams is None else set(allowed_teams)
    out: dict[str, Any] = {}
    for key, value in changes.items():
        k = parse_key(key, teams, capacity)
        if allowed is not None and (k.scope == "policy" or k.name not in allowed):
            raise ChangeError(key, "a team lead previews changes of their own team's settings "
                                   f"only ({', '.join(sorted(allowed)) or 'none'})")
        if k.scope == "team" and k.name == default_team and k.field != "weight":
            raise ChangeError(key, f"team {default_team} is the default team: its nominal quota "
                                   f"is what the other teams do not own; change theirs instead")
        out[key] = _check_value(key, k, value, capacity)
    after = apply_changes(cluster, Policy(), out, default_team=default_team)[0]
    for team in after.teams:
        for pool, q in team.quotas.items():
            if q.lending_limit is not None and q.lending_limit > q.nominal:
                raise ChangeError(f"team.{team.name}.{pool}.lending_limit",
                                  f"{q.lending_limit} is more than the team's nominal quota "
                                  f"({q.nominal}): a team lends only from its own idle nominal "
                                  f"quota")
    return out


@dataclass
class TeamChange:
    """What ``changes`` do to one team: its new weight (None: unchanged),
    the whole new quota of each pool they touch, and their settings."""

    team: str
    weight: Optional[float] = None
    quotas: dict[str, Quota] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


def team_changes(changes: Mapping[str, Any], cluster: Cluster) -> list[TeamChange]:
    """The team settings of ``changes`` (validated), per team in name order:
    what saving them changes (``Engine.set_team``'s arguments)."""
    teams = {t.name: t for t in cluster.teams}
    out: dict[str, TeamChange] = {}
    for key, value in changes.items():
        k = parse_key(key, teams, cluster.capacity)
        if k.scope != "team":
            continue
        change = out.setdefault(k.name, TeamChange(k.name))
        change.settings[key] = value
        if k.field == "weight":
            change.weight = value
        else:
            quota = change.quotas.get(k.pool, teams[k.name].quota(k.pool))
            if k.field == "memory_gib":
                change.quotas[k.pool] = replace(
                    quota, memory=None if value is None else round(value * GIB))
            else:
                change.quotas[k.pool] = replace(quota, **{k.field: value})
    return [out[name] for name in sorted(out)]


def apply_changes(cluster: Cluster, policy: Policy, changes: Mapping[str, Any], *,
                  default_team: str = "") -> tuple[Cluster, Policy]:
    """The cluster's teams and the policy with ``changes`` (validated) made."""
    teams = {t.name: t for t in cluster.teams}
    nominal_before = _nominal_by_pool(teams.values(), default_team)
    for c in team_changes(changes, cluster):
        team = teams[c.team]
        teams[c.team] = replace(team, weight=team.weight if c.weight is None else c.weight,
                                quotas={**team.quotas, **c.quotas})
    default = teams.get(default_team)
    if default is not None:
        nominal_after = _nominal_by_pool(teams.values(), default_team)
        quotas = dict(default.quotas)
        for pool in cluster.capacity:
            freed = nominal_before.get(pool, 0) - nominal_after.get(pool, 0)
            if freed:
                q = default.quota(pool)
                quotas[pool] = replace(q, nominal=max(0, q.nominal + freed))
        teams[default_team] = replace(default, quotas=quotas)
    knobs = {key[len("policy."):]: value for key, value in changes.items()
             if key.startswith("policy.")}
    return Cluster(cluster.nodes, list(teams.values())), policy.with_(**knobs)


def _nominal_by_pool(teams: Iterable[Team], default_team: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in teams:
        if t.name != default_team:
            for pool, q in t.quotas.items():
                out[pool] = out.get(pool, 0) + q.nominal
    return out


# ---- figures -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Buckets:
    """The time buckets of the waits over time: ``count`` of ``width_s``
    from ``start_s`` (seconds from the period's start)."""

    start_s: float
    width_s: float
    count: int

    @classmethod
    def over(cls, jobs: Iterable[TraceJob], horizon_s: float, count: int) -> "Buckets":
        """From the first submission to the end of the period: a period with
        little early work still gets a chart with something in it."""
        start = min((j.submit_time_s for j in jobs), default=0.0)
        if start >= horizon_s:
            start = 0.0
        return cls(start, (horizon_s - start) / count, count)

    def of(self, t: float) -> int:
        return min(self.count - 1, max(0, int((t - self.start_s) // self.width_s)))


@dataclass
class Run:
    """One workload's course, replayed or real (seconds from the period's start)."""

    team: str
    submit_s: float
    first_start_s: Optional[float]
    preemptions: int = 0


def figures(runs: Iterable[Run], gpu_seconds: Mapping[str, float], cluster: Cluster,
            horizon_s: float, buckets: Buckets) -> dict:
    """The figures of one course of the period under ``cluster``'s settings.
    ``starts_waited``: how many starts of other work came, on average, while
    a job of the team waited (how far back in a queue it was)."""
    runs = list(runs)
    starts = sorted(r.first_start_s for r in runs if r.first_start_s is not None)
    waits: dict[str, list[tuple[float, float]]] = {}
    behind: dict[str, int] = {}
    preempted: dict[str, int] = {}
    never: dict[str, int] = {}
    for r in runs:
        preempted[r.team] = preempted.get(r.team, 0) + r.preemptions
        if r.first_start_s is None:
            never[r.team] = never.get(r.team, 0) + 1
        else:
            waits.setdefault(r.team, []).append((r.submit_s, max(0.0, r.first_start_s - r.submit_s)))
            behind[r.team] = behind.get(r.team, 0) + max(
                0, bisect_left(starts, r.first_start_s) - bisect_right(starts, r.submit_s))
    hours = horizon_s / 3600
    teams = {}
    over_time = {}
    names = sorted({t.name for t in cluster.teams} | set(waits) | set(never))
    for name in names:
        team = next((t for t in cluster.teams if t.name == name), None)
        nominal = sum(q.nominal for q in team.quotas.values()) if team else 0
        w = [x for _, x in waits.get(name, [])]
        teams[name] = {
            "jobs": len(w),
            "never_started": never.get(name, 0),
            "mean_wait_s": sum(w) / len(w) if w else None,
            "p95_wait_s": percentile(w, 95) if w else None,
            "gpu_hours": gpu_seconds.get(name, 0.0) / 3600,
            "nominal_gpu_hours": nominal * hours,
            "preemptions": preempted.get(name, 0),
            "starts_waited": behind.get(name, 0) / len(w) if w else 0.0,
        }
        sums = [[0.0, 0] for _ in range(buckets.count)]
        for submit, wait in waits.get(name, []):
            b = sums[buckets.of(submit)]
            b[0] += wait
            b[1] += 1
        over_time[name] = [s / n if n else None for s, n in sums]
    capacity = cluster.total_gpus * horizon_s
    return {"teams": teams, "waits_over_time": over_time,
            "utilisation": sum(gpu_seconds.values()) / capacity if capacity else 0.0}


def actual_figures(outcomes: Iterable[Outcome], cluster: Cluster, horizon_s: float,
                   buckets: Buckets) -> dict:
    outcomes = list(outcomes)
    gpu_s: dict[str, float] = {}
    for o in outcomes:
        for start, end in o.held:
            gpu_s[o.team] = gpu_s.get(o.team, 0.0) + o.gpus * _overlap(start, end, horizon_s)
    return figures((Run(o.team, o.submit_s, o.first_start_s, o.preemptions) for o in outcomes),
                   gpu_s, cluster, horizon_s, buckets)


def replay_figures(result: SimResult, cluster: Cluster, horizon_s: float, buckets: Buckets,
                   lag: StartLag = StartLag()) -> dict:
    """The figures of a replay made with ``lag`` (``preview``): waits count
    from the real submission, and GPU-hours leave out the lag each attempt
    held its GPUs for, as the real attempts' records do."""
    gpu_s: dict[str, float] = {}
    timeline = result.timeline
    for (t, in_use), (t_next, _) in zip(timeline, [*timeline[1:], (math.inf, {})]):
        span = _overlap(t, t_next, horizon_s)
        for team, gpus in in_use.items():
            gpu_s[team] = gpu_s.get(team, 0.0) + gpus * span
    for r in result.records:
        if r.finish is not None and r.finish <= horizon_s:
            gpu_s[r.team] -= (1 + r.preemptions) * r.gpus * lag.after_exit_s
    submit_lag_s = lag.after_submit_s
    runs = (Run(r.team, r.submit - submit_lag_s, r.first_start, r.preemptions)
            for r in result.records if not r.rejected)
    return figures(runs, gpu_s, cluster, horizon_s, buckets)


def _overlap(start: float, end: float, horizon_s: float) -> float:
    return max(0.0, min(end, horizon_s) - max(start, 0.0))


def fidelity(actual: dict, replayed: dict) -> dict:
    """How far the replay of the current settings is from what happened: per
    team the mean wait's error (seconds, and relative), the cluster's
    utilisation error (points); ``wait_error_s`` is the largest team's."""
    teams = {}
    for name, real in actual["teams"].items():
        sim = replayed["teams"].get(name, {})
        a, r = real["mean_wait_s"], sim.get("mean_wait_s")
        if a is None or r is None:
            continue
        teams[name] = {"actual_mean_wait_s": a, "replayed_mean_wait_s": r, "error_s": r - a,
                       "error_pct": 100 * (r - a) / a if a > 0 else None}
    u_real, u_sim = actual["utilisation"], replayed["utilisation"]
    return {"teams": teams,
            "wait_error_s": max((abs(t["error_s"]) for t in teams.values()), default=0.0),
            "actual_utilisation": u_real, "replayed_utilisation": u_sim,
            "utilisation_error_points": 100 * (u_sim - u_real)}


# ---- the preview ---------------------------------------------------------------------------

ASSUMPTIONS = (
    "Demand is replayed as it was: the same submissions at the same times with the same run "
    "times. Nobody submits more, less or later because waits change.",
    "The cluster is as it is now for the whole period; work submitted before the period is not "
    "replayed, so the replay starts on an empty cluster.",
    "The replay is the scheduling core the service runs.",
)


def preview(jobs: list[TraceJob], outcomes: Mapping[str, Outcome], horizon_s: float,
            cluster: Cluster, policy: Policy, changes: Mapping[str, Any], *,
            default_team: str = "", buckets: int = 24, restart_cost_s: float = 60.0,
            lag: StartLag = StartLag(), run_jitter_s: float = 0.0,
            progress: Optional[Callable[[float], None]] = None) -> dict:
    """Replay ``jobs`` under the current settings and under ``changes``; the
    figures of both beside what happened, and the fidelity. ``progress``
    hears 0 to 1 (what it raises ends the preview).

    ``lag`` (``History.lag``) is the service's own delay in starting work:
    the replay sees each submission ``lag.after_submit_s`` later and each
    attempt hold its GPUs ``lag.after_exit_s`` longer, so that starts come
    as long after the submission or the exit that allowed them as they did.
    ``run_jitter_s`` (``History.run_jitter_s``) goes into the margins."""
    started = time.perf_counter()
    served = [replace(j, submit_time_s=j.submit_time_s + lag.after_submit_s,
                      duration_s=j.duration_s + lag.after_exit_s) for j in jobs]
    proposed_cluster, proposed_policy = apply_changes(cluster, policy, changes,
                                                      default_team=default_team)

    def part(offset: float) -> Optional[Callable[[float], None]]:
        return None if progress is None else (lambda done: progress(offset + done / 2))

    current = simulate(served, cluster, policy, restart_cost_s=restart_cost_s,
                       progress=part(0.0))
    proposed = simulate(served, proposed_cluster, proposed_policy, restart_cost_s=restart_cost_s,
                        progress=part(0.5))
    if progress is not None:
        progress(1.0)
    buckets = Buckets.over(jobs, horizon_s, buckets)
    actual = actual_figures(outcomes.values(), cluster, horizon_s, buckets)
    current_figures = replay_figures(current, cluster, horizon_s, buckets, lag)
    proposed_figures = replay_figures(proposed, proposed_cluster, horizon_s, buckets, lag)
    fid = fidelity(actual, current_figures)
    for fig in (current_figures, proposed_figures):
        for team in fig["teams"].values():
            team["margin_s"] = margin(fid["wait_error_s"], team["starts_waited"], lag,
                                      run_jitter_s)
    rejected = {"current": [r.rejected for r in current.records if r.rejected],
                "proposed": [r.rejected for r in proposed.records if r.rejected]}
    return {
        "horizon_s": horizon_s, "bucket_start_s": buckets.start_s, "bucket_s": buckets.width_s,
        "jobs": len(jobs),
        "capacity_gpus": cluster.total_gpus, "changes": dict(changes),
        "actual": actual, "current": current_figures, "proposed": proposed_figures,
        "fidelity": fid,
        "rejected": {k: {"count": len(v), "first": v[:3]} for k, v in rejected.items()},
        "start_lag": vars(lag), "run_jitter_s": run_jitter_s,
        "assumptions": [*ASSUMPTIONS,
                        f"Each start comes {duration(lag.after_submit_s)} after a submission that "
                        f"found free GPUs (the median of {lag.submits} such starts in the "
                        f"history) and {duration(lag.after_exit_s)} after the exit that freed "
                        f"its GPUs (the median of {lag.exits}): the service's own delay.",
                        f"A job preempted in the replay resumes from its checkpoint and loses "
                        f"{restart_cost_s:g} s at each restart."],
        "replay_s": time.perf_counter() - started,
    }


def margin(wait_error_s: float, starts_waited: float, lag: StartLag,
           run_jitter_s: float = 0.0) -> float:
    """The margin to read a team's replayed mean wait with: the replay's
    largest error on the history, plus chance. A real start may come as
    late as the slowest tenth of the history's starts did (``lag``'s 90th
    percentiles): a job's own start, and each of the ``starts_waited``
    starts of other work it waited for, whose run before it may also have
    been ``run_jitter_s`` longer or shorter than in the history."""
    return (wait_error_s + lag.after_submit_p90_s
            + starts_waited * (lag.after_exit_p90_s + run_jitter_s))


def summary(result: dict) -> dict:
    """The preview's headline figures per team (current and proposed mean
    and p95 wait, GPU-hours, margin), with the fidelity: what the audit log
    keeps with an applied change."""
    out = {}
    for name in sorted(result["proposed"]["teams"]):
        cur, new = result["current"]["teams"].get(name), result["proposed"]["teams"].get(name)
        if cur is None or new is None:
            continue
        out[name] = {f"{what}_{side}": fig[what] for side, fig in (("current", cur),
                                                                   ("proposed", new))
                     for what in ("mean_wait_s", "p95_wait_s", "gpu_hours", "margin_s")}
    return {"teams": out, "wait_error_s": result["fidelity"]["wait_error_s"],
            "utilisation_current": result["current"]["utilisation"],
            "utilisation_proposed": result["proposed"]["utilisation"]}


def only_teams(result: dict, teams: Iterable[str]) -> dict:
    """The preview as a team lead sees it: their teams' figures, and the
    cluster-wide ones (utilisation), not the other teams'."""
    keep = set(teams)

    def cut(fig: dict) -> dict:
        return {**fig, "teams": {k: v for k, v in fig["teams"].items() if k in keep},
                "waits_over_time": {k: v for k, v in fig["waits_over_time"].items() if k in keep}}

    fid = result["fidelity"]
    return {**result, "actual": cut(result["actual"]), "current": cut(result["current"]),
            "proposed": cut(result["proposed"]),
            "fidelity": {**fid, "teams": {k: v for k, v in fid["teams"].items() if k in keep}},
            "rejected": {k: {"count": v["count"], "first": []} for k, v in result["rejected"].items()}}


def duration(seconds: Optional[float]) -> str:
    """A wait as the preview writes it: 4.2s, 42s, 12m, 3.5h, 2.1d; "-" for none."""
    if seconds is None:
        return "-"
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 10:
        return f"{sign}{s:.1f}s"
    if s < 90:
        return f"{sign}{s:.0f}s"
    if s < 90 * 60:
        return f"{sign}{s / 60:.0f}m"
    if s < 2 * DAY:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / DAY:.1f}d"


def percent(share: Optional[float]) -> str:
    """A share (0 to 1) as the preview writes it: 71.3%, 0.42%."""
    if share is None:
        return "-"
    return f"{100 * share:.2f}%" if abs(share) < 0.01 else f"{100 * share:.1f}%"


# ---- documents: what the service hands the worker process -----------------------------------

def policy_document(policy: Policy) -> dict:
    doc = {f.name: getattr(policy, f.name) for f in fields(policy) if f.name != "priority_classes"}
    doc["priority_classes"] = {pc.name: {"value": pc.value, "preemptible": pc.preemptible}
                               for pc in policy.priority_classes.values()}
    return doc


def policy_from_document(doc: Mapping[str, Any]) -> Policy:
    classes = {name: PriorityClass(name, int(pc["value"]), bool(pc["preemptible"]))
               for name, pc in (doc.get("priority_classes") or {}).items()}
    known = {f.name for f in fields(Policy)} - {"priority_classes"}
    return Policy(**{k: v for k, v in doc.items() if k in known},
                  **({"priority_classes": classes} if classes else {}))


def team_settings(cluster: Cluster) -> dict:
    """Each team's weight and quotas, to tell later whether they changed."""
    return {t.name: {"weight": t.weight,
                     "quotas": {p: [q.nominal, q.borrowing_limit, q.lending_limit]
                                for p, q in sorted(t.quotas.items())}}
            for t in sorted(cluster.teams, key=lambda t: t.name)}
