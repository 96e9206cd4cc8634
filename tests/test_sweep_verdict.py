"""Issue 32's verdict (sim.verdict): the quota promise counted from per-job
records, and the goals a candidate misses against the baseline."""
from __future__ import annotations

import pytest

from gpuspawner.sim.metrics import JobRecord
from gpuspawner.sim.verdict import misses_32, quota_promise

H = 3600.0


def job(team, submit, start, finish, gpus):
    return JobRecord(f"{team}-{submit}", team, submit, finish - start, gpus,
                     first_start=start, finish=finish)


@pytest.mark.parametrize("records, nominal, promised", [
    # Alone within its nominal 4 GPUs: promised, waited 5 min.
    ([job("a", 0, 300, 1000, 2)], {"a": 4}, {"a": 300}),
    # The second 2-GPU job fits beside the first (4 of 4): promised too; the p99 is its wait.
    ([job("a", 0, 0, 1000, 2), job("a", 10, 910, 2000, 2)], {"a": 4}, {"a": 900}),
    # A third comes while both run: 6 > 4, no promise; only the first two count.
    ([job("a", 0, 0, 1000, 2), job("a", 10, 10, 2000, 2), job("a", 20, 5000, 6000, 2)],
     {"a": 4}, {"a": 0}),
    # What the team had queued counts as well as what ran; after it finished, room again.
    ([job("a", 0, 3000, 4000, 4), job("a", 5, 4000, 5000, 1), job("a", 4500, 4600, 4700, 1)],
     {"a": 4}, {"a": 3000}),
    # A team asking more than its nominal quota at once is promised nothing.
    ([job("b", 0, 0, 10, 8)], {"b": 4}, {}),
])
def test_the_quota_promise_counts_jobs_that_fit_in_their_teams_nominal_quota(
        records, nominal, promised):
    assert quota_promise(records, nominal) == promised


def row(policy, **changes):
    r = {"case": "c", "policy": policy, "scale": 1.25, "avg_jct_s": 10 * H,
         "avg_queue_s": 5 * H, "avg_queue_s_by_size": {"1": 1 * H, ">8": 20 * H},
         "p99_queue_s_by_size": {"1": 2 * H, ">8": 40 * H}, "jain_fairness": 0.9,
         "utilization_backlog": 0.9, "max_preemptions_per_job": 0, "lost_gpu_fraction": 0.0,
         "wall_s": 10.0, "quota_promise_p99_s": {"t": 0.0}}
    r.update(changes)
    return r


GOOD = dict(avg_jct_s=7.5 * H, avg_queue_s=2.5 * H)


@pytest.mark.parametrize("candidate, missed", [
    (GOOD, []),
    # Backfill's own figures at 1.25x load: the JCT and the queueing goals missed.
    ({}, ["avg JCT", "mean queueing"]),
    # At the trace's own load 0.95x JCT passes (<= 0.97x), at 1.25x it does not.
    ({**GOOD, "avg_jct_s": 9.5 * H, "scale": 1.0}, []),
    ({**GOOD, "avg_jct_s": 9.5 * H}, ["avg JCT"]),
    # The >8-GPU jobs wait 1.5x as long on average: bucket goal missed.
    ({**GOOD, "avg_queue_s_by_size": {"1": 1 * H, ">8": 30 * H}}, ["mean wait >8"]),
    ({**GOOD, "quota_promise_p99_s": {"t": 1200.0}}, ["quota promise"]),
    ({**GOOD, "jain_fairness": 0.84, "utilization_backlog": 0.885}, ["Jain", "utilisation"]),
    ({**GOOD, "wall_s": 41.0, "records_differ": 3}, ["check changes the run", "replay time"]),
    ({**GOOD, "max_preemptions_per_job": 4, "lost_gpu_fraction": 0.02},
     ["lost GPU time", "preemptions"]),
])
def test_issue_32_goals_missed_against_the_baseline(candidate, missed):
    rows = [row("backfill"), row("gpuhub", **candidate)]
    assert sorted(g for g, _ in misses_32(rows, "backfill", "gpuhub")) == missed


def test_a_sweep_with_scale_replays_the_same_jobs_submitted_closer_together():
    from gpuspawner.sim.sweep import cases, parse_sweep
    sweep = parse_sweep({"loads": [1.0], "jobs": 50, "quotas": ["skewed"], "scale": [1.0, 1.25],
                         "verdict": "issue32"})
    (base_case, base, _), (raised_case, raised, _) = list(cases(sweep))
    assert (base_case.scale, raised_case.scale) == (1.0, 1.25)
    assert raised_case.name == base_case.name + " · ×1.25"
    assert [j.job_id for j in raised] == [j.job_id for j in base]
    assert [j.submit_time_s for j in raised] == pytest.approx(
        [j.submit_time_s / 1.25 for j in base])
    assert [j.duration_s for j in raised] == [j.duration_s for j in base]


@pytest.mark.parametrize("data, words", [
    ({"loads": [1.0], "verdict": "issue7"}, "verdict is 'issue7'"),
    ({"loads": [1.0], "scale": [0]}, "scale[0] must be a number >= 0.01"),
])
def test_sweep_file_errors_name_the_new_fields(data, words):
    from gpuspawner.sim.sweep import SweepError, parse_sweep
    with pytest.raises(SweepError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_sweep(data)


def test_a_light_case_with_under_a_minute_of_queueing_has_no_queue_to_cut():
    rows = [row("backfill", avg_queue_s=20.0, avg_jct_s=10 * H),
            row("gpuhub", avg_queue_s=30.0, avg_jct_s=7 * H)]
    assert [g for g, _ in misses_32(rows, "backfill", "gpuhub")] == []
