"""Issue 32's goals: a sweep's verdict per case, at each trace's own arrival
rate and at 1.25× it (``scale:`` in the sweep file), ``candidate`` against
``baseline`` in the same run.

1. Mean queueing ≤ 0.8× the baseline's (or under a minute).
2. Avg JCT ≤ 0.80× at the raised load (scale > 1), ≤ 0.97× at the trace's own.
3. Every size bucket (1, 2–4, 5–8, >8 GPUs): mean and p99 queueing ≤ 1.25× (60 s slack).
4. Jain ≥ the baseline's − 0.05; the quota promise: a job that, when submitted,
   fits in its team's nominal quota with everything the team already runs or
   has queued starts within 10 minutes, at the p99 of every team
   (``quota_promise``; the baseline's figure beside it makes no such promise).
5. Utilisation under backlog ≥ the baseline's − 0.01; ≤ 3 preemptions of a job;
   ≤ 1 % of GPU time lost to preemption.
6. Start estimates are measured by ``gpuhub simulate --estimates`` (not in a sweep).
7. Replay wall time ≤ 4× the baseline's; with ``--check``, the per-job records the
   same as without it (``records_differ``).
"""
from __future__ import annotations

import heapq
from typing import Iterable

from .metrics import SIZE_BUCKETS, JobRecord, percentile

GOALS_32 = {
    "queue_ratio": 0.8,
    "jct_ratio_raised": 0.80,
    "jct_ratio_base": 0.97,
    "bucket_ratio": 1.25,
    "bucket_slack_s": 60.0,
    "jain_slack": 0.05,
    "promise_p99_s": 600.0,
    "utilization_slack": 0.01,
    "max_preemptions_per_job": 3,
    "lost_gpu_fraction": 0.01,
    "wall_ratio": 4.0,
}


def quota_promise(records: Iterable[JobRecord], nominal: dict[str, float]) -> dict[str, float]:
    """team -> the p99 wait (first start − submit, seconds) of its promised
    jobs: those that fit, when submitted, in its nominal quota (``nominal``,
    GPUs over its pools) together with everything the team then ran or had
    queued. Teams without a promised job are left out."""
    by_team: dict[str, list[JobRecord]] = {}
    for r in records:
        if r.rejected is None and r.first_start is not None:
            by_team.setdefault(r.team, []).append(r)
    out = {}
    for team, jobs in by_team.items():
        jobs.sort(key=lambda r: r.submit)
        live: list[tuple[float, float]] = []  # (finish, GPUs) of the team's earlier jobs
        held, waits = 0.0, []
        for r in jobs:
            while live and live[0][0] <= r.submit:
                held -= heapq.heappop(live)[1]
            units = r.gpu_share or r.gpus
            if held + units <= nominal.get(team, 0.0):
                waits.append(r.first_start - r.submit)
            heapq.heappush(live, (r.finish if r.finish is not None else float("inf"), units))
            held += units
        if waits:
            out[team] = percentile(waits, 99)
    return out


def _ratio(c: float, b: float) -> float:
    return c / b if b > 0 else (1.0 if c <= 0 else float("inf"))


def _bucket_misses(case: str, base: dict, cand: dict, goals: dict) -> list[tuple[str, str]]:
    out = []
    for bucket, _, _ in SIZE_BUCKETS:
        for key, what in (("avg_queue_s_by_size", "mean"), ("p99_queue_s_by_size", "p99")):
            b = base.get(key, {}).get(bucket)
            c = cand.get(key, {}).get(bucket)
            if b is None or c is None:
                continue
            if c > max(goals["bucket_ratio"] * b, b + goals["bucket_slack_s"]):
                out.append((f"{what} wait {bucket}",
                            f"{case}: {what} queueing of {bucket}-GPU jobs {c / 3600:.2f} h vs "
                            f"{b / 3600:.2f} h ({_ratio(c, b):.2f}×)"))
    return out


def _case_misses(case: str, base: dict, cand: dict, goals: dict) -> list[tuple[str, str]]:
    out = []
    q = _ratio(cand["avg_queue_s"], base["avg_queue_s"])
    # A mean wait under a minute is no queue to cut (light cases).
    if q > goals["queue_ratio"] and cand["avg_queue_s"] > goals["bucket_slack_s"]:
        out.append(("mean queueing", f"{case}: mean queueing {q:.2f}× > {goals['queue_ratio']:g}×"))
    raised = cand.get("scale", 1.0) > 1.0
    limit = goals["jct_ratio_raised"] if raised else goals["jct_ratio_base"]
    jct = cand["avg_jct_s"] / base["avg_jct_s"]
    if jct > limit:
        out.append(("avg JCT", f"{case}: avg JCT {jct:.3f}× > {limit:g}×"))
    out += _bucket_misses(case, base, cand, goals)
    if cand["jain_fairness"] < base["jain_fairness"] - goals["jain_slack"]:
        out.append(("Jain", f"{case}: Jain {cand['jain_fairness']:.3f} < "
                            f"{base['jain_fairness']:.3f} − {goals['jain_slack']:g}"))
    late = {t: s for t, s in cand.get("quota_promise_p99_s", {}).items()
            if s > goals["promise_p99_s"]}
    if late:
        out.append(("quota promise", f"{case}: p99 start of promised jobs over "
                                     f"{goals['promise_p99_s']:.0f} s for " + ", ".join(
                                         f"{t} {s / 60:.0f} min" for t, s in sorted(late.items()))))
    util = base["utilization_backlog"] - goals["utilization_slack"]
    if cand["utilization_backlog"] < util:
        out.append(("utilisation", f"{case}: utilisation under backlog "
                                   f"{cand['utilization_backlog']:.3f} < {util:.3f}"))
    if cand["max_preemptions_per_job"] > goals["max_preemptions_per_job"]:
        out.append(("preemptions", f"{case}: {cand['max_preemptions_per_job']} preemptions of a job"))
    if cand["lost_gpu_fraction"] > goals["lost_gpu_fraction"]:
        out.append(("lost GPU time", f"{case}: {cand['lost_gpu_fraction']:.2%} of GPU time lost"))
    wall = _ratio(cand["wall_s"], base["wall_s"])
    if wall > goals["wall_ratio"]:
        out.append(("replay time", f"{case}: replay {cand['wall_s']:.1f} s, {wall:.1f}× "
                                   f"{base['wall_s']:.1f} s"))
    if cand.get("records_differ"):
        out.append(("check changes the run", f"{case}: {cand['records_differ']} per-job records "
                                             f"differ with --check"))
    return out


def misses_32(rows: list[dict], baseline: str, candidate: str,
              goals: dict = GOALS_32) -> list[tuple[str, str]]:
    """(goal, line) for every issue-32 goal ``candidate`` misses against ``baseline``."""
    by_case: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["policy"]] = row
    missed = []
    for case, policies in by_case.items():
        base, cand = policies.get(baseline), policies.get(candidate)
        if base is None or cand is None or "avg_jct_s" not in base or "avg_jct_s" not in cand:
            missed.append(("finished", f"{case}: no finished jobs to compare"))
            continue
        missed += _case_misses(case, base, cand, goals)
        if cand.get("invariant_problems"):
            missed.append(("invariants", f"{case}: {cand['invariant_problems']} invariant "
                                         f"violation(s)"))
    return missed


def goal_table(rows: list[dict], baseline: str, candidate: str) -> str:
    """Per case: the candidate's figures against the baseline's, one column per goal
    (a Markdown table; ratios are candidate / baseline)."""
    head = ("case", "JCT ×", "queue ×", "mean 1/2-4/5-8/>8 ×", "p99 1/2-4/5-8/>8 ×",
            "Jain −base", "promise p99 (base)", "util −base", "max pre", "lost", "replay ×")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    by_case: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["policy"]] = row
    for case, p in by_case.items():
        b, c = p.get(baseline), p.get(candidate)
        if not b or not c or "avg_jct_s" not in b or "avg_jct_s" not in c:
            continue

        def buckets(key):
            return "/".join(f"{_ratio(c[key].get(k, 0), b[key].get(k, 0)):.2f}"
                            for k, _, _ in SIZE_BUCKETS if k in b[key] and k in c[key])
        promise = max(c.get("quota_promise_p99_s", {}).values(), default=0.0)
        base_promise = max(b.get("quota_promise_p99_s", {}).values(), default=0.0)
        lines.append(" | ".join((
            case, f"{c['avg_jct_s'] / b['avg_jct_s']:.3f}",
            f"{_ratio(c['avg_queue_s'], b['avg_queue_s']):.3f}",
            buckets("avg_queue_s_by_size"), buckets("p99_queue_s_by_size"),
            f"{c['jain_fairness'] - b['jain_fairness']:+.3f}",
            f"{promise / 60:.0f} min ({base_promise / 60:.0f})",
            f"{c['utilization_backlog'] - b['utilization_backlog']:+.3f}",
            str(c["max_preemptions_per_job"]), f"{c['lost_gpu_fraction']:.2%}",
            f"{_ratio(c['wall_s'], b['wall_s']):.1f}")))
    return "\n".join(lines)
