"""What-if previews, the pure parts (sim/whatif.py, its worker process, the
panel's line chart and the CLI's table): settings parsed and checked, the
replay under current and proposed settings, its fidelity, progress and
cancel."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from gpuspawner.cli import main
from gpuspawner.cli.whatif import format_preview
from gpuspawner.scheduler.model import Node, Quota, Team
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.panel.charts_lines import lines
from gpuspawner.service.panel.whatif_pages import bucket_labels
from gpuspawner.sim import whatif
from gpuspawner.sim.cluster import Cluster
from gpuspawner.sim.history import PastAttempt, PastWorkload, StartLag, history_trace
from gpuspawner.sim.simulate import simulate
from gpuspawner.sim.trace import TraceJob
from gpuspawner.sim.whatif import ChangeError, Key, Run
from gpuspawner.sim.whatif_worker import request

CLUSTER = Cluster([Node("n1", "default", 4), Node("n2", "big.pool", 4)],
                  [Team("a", {"default": Quota(3, 0, None)}), Team("ml.b", {"default": Quota(1, 0)}),
                   Team("default", {"default": Quota(0), "big.pool": Quota(4)})])


@pytest.mark.parametrize("key, parsed", [
    ("team.a.default.nominal", Key("team", "a", "default", "nominal")),
    ("team.ml.b.default.lending_limit", Key("team", "ml.b", "default", "lending_limit")),
    ("team.a.big.pool.borrowing_limit", Key("team", "a", "big.pool", "borrowing_limit")),
    ("team.ml.b.weight", Key("team", "ml.b", field="weight")),
    ("policy.preemption_delay", Key("policy", "preemption_delay", field="preemption_delay")),
])
def test_setting_keys_name_a_team_and_pool_even_with_dots(key, parsed):
    assert whatif.parse_key(key, [t.name for t in CLUSTER.teams], CLUSTER.capacity) == parsed


@pytest.mark.parametrize("text, key, value", [
    ("team.a.default.nominal=4", "team.a.default.nominal", 4),
    ("team.a.default.borrowing_limit = none", "team.a.default.borrowing_limit", None),
    ("team.a.weight=1.5", "team.a.weight", 1.5),
    ("policy.backfill=false", "policy.backfill", False),
])
def test_command_line_settings(text, key, value):
    assert whatif.parse_setting(text) == (key, value)


@pytest.mark.parametrize("changes, field, words", [
    ({}, "", "name at least one setting"),
    ({"queue.a": 1}, "queue.a", "starts with team. or policy."),
    ({"policy.speed": 1}, "policy.speed", "unknown policy knob 'speed'"),
    ({"team.ghost.default.nominal": 1}, "team.ghost.default.nominal", "no team in 'ghost.default"),
    ({"team.a.h100.nominal": 1}, "team.a.h100.nominal", "unknown pool 'h100'"),
    ({"team.a.default.size": 1}, "team.a.default.size", "weight or POOL."),
    ({"team.a.default.nominal": 5}, "team.a.default.nominal",
     "5 GPUs cannot be guaranteed: pool default has 4 GPUs"),
    ({"team.a.default.nominal": -1}, "team.a.default.nominal", "whole number of GPUs"),
    ({"team.a.default.nominal": 2.5}, "team.a.default.nominal", "whole number of GPUs"),
    ({"team.a.default.nominal": None}, "team.a.default.nominal", "whole number of GPUs, got None"),
    ({"team.a.default.borrowing_limit": True}, "team.a.default.borrowing_limit", "or none"),
    ({"team.a.weight": 0}, "team.a.weight", "(0, 1000]"),
    ({"policy.backfill": "yes"}, "policy.backfill", "true or false"),
    ({"policy.preemption_delay": None}, "policy.preemption_delay", "seconds from 0"),
    ({"policy.max_preemptions": 1.5}, "policy.max_preemptions", "whole number >= 0 or none"),
    ({"team.a.default.lending_limit": 3, "team.a.default.nominal": 2},
     "team.a.default.lending_limit", "3 is more than the team's nominal quota (2)"),
    ({"team.default.default.nominal": 2}, "team.default.default.nominal", "is the default team"),
    ({"team.a.default.cpus": -1}, "team.a.default.cpus", "a number >= 0 or none"),
    ({"team.a.default.memory_gib": "lots"}, "team.a.default.memory_gib", "a number >= 0 or none"),
])
def test_a_setting_that_cannot_be_previewed_is_named(changes, field, words):
    with pytest.raises(ChangeError) as e:
        whatif.validate_changes(changes, CLUSTER, default_team="default")
    assert e.value.field == field and words in str(e.value), str(e.value)


@pytest.mark.parametrize("changes, words", [
    ({"team.a.default.nominal": 1}, "own team's settings only (ml.b)"),
    ({"policy.min_runtime": 60}, "own team's settings only (ml.b)"),
])
def test_a_lead_previews_only_their_own_teams_settings(changes, words):
    assert whatif.validate_changes({"team.ml.b.default.nominal": 2}, CLUSTER,
                                   allowed_teams={"ml.b"})
    with pytest.raises(ChangeError) as e:
        whatif.validate_changes(changes, CLUSTER, allowed_teams={"ml.b"})
    assert words in str(e.value)


def test_changes_apply_to_teams_knobs_and_the_default_teams_share():
    changes = whatif.validate_changes(
        {"team.a.default.nominal": 1, "team.ml.b.default.nominal": 2, "team.a.weight": 3,
         "team.ml.b.default.borrowing_limit": None, "policy.max_preemptions": None,
         "policy.preemption_delay": 60}, CLUSTER, default_team="default")
    cluster, policy = whatif.apply_changes(CLUSTER, get_policy("gpuhub"), changes,
                                           default_team="default")
    teams = {t.name: t for t in cluster.teams}
    assert teams["a"].quota("default") == Quota(1, 0, None) and teams["a"].weight == 3.0
    assert teams["ml.b"].quota("default") == Quota(2, None, None)
    # a gave up 2, b took 1: the default team guarantees the one no one owns
    assert teams["default"].quota("default") == Quota(1) and teams["default"].quota("big.pool") == Quota(4)
    assert policy.max_preemptions is None and policy.preemption_delay == 60.0
    assert cluster.nodes == CLUSTER.nodes


def test_a_preview_may_set_or_lift_a_teams_cpu_and_memory_ceilings():
    changes = whatif.validate_changes({"team.a.default.cpus": 8, "team.a.default.memory_gib": 32,
                                       "team.ml.b.default.cpus": None}, CLUSTER)
    [a, b] = whatif.team_changes(changes, CLUSTER)
    assert (a.quotas["default"].cpus, a.quotas["default"].memory) == (8.0, 32 << 30)
    assert b.quotas["default"].cpus is None


def test_team_changes_are_what_saving_them_changes():
    changes = {"team.ml.b.default.borrowing_limit": 2, "team.a.weight": 2,
               "team.ml.b.default.nominal": 2, "policy.backfill": False}
    assert whatif.team_changes(changes, CLUSTER) == [
        whatif.TeamChange("a", 2, {}, {"team.a.weight": 2}),
        whatif.TeamChange("ml.b", None, {"default": Quota(2, 2, None)},
                          {"team.ml.b.default.borrowing_limit": 2,
                           "team.ml.b.default.nominal": 2})]


def test_figures_of_a_course():
    cluster = Cluster([Node("n", "p", 2)], [Team("a", {"p": Quota(1)}), Team("b", {"p": Quota(1)})])
    runs = [Run("a", 0.0, 0.0), Run("a", 10.0, 30.0, preemptions=1), Run("a", 60.0, 100.0),
            Run("b", 5.0, 20.0), Run("b", 6.0, None)]
    fig = whatif.figures(runs, {"a": 3600.0, "b": 1800.0}, cluster, horizon_s=3600.0,
                         buckets=whatif.Buckets(0.0, 1800.0, 2))
    a, b = fig["teams"]["a"], fig["teams"]["b"]
    assert (a["jobs"], a["mean_wait_s"], a["p95_wait_s"], a["preemptions"]) == (3, 20.0, 40.0, 1)
    assert (a["gpu_hours"], a["nominal_gpu_hours"]) == (1.0, 1.0)
    # a's second job waited through b's start at 20 s; the others through none
    assert a["starts_waited"] == pytest.approx(1 / 3) and b["starts_waited"] == 0
    assert (b["jobs"], b["never_started"], b["mean_wait_s"]) == (1, 1, 15.0)
    assert fig["utilisation"] == pytest.approx(5400 / 7200)
    assert fig["waits_over_time"] == {"a": [20.0, None], "b": [15.0, None]}


def two_teams(borrowing=0):
    return Cluster([Node("n1", "default", 4)],
                   [Team("a", {"default": Quota(3, borrowing)}), Team("b", {"default": Quota(1, borrowing)})])


def workload(team: str, i: int, lag: float = 0.0) -> TraceJob:
    return TraceJob(f"{team}{i}", team, f"u-{team}", 2.0 * i, 1, 3.0 + i % 3)


def history_from_a_replay(jobs, cluster, policy, since=10_000.0):
    """What a cluster run by the core itself would have recorded."""
    result = simulate(jobs, cluster, policy)
    runs = {r.job_id: r for r in result.records}
    return [PastWorkload(j.job_id, "job", j.team, j.user, "default", 1, since + j.submit_time_s,
                         (PastAttempt(since + runs[j.job_id].first_start,
                                      since + runs[j.job_id].finish),))
            for j in jobs]


def test_shifting_quota_moves_the_wait_and_the_replay_of_its_own_history_is_exact():
    jobs = [workload(team, i) for i in range(8) for team in "ab"]
    policy = get_policy("gpuhub")
    history = history_trace(history_from_a_replay(jobs, two_teams(), policy), 10_000.0,
                            10_100.0, ["default"])
    changes = {"team.a.default.nominal": 1, "team.b.default.nominal": 3}
    r = whatif.preview(history.jobs, history.outcomes, history.horizon_s, two_teams(), policy,
                       changes, buckets=10)
    cur, new = r["current"]["teams"], r["proposed"]["teams"]
    assert cur["a"]["mean_wait_s"] == 0 < new["a"]["mean_wait_s"]
    assert cur["b"]["mean_wait_s"] > 0 == new["b"]["mean_wait_s"]
    # the same demand, mirrored: what b waited, a now waits
    assert new["a"]["mean_wait_s"] == pytest.approx(cur["b"]["mean_wait_s"], rel=0.2)
    assert r["fidelity"]["wait_error_s"] == pytest.approx(0, abs=1e-9)
    assert r["fidelity"]["utilisation_error_points"] == pytest.approx(0, abs=1e-9)
    assert new["a"]["nominal_gpu_hours"] == pytest.approx(100 / 3600)
    assert r["current"]["utilisation"] == pytest.approx(r["proposed"]["utilisation"])
    assert r["rejected"]["proposed"]["count"] == 0 and r["jobs"] == 16


def test_the_services_start_lag_is_replayed_and_left_out_of_the_gpu_hours():
    jobs = [workload("b", i) for i in range(4)]
    lag = StartLag(after_submit_s=0.1, after_exit_s=0.5, submits=1, exits=3,
                   after_submit_p90_s=0.2, after_exit_p90_s=0.8)
    cluster = two_teams()
    plain = whatif.preview(jobs, {}, 100.0, cluster, get_policy("gpuhub"),
                           {"team.b.weight": 2})
    lagged = whatif.preview(jobs, {}, 100.0, cluster, get_policy("gpuhub"),
                            {"team.b.weight": 2}, lag=lag, run_jitter_s=0.3)
    p, q = plain["current"]["teams"]["b"], lagged["current"]["teams"]["b"]
    # each start comes 0.1 s after the submission, queued ones 0.5 s per exit waited for
    assert q["mean_wait_s"] > p["mean_wait_s"] + 0.1
    assert q["gpu_hours"] == pytest.approx(p["gpu_hours"])
    # the margin: a start as late as the slowest tenth, for its own and each waited
    # for, and each run waited for as much longer as repeated work varied
    assert q["margin_s"] == pytest.approx(0.2 + q["starts_waited"] * (0.8 + 0.3))
    assert "0.1s after a submission" in " ".join(lagged["assumptions"])


def test_progress_runs_from_0_to_1_and_an_exception_from_it_cancels():
    jobs = [workload(team, i) for i in range(30) for team in "ab"]
    seen = []
    whatif.preview(jobs, {}, 100.0, two_teams(), get_policy("gpuhub"), {"team.a.weight": 2},
                   progress=seen.append)
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen) and len(seen) > 2

    class Cancelled(Exception):
        pass

    def cancel(done):
        if done > 0.25:
            raise Cancelled()
    with pytest.raises(Cancelled):
        whatif.preview(jobs, {}, 100.0, two_teams(), get_policy("gpuhub"), {"team.a.weight": 2},
                       progress=cancel)


def test_a_lead_sees_their_teams_and_the_cluster():
    jobs = [workload(team, i) for i in range(4) for team in "ab"]
    r = whatif.preview(jobs, {}, 100.0, two_teams(), get_policy("gpuhub"),
                       {"team.b.default.nominal": 2})
    seen = whatif.only_teams(r, {"b"})
    for side in ("actual", "current", "proposed"):
        assert set(seen[side]["teams"]) <= {"b"} and set(seen[side]["waits_over_time"]) <= {"b"}
    assert seen["current"]["utilisation"] == r["current"]["utilisation"]
    assert "a" not in json.dumps(seen["fidelity"]["teams"])


def test_the_worker_process_answers_progress_then_the_result():
    jobs = [workload(team, i) for i in range(8) for team in "ab"]
    policy = get_policy("gpuhub")
    history = history_trace(history_from_a_replay(jobs, two_teams(), policy), 10_000.0,
                            10_100.0, ["default"])
    data = request(history, two_teams(), policy, {"team.a.default.nominal": 1})
    out = subprocess.run([sys.executable, "-m", "gpuspawner.sim.whatif_worker"], input=data,
                         capture_output=True, timeout=60, check=True)
    messages = [json.loads(line) for line in out.stdout.splitlines()]
    assert "progress" in messages[0] and messages[-2] == {"progress": 1.0}
    result = messages[-1]["result"]
    assert result["proposed"]["teams"]["a"]["mean_wait_s"] > result["current"]["teams"]["a"]["mean_wait_s"]
    bad = subprocess.run([sys.executable, "-m", "gpuspawner.sim.whatif_worker"],
                         input=data.replace(b'"team.a.default.nominal"', b'"team.z.x.nominal"'),
                         capture_output=True, timeout=60)
    assert bad.returncode == 1
    assert "no team in 'z.x.nominal'" in json.loads(bad.stdout.splitlines()[-1])["error"]


@pytest.mark.parametrize("seconds, text", [(None, "-"), (0.04, "0.0s"), (4.25, "4.2s"),
                                           (42.4, "42s"), (754, "13m"), (3 * 3600, "3.0h"),
                                           (3 * 86400, "3.0d"), (-7.5, "-7.5s")])
def test_waits_are_written_short(seconds, text):
    assert whatif.duration(seconds) == text


def test_line_chart_breaks_at_missing_values_and_dashes_what_it_is_told():
    svg = lines(["b1", "b2", "b3", "b4"], {"a · current": [1.0, 2.0, None, 4.0],
                                           "a · proposed": [2.0, 3.0, 5.0, 6.0]},
                colours={"a · current": "#111", "a · proposed": "#111"},
                dashed={"a · proposed"})
    polylines = re.findall(r"<polyline [^>]*>", svg)
    assert len(polylines) == 2  # current: 1-2 (a line), 4 alone (a dot); proposed: one line
    assert "stroke-dasharray" in polylines[1] and "stroke-dasharray" not in polylines[0]
    assert len(re.findall(r"<circle ", svg)) == 1
    assert "nothing waited" in lines(["b1"], {"a": [None]})


def test_the_cli_table_says_current_to_proposed_and_the_fidelity():
    jobs = [workload(team, i) for i in range(8) for team in "ab"]
    policy = get_policy("gpuhub")
    history = history_trace(history_from_a_replay(jobs, two_teams(), policy), 10_000.0,
                            10_100.0, ["default"])
    changes = {"team.a.default.nominal": 1, "team.b.default.nominal": 3}
    result = whatif.preview(history.jobs, history.outcomes, history.horizon_s, two_teams(), policy,
                            changes)
    text = format_preview({"id": "p1", "changes": changes, "since": "2026-12-01T00:00:00Z",
                           "until": "2026-12-01T00:01:40Z", "result": result})
    rows: dict[str, str] = {}
    for line in text.splitlines():  # the preview's rows, then the fidelity's
        if line[:2] in ("a ", "b "):
            rows.setdefault(line.split()[0], line)
    b_wait = whatif.duration(result["current"]["teams"]["b"]["mean_wait_s"])
    a_wait = whatif.duration(result["proposed"]["teams"]["a"]["mean_wait_s"])
    assert f"0.0s → {a_wait} ±0.0s  +{a_wait} " in rows["a"] and f"{b_wait} → 0.0s" in rows["b"]
    assert "3 → 1" not in text and "0.08 → 0.03" in rows["a"]  # nominal GPU-hours
    assert "fidelity: the current settings replayed against what happened" in text
    assert "Demand is replayed as it was" in text


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--set", "team.a.default.nominal=1"], "--set goes with --from-history"),
    (["simulate", "--from-history", "14d", "--token", "t"], "needs the change to preview"),
    (["simulate", "--from-history", "14d", "--set", "team.a", "--token", "t"], "KEY=VALUE"),
    (["simulate", "t.csv", "--from-history", "14d", "--set", "a=1", "--token", "t"],
     "takes no TRACE"),
])
def test_simulate_from_history_refuses_what_it_cannot_run(argv, words, capsys):
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_trace_export_is_a_subcommand_of_trace(capsys):
    with pytest.raises(SystemExit):
        main(["trace", "export", "--help"])
    assert "usage: gpuhub trace export" in capsys.readouterr().out


@pytest.mark.parametrize("submits, horizon, buckets, first, width", [
    ([], 100.0, 4, 0.0, 25.0),
    ([60.0, 90.0], 100.0, 4, 60.0, 10.0),
    ([100.0], 100.0, 4, 0.0, 25.0),
])
def test_wait_buckets_start_at_the_first_submission(submits, horizon, buckets, first, width):
    b = whatif.Buckets.over([TraceJob(f"j{i}", "a", "u", t, 1, 1.0) for i, t in enumerate(submits)],
                            horizon, buckets)
    assert (b.start_s, b.width_s) == pytest.approx((first, width))
    assert b.of(horizon) == buckets - 1 and b.of(first) == 0


@pytest.mark.parametrize("share, text", [(None, "-"), (0.713, "71.3%"), (0.0042, "0.42%"),
                                         (0.0, "0.00%")])
def test_shares_are_written_with_the_digits_that_matter(share, text):
    assert whatif.percent(share) == text


@pytest.mark.parametrize("width, labels", [
    (20.0, ["00:00:00", "00:00:20"]), (3600.0, ["01-01 00:00", "01-01 01:00"]),
    (86400.0, ["2026-01-01", "2026-01-02"]),
])
def test_wait_buckets_are_labelled_at_their_scale(width, labels):
    assert bucket_labels(1767225600.0, width, 2) == labels  # 2026-01-01 00:00 UTC
