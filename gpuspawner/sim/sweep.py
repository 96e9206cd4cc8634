"""A sweep: generate a family of traces, replay every policy on each, judge the goals.

``SWEEP.yaml`` (all keys optional but ``loads``; ``examples/sweep.yaml`` is the one shipped)::

    jobs: 1000                    # jobs per trace
    nodes: 16                     # 8-GPU nodes (the cluster: nodes × gpus_per_node GPUs)
    gpus_per_node: 8
    rack: 4                       # consecutive nodes per rack (topology)
    seed: 7                       # or seeds: [7, 11, 23, 31]: every case once per seed
    restart_cost_s: 60
    policies: [fifo, fifo-plain, backfill, quota-fifo, gpuhub]
    loads: [0.8, 1.0, 1.3, 1.6]   # offered load of the Philly-like generator
    teams: [6, 15]                # Zipf-weighted teams team00..
    quotas: [proportional, skewed]
    limits:                       # name -> how users declare time limits
      exact: {factor: [1.0, 1.0]}
      noisy: {factor: [2.0, 10.0], blanket_share: 0.3}
    baseline: backfill            # the policy the goals compare with
    candidate: gpuhub             # the policy judged
    goals: {...}                  # thresholds, defaults in GOALS
    variants:                     # named policies for an ablation, listed in policies
      gpuhub-no-preemption: {base: gpuhub, preemption: false}
      gpuhub-min-runtime-4h: {base: gpuhub, min_runtime: 14400}

A variant changes the policy knobs a what-if preview may change (``sim.whatif.KNOBS``: switches,
seconds, counts; ``null`` turns an optional one off) of the policy named by ``base``.

Quotas: ``proportional`` gives each team a nominal quota in proportion to the GPU time it submits
(summing to the cluster); ``skewed`` gives every team the same nominal quota whatever it submits, so
the big teams' quota is far below their demand and their large gangs must borrow. Borrowing and
lending are unlimited in both.

Beside ``GOALS`` (the issue's, which set the exit status), ``RESTATED_GOALS`` judges the same rows
by issue 19's goals restated where these traces put the stated form out of reach or below noise.

The traces are the product of loads × teams × limits (× seeds); each is replayed under both quota
files. One seed's verdict moves by several goals for any change of the policy (the traces have few
large gangs), so an ablation judges a change over several seeds.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from ..scheduler.model import Node, Quota, Team
from ..scheduler.policy import POLICIES, Policy, get_policy
from .cluster import Cluster
from .metrics import SIZE_BUCKETS
from .simulate import simulate
from .trace import generate_philly_trace
from .verdict import misses_32, quota_promise
from .whatif import KNOBS, ChangeError, check_knob

QUOTA_MODES = ("proportional", "skewed")

GOALS = {
    # avg JCT / baseline's where jobs really queue (baseline's mean queueing
    # delay >= queued_if * mean run time), and on the lighter traces.
    "jct_ratio_queued": 0.8,
    "jct_ratio_light": 1.0,
    "queued_if": 0.1,
    # p99 queueing delay per size bucket / baseline's; a bucket within
    # p99_slack_s of the baseline passes (1.1 × a few seconds is noise).
    "p99_queue_ratio": 1.1,
    "p99_slack_s": 60.0,
    # Jain over per-team mean slowdown >= baseline's - jain_slack.
    "jain_slack": 0.0,
    "team_slowdown_ratio": 2.0,
    "max_preemptions_per_job": 3,
    "lost_gpu_fraction": 0.01,
    "utilization_backlog": 0.93,
}


# Issue 19's goals restated where, on these traces, the stated form is out of
# reach of every policy or cannot tell a policy from the baseline's own noise
# (docs/scheduler.md, "Round 3"); the rest are kept as in GOALS. Judged and
# tallied alongside GOALS, never in their place: the exit status is GOALS'.
RESTATED_GOALS = {
    # Mean queueing delay / baseline's where jobs really queue, instead of avg
    # JCT 0.8x: the run time no schedule removes is 37-90% of backfill's JCT
    # there, so 0.8x JCT is unreachable where it is over 80%; a 20% cut of the
    # queueing is reachable on every case.
    "queue_ratio_queued": 0.8,
    # Light cases: EASY backfill with plain best fit (its near-twin) ranges
    # up to 1.012x backfill's avg JCT on them.
    "jct_ratio_light": 1.02,
    # Per size bucket: mean queueing / baseline's, with p99_slack_s of room
    # too (the p99 of the >8-GPU bucket is the longest wait of one of 16-24
    # jobs) ...
    "avg_queue_ratio_by_size": 1.1,
    # ... and the p99 as a starvation guard, with the room the near-twin needs.
    "p99_queue_ratio": 1.5,
    # Jain over per-team mean slowdown >= baseline's - 0.05 (the near-twin is
    # below backfill's on 26 of 64 cases, below - 0.05 on 2).
    "jain_slack": 0.05,
    # Utilisation under backlog >= baseline's - 0.01, instead of >= 0.93,
    # which EASY backfill reaches on 10 of 64 cases and FIFO on none.
    "utilization_vs_baseline": 0.01,
}

# A goal's short name in the per-policy tally.
CHECK_NAMES = {"team_slowdown_ratio": "team slowdown", "max_preemptions_per_job": "preemptions",
               "lost_gpu_fraction": "lost GPU time", "utilization_backlog": "utilisation"}


class SweepError(ValueError):
    """A malformed sweep file; the message names the field."""


@dataclass
class Sweep:
    loads: list[float]
    jobs: int = 1000
    nodes: int = 16
    gpus_per_node: int = 8
    rack: int = 4
    seed: int = 7
    # Several seeds: every case once per seed (named "... · seed N"); empty: ``seed`` only.
    seeds: list[int] = field(default_factory=list)
    restart_cost_s: float = 60.0
    policies: list[str] = field(default_factory=lambda: ["fifo", "fifo-plain", "backfill",
                                                         "quota-fifo", "gpuhub"])
    teams: list[int] = field(default_factory=lambda: [6])
    quotas: list[str] = field(default_factory=lambda: list(QUOTA_MODES))
    limits: dict[str, dict] = field(default_factory=lambda: {"exact": {"factor": [1.0, 1.0]}})
    baseline: str = "backfill"
    candidate: str = "gpuhub"
    goals: dict[str, float] = field(default_factory=lambda: dict(GOALS))
    variants: dict[str, Policy] = field(default_factory=dict)
    # Every trace also replayed at these multiples of its arrival rate (the
    # same jobs, submitted that much closer together): [1.0, 1.25] is issue 32's.
    scale: list[float] = field(default_factory=lambda: [1.0])
    # Which goals set the exit status: "issue19" (GOALS) or "issue32" (verdict.GOALS_32).
    verdict: str = "issue19"

    def policy(self, name: str) -> Policy:
        return self.variants[name] if name in self.variants else get_policy(name)

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML: {e}") from None
    return parse_sweep(data, str(path))


def parse_sweep(data: Any, source: str = "sweep") -> Sweep:
    if not isinstance(data, dict):
        raise SweepError(f"{source}: must be a mapping")
    unknown = set(data) - set(Sweep.__dataclass_fields__)
    if unknown:
        raise SweepError(f"{source}: unknown field(s) {', '.join(sorted(unknown))}")
    number, listed = _number(source), _listed(data, source)
    if "loads" not in data:
        raise SweepError(f"{source}: loads is required (offered loads, e.g. [0.8, 1.3])")
    sweep = Sweep(loads=listed("loads", lambda n, v: float(number(n, v, 0.01))))
    for name, minimum in (("jobs", 1), ("nodes", 1), ("gpus_per_node", 1), ("rack", 1),
                          ("seed", 0)):
        if name in data:
            setattr(sweep, name, number(name, data[name], minimum, integer=True))
    if "restart_cost_s" in data:
        sweep.restart_cost_s = float(number("restart_cost_s", data["restart_cost_s"], 0))
    sweep.scale = listed("scale", lambda n, v: float(number(n, v, 0.01))) or sweep.scale
    if data.get("verdict", "issue19") not in ("issue19", "issue32"):
        raise SweepError(f"{source}: verdict is {data['verdict']!r}; one of issue19, issue32")
    sweep.verdict = data.get("verdict", "issue19")
    sweep.variants = parse_variants(data.get("variants"), source)

    def policy(name, value):
        if value not in POLICIES and value not in sweep.variants:
            raise SweepError(f"{source}: {name} is {value!r}; known policies: "
                             f"{', '.join(sorted(POLICIES))}"
                             + (f"; variants: {', '.join(sweep.variants)}"
                                if sweep.variants else ""))
        return value

    def quota_mode(name, value):
        if value not in QUOTA_MODES:
            raise SweepError(f"{source}: {name} is {value!r}; one of {', '.join(QUOTA_MODES)}")
        return value

    sweep.policies = listed("policies", policy) or sweep.policies
    sweep.teams = listed("teams", lambda n, v: number(n, v, 1, integer=True)) or sweep.teams
    if "seed" in data and "seeds" in data:
        raise SweepError(f"{source}: give seed or seeds, not both")
    sweep.seeds = listed("seeds", lambda n, v: number(n, v, 0, integer=True)) or []
    sweep.quotas = listed("quotas", quota_mode) or sweep.quotas
    for name in ("baseline", "candidate"):
        if name in data:
            setattr(sweep, name, policy(name, data[name]))
    for name in (sweep.baseline, sweep.candidate):
        if name not in sweep.policies:
            sweep.policies.append(name)
    sweep.limits = parse_limits(data.get("limits"), source)
    sweep.goals.update(parse_goals(data.get("goals"), source, number))
    return sweep


def _number(source: str):
    def number(name, value, minimum, integer=False):
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or value < minimum:
            kind = "an integer" if integer else "a number"
            raise SweepError(f"{source}: {name} must be {kind} >= {minimum}, got {value!r}")
        return value
    return number


def _listed(data: dict, source: str):
    def listed(name, check):
        value = data.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not value:
            raise SweepError(f"{source}: {name} must be a non-empty list, got {value!r}")
        return [check(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return listed


def parse_limits(limits: Any, source: str) -> dict[str, dict]:
    """``limits:``: name -> {factor: [low, high], blanket_share: 0..1}."""
    if limits is None:
        return {"exact": {"factor": (1.0, 1.0), "blanket_share": 0.0}}
    if not isinstance(limits, dict) or not limits:
        raise SweepError(f"{source}: limits must map a name to {{factor: [low, high], "
                         f"blanket_share: 0..1}}, got {limits!r}")
    out = {}
    for name, spec in limits.items():
        where = f"limits.{name}"
        if not isinstance(spec, dict) or set(spec) - {"factor", "blanket_share"}:
            raise SweepError(f"{source}: {where} takes factor and blanket_share, got {spec!r}")
        factor = spec.get("factor", [1.2, 3.0])
        if not (isinstance(factor, list) and len(factor) == 2
                and all(isinstance(f, (int, float)) for f in factor)
                and 1 <= factor[0] <= factor[1]):
            raise SweepError(f"{source}: {where}.factor must be [low, high] with "
                             f"1 <= low <= high, got {factor!r}")
        share = spec.get("blanket_share", 0.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not 0 <= share <= 1:
            raise SweepError(f"{source}: {where}.blanket_share must be in [0, 1], "
                             f"got {share!r}")
        out[str(name)] = {"factor": (float(factor[0]), float(factor[1])),
                          "blanket_share": float(share)}
    return out


def parse_goals(goals: Any, source: str, number) -> dict[str, float]:
    goals = goals or {}
    if not isinstance(goals, dict):
        raise SweepError(f"{source}: goals must be a mapping, got {goals!r}")
    for name in goals:
        if name not in GOALS:
            raise SweepError(f"{source}: goals.{name} is unknown; known: {', '.join(GOALS)}")
    return {name: float(number(f"goals.{name}", value, 0)) for name, value in goals.items()}


def parse_variants(data: Any, source: str) -> dict[str, Policy]:
    """``variants:``: name -> {base: POLICY, KNOB: value, ...}."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SweepError(f"{source}: variants must map a name to {{base: POLICY, KNOB: value}}, "
                         f"got {data!r}")
    out = {}
    for name, spec in data.items():
        where = f"variants.{name}"
        if not isinstance(name, str) or not name or name in POLICIES:
            raise SweepError(f"{source}: {where}: a variant needs a name of its own (not one of "
                             f"{', '.join(sorted(POLICIES))})")
        if not isinstance(spec, dict) or spec.get("base") not in POLICIES:
            raise SweepError(f"{source}: {where}.base must name a policy "
                             f"({', '.join(sorted(POLICIES))}), got {spec!r}")
        changes = {}
        for knob, value in spec.items():
            if knob == "base":
                continue
            if knob not in KNOBS:
                raise SweepError(f"{source}: {where}.{knob} is not a policy knob; known: "
                                 f"{', '.join(KNOBS)}")
            try:
                changes[knob] = check_knob(f"{where}.{knob}", knob, value)
            except ChangeError as e:
                raise SweepError(f"{source}: {e}") from None
        out[name] = replace(POLICIES[spec["base"]], name=name, **changes)
    return out


def build_cluster(sweep: Sweep, demand: dict[str, float], mode: str) -> Cluster:
    """The sweep's cluster with nominal quotas set by ``mode`` (see the module docstring)."""
    capacity = sweep.capacity
    nodes = [Node(f"a100-{j:04d}", "a100", sweep.gpus_per_node, {"rack": f"rack{j // sweep.rack}"})
             for j in range(sweep.nodes)]
    names = sorted(demand)
    if mode == "proportional":
        total = sum(demand.values()) or 1.0
        exact = {t: capacity * demand[t] / total for t in names}
    else:
        exact = {t: capacity / len(names) for t in names}
    nominal = {t: int(exact[t]) for t in names}
    # Largest remainders get the GPUs rounding left over.
    left = capacity - sum(nominal.values())
    for t in sorted(names, key=lambda t: (nominal[t] - exact[t], t))[:left]:
        nominal[t] += 1
    teams = [Team(t, {"a100": Quota(nominal=nominal[t])}) for t in names]
    return Cluster(nodes, teams)


@dataclass
class Case:
    name: str
    load: float
    teams: int
    quotas: str
    limits: str
    seed: int
    scale: float = 1.0


def scaled(trace: list, factor: float) -> list:
    """The same jobs at ``factor`` times the arrival rate (submitted
    ``factor`` times closer together)."""
    if factor == 1.0:
        return trace
    return [replace(job, submit_time_s=job.submit_time_s / factor) for job in trace]


def cases(sweep: Sweep):
    """(case, trace, cluster) for every combination, traces generated once per
    seed × load × teams × limits."""
    seeds = sweep.seeds or [sweep.seed]
    for seed, load, teams, limits in itertools.product(seeds, sweep.loads, sweep.teams,
                                                       sweep.limits):
        spec = sweep.limits[limits]
        trace = generate_philly_trace(
            sweep.jobs, teams=teams, seed=seed + teams, capacity_gpus=sweep.capacity,
            load=load, time_limit_factor=spec["factor"], blanket_share=spec["blanket_share"])
        demand: dict[str, float] = {}
        for job in trace:
            demand[job.team] = demand.get(job.team, 0.0) + job.num_gpus * job.duration_s
        for mode, factor in itertools.product(sweep.quotas, sweep.scale):
            name = f"load {load:g} · {teams} teams · {mode} · {limits}" + \
                (f" · seed {seed}" if len(seeds) > 1 else "") + \
                (f" · ×{factor:g}" if factor != 1.0 else "")
            yield (Case(name, load, teams, mode, limits, seed, factor), scaled(trace, factor),
                   build_cluster(sweep, demand, mode))


def run_sweep(sweep: Sweep, *, check: bool = False,
              progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """One row per case and policy: the case's fields plus the policy's metrics
    (``simulate``'s keys) and ``invariant_problems``."""
    rows = []
    for case, trace, cluster in cases(sweep):
        nominal = {t.name: float(sum(q.nominal for q in t.quotas.values()))
                   for t in cluster.teams}
        for name in sweep.policies:
            policy = sweep.policy(name)
            result = simulate(trace, cluster, policy, restart_cost_s=sweep.restart_cost_s)
            row = {"case": case.name, "load": case.load, "teams": case.teams,
                   "quotas": case.quotas, "limits": case.limits, "seed": case.seed,
                   "scale": case.scale, **result.metrics,
                   "quota_promise_p99_s": quota_promise(result.records, nominal),
                   "invariant_problems": 0}
            if check:
                # The figures (and the replay time) are the plain replay's; the
                # checked one must vouch for it: the same per-job records.
                checked = simulate(trace, cluster, policy, restart_cost_s=sweep.restart_cost_s,
                                   check=True)
                row["invariant_problems"] = len(checked.problems)
                row["records_differ"] = sum(1 for a, b in zip(result.records, checked.records)
                                            if _outcome(a) != _outcome(b))
            rows.append(row)
            if progress:
                progress(f"{case.name}: {name} {result.metrics['wall_s']:.1f} s")
    return rows


def _outcome(r) -> tuple:
    return (r.job_id, r.first_start, r.finish, r.run_time, r.preemptions, r.rejected)


def judge(rows: list[dict], sweep: Sweep, restated: bool = False) -> list[str]:
    """The goals the candidate misses, one line each naming the case and the figure
    (issue 32's with ``verdict: issue32``, unless ``restated``)."""
    return [line for _goal, line in _misses(rows, sweep, sweep.candidate, restated)]


def _misses(rows: list[dict], sweep: Sweep, candidate: str, restated: bool):
    if sweep.verdict == "issue32" and not restated:
        return misses_32(rows, sweep.baseline, candidate)
    return misses(rows, sweep, candidate, restated)


def tally(rows: list[dict], sweep: Sweep, restated: bool = False) -> dict[str, dict[str, int]]:
    """Every policy but the baseline judged as the candidate: policy -> goal
    -> cases missed (an ablation's last column, per goal)."""
    out = {}
    for name in sweep.policies:
        if name != sweep.baseline:
            counts: dict[str, int] = {}
            for goal, _line in _misses(rows, sweep, name, restated):
                counts[goal] = counts.get(goal, 0) + 1
            out[name] = counts
    return out


def misses(rows: list[dict], sweep: Sweep, candidate: str,
           restated: bool = False) -> list[tuple[str, str]]:
    """(goal, line) for every goal ``candidate`` misses against the baseline;
    ``restated``: judged by ``RESTATED_GOALS`` where they differ."""
    goals = {**sweep.goals, **RESTATED_GOALS} if restated else sweep.goals
    by_case: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["policy"]] = row
    missed = []
    for case, policies in by_case.items():
        base, cand = policies.get(sweep.baseline), policies.get(candidate)
        if base is None or cand is None or "avg_jct_s" not in base or "avg_jct_s" not in cand:
            missed.append(("finished", f"{case}: no finished jobs to compare"))
            continue
        queued = base["avg_queue_s"] >= goals["queued_if"] * base["avg_run_s"]
        limit = goals["jct_ratio_queued"] if queued else goals["jct_ratio_light"]
        ratio = cand["avg_jct_s"] / base["avg_jct_s"]
        if restated and queued:
            q = cand["avg_queue_s"] / base["avg_queue_s"]
            if q > goals["queue_ratio_queued"]:
                missed.append(("avg queueing", f"{case}: mean queueing {q:.2f}× "
                                               f"{sweep.baseline}'s > "
                                               f"{goals['queue_ratio_queued']:g}×"))
        elif ratio > limit:
            # No schedule goes below the mean run time: with no job queueing at
            # all the ratio is the baseline's mean run time over its mean JCT.
            floor = base["avg_run_s"] / base["avg_jct_s"]
            missed.append(("avg JCT", f"{case}: avg JCT {ratio:.2f}× {sweep.baseline}'s > "
                                      f"{limit:g}× ({'jobs queue' if queued else 'light'}; "
                                      f"{floor:.2f}× with no queueing at all)"))
        for bucket, _, _ in SIZE_BUCKETS:
            b = base["p99_queue_s_by_size"].get(bucket)
            c = cand["p99_queue_s_by_size"].get(bucket)
            if b is None or c is None:
                continue
            if c > max(goals["p99_queue_ratio"] * b, b + goals["p99_slack_s"]):
                missed.append((f"p99 {bucket}", f"{case}: p99 queueing of {bucket}-GPU jobs "
                                                f"{c / 3600:.1f} h vs {b / 3600:.1f} h "
                                                f"({c / max(b, 1):.2f}×)"))
            b = base.get("avg_queue_s_by_size", {}).get(bucket)
            c = cand.get("avg_queue_s_by_size", {}).get(bucket)
            if restated and b is not None and c is not None and \
                    c > max(goals["avg_queue_ratio_by_size"] * b, b + goals["p99_slack_s"]):
                missed.append((f"mean wait {bucket}",
                               f"{case}: mean queueing of {bucket}-GPU jobs {c / 3600:.1f} h "
                               f"vs {b / 3600:.1f} h ({c / max(b, 1):.2f}×)"))
        if cand["jain_fairness"] < base["jain_fairness"] - goals["jain_slack"]:
            missed.append(("Jain", f"{case}: Jain {cand['jain_fairness']:.3f} < "
                                   f"{base['jain_fairness']:.3f}"))
        util_goal = base["utilization_backlog"] - goals["utilization_vs_baseline"] \
            if restated else goals["utilization_backlog"]
        checks = (
            ("team_slowdown_ratio", goals["team_slowdown_ratio"],
             cand["team_slowdown_ratio"] > goals["team_slowdown_ratio"],
             "a team's mean slowdown / the cluster's"),
            ("max_preemptions_per_job", goals["max_preemptions_per_job"],
             cand["max_preemptions_per_job"] > goals["max_preemptions_per_job"],
             "preemptions of one job"),
            ("lost_gpu_fraction", goals["lost_gpu_fraction"],
             cand["lost_gpu_fraction"] > goals["lost_gpu_fraction"],
             "GPU time lost to preemption"),
            ("utilization_backlog", util_goal, cand["utilization_backlog"] < util_goal,
             "utilisation under backlog"),
        )
        for key, goal, bad, what in checks:
            if bad:
                missed.append((CHECK_NAMES[key], f"{case}: {what} {cand[key]:.3g} "
                                                 f"(goal {goal:.3g})"))
        if cand["invariant_problems"]:
            missed.append(("invariants", f"{case}: {cand['invariant_problems']} invariant "
                                         f"violation(s)"))
    return missed


def format_table(rows: list[dict], baseline: str = "backfill") -> str:
    """One line per case and policy (a Markdown table); ×base is avg JCT over the baseline's."""
    head = ("case", "policy", "avg JCT", "×base", "p99 q 1", "p99 q 2-4", "p99 q 5-8", "p99 q >8",
            "Jain", "team sd", "preempt/job", "max", "lost", "util", "replay")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    base_jct = {}
    for row in rows:
        if row.get("policy") == baseline and "avg_jct_s" in row:
            base_jct[row["case"]] = row["avg_jct_s"]
    for row in rows:
        if "avg_jct_s" not in row:
            lines.append(f"{row['case']} | {row['policy']} | no job finished")
            continue
        q = row["p99_queue_s_by_size"]
        base = base_jct.get(row["case"])
        cells = (row["case"], row["policy"], f"{row['avg_jct_s'] / 3600:.2f} h",
                 f"{row['avg_jct_s'] / base:.2f}" if base else "",
                 *(f"{q[b] / 3600:.1f} h" if b in q else "-" for b, _, _ in SIZE_BUCKETS),
                 f"{row['jain_fairness']:.3f}", f"{row['team_slowdown_ratio']:.2f}",
                 f"{row['preemptions_per_job']:.3f}", str(row["max_preemptions_per_job"]),
                 f"{row['lost_gpu_fraction']:.2%}", f"{row['utilization_backlog']:.1%}",
                 f"{row['wall_s']:.1f} s")
        lines.append(" | ".join(cells))
    return "\n".join(lines)
