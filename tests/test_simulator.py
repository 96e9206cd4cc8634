"""The simulator, cluster file, metrics and the gpuhub CLI, end to end."""
import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gpuspawner.cli import main
from gpuspawner.scheduler.policy import POLICIES, get_policy
from gpuspawner.sim.cluster import ClusterError, parse_cluster
from gpuspawner.sim.metrics import jain, percentile
from gpuspawner.sim.simulate import ShapeError, SimulationError, simulate, to_workload
from gpuspawner.sim.trace import TraceJob, generate_philly_trace, write_trace

SMALL_CLUSTER = {
    "pools": [{"name": "a100", "nodes": 8, "gpus_per_node": 8, "topology": {"rack": 4}}],
    "teams": [
        {"name": "vision", "quota": {"a100": {"nominal": 32}}},
        {"name": "nlp", "quota": {"a100": {"nominal": 20}}},
        {"name": "speech", "quota": {"a100": {"nominal": 12, "borrowing_limit": 8}}},
    ],
}


def small_trace(n=300, load=1.4, seed=1):
    return generate_philly_trace(n, teams=["vision", "nlp", "speech"], capacity_gpus=64,
                                 load=load, seed=seed)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_finishes_the_trace_without_breaking_invariants(policy):
    result = simulate(small_trace(150), parse_cluster(SMALL_CLUSTER), get_policy(policy), check=True)
    assert result.problems == []
    m = result.metrics
    # speech may hold at most 12 + 8 GPUs, so its 32-GPU jobs are rejected where quotas hold.
    assert m["finished"] + m["rejected"] == 150
    assert (m["rejected"] > 0) == POLICIES[policy].quotas
    if POLICIES[policy].quotas:
        assert m["quota_violations"] == 0


def test_gpuhub_beats_fifo_on_average_completion_time():
    cluster = parse_cluster(SMALL_CLUSTER)
    trace = small_trace(400)
    fifo = simulate(trace, cluster, get_policy("fifo")).metrics
    gpuhub = simulate(trace, cluster, get_policy("gpuhub")).metrics
    assert gpuhub["avg_jct_s"] < fifo["avg_jct_s"]
    assert gpuhub["avg_queue_s"] < fifo["avg_queue_s"] / 2


# One node of 4 GPUs, all of them the owner's nominal quota.
OWNER_AND_BORROWER = {
    "pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 4}],
    "teams": [{"name": "owner", "quota": {"a100": {"nominal": 4}}},
              {"name": "borrower", "quota": {"a100": {"nominal": 0}}}]}


def test_reclaim_preempts_and_requeued_job_finishes_later_with_restart_cost():
    cluster = parse_cluster(OWNER_AND_BORROWER)
    trace = [
        TraceJob("borrow", "borrower", "b", 0.0, 4, 1000.0, time_limit_s=5000.0),
        TraceJob("reclaim", "owner", "o", 100.0, 2, 100.0, time_limit_s=200.0),
    ]
    policy = get_policy("gpuhub").with_(preemption_delay=0.0, default_grace_period=30.0)
    result = simulate(trace, cluster, policy, restart_cost_s=60.0, check=True)
    assert result.metrics["preemptions"] == 1
    assert result.problems == []
    # The owner starts once the borrower has left (100 s + 30 s grace) and runs 100 s; the borrower
    # restarts then with 900 s left + 60 s restart cost.
    assert result.metrics["finished"] == 2
    assert result.metrics["makespan_s"] == pytest.approx(230 + 960)
    # Lost to the preemption: 4 GPUs × (30 s grace + 60 s restart), over the GPU time used
    # (borrower 130 s + 960 s on 4 GPUs, owner 100 s on 2).
    assert result.metrics["lost_gpu_fraction"] == pytest.approx(4 * 90 / (4 * 1090 + 2 * 100))
    assert result.metrics["max_preemptions_per_job"] == 1


@pytest.mark.parametrize("delay", [0.0, 300.0, 900.0])
def test_reclaim_comes_when_the_preemption_delay_ends_not_at_the_next_event(delay):
    """The service's timer runs a cycle while nothing happens; a replay that
    only decided at submissions and exits reclaimed when the borrower ended."""
    cluster = parse_cluster(OWNER_AND_BORROWER)
    trace = [
        TraceJob("borrow", "borrower", "b", 0.0, 4, 20000.0, time_limit_s=30000.0),
        TraceJob("reclaim", "owner", "o", 100.0, 2, 100.0, time_limit_s=200.0),
    ]
    policy = get_policy("gpuhub").with_(preemption_delay=delay, default_grace_period=30.0,
                                        age_protection=None)
    result = simulate(trace, cluster, policy, restart_cost_s=60.0, check=True)
    assert result.problems == []
    owner = next(r for r in result.records if r.job_id == "reclaim")
    # submitted at 100 s, may preempt from 100 + delay, starts once the borrower's grace is over
    assert owner.first_start == pytest.approx(100.0 + delay + 30.0)
    assert result.metrics["preemptions"] == 1


@pytest.mark.parametrize("data, words", [
    ({}, "non-empty 'pools'"),
    ({"pools": [{"name": "a", "nodes": 0, "gpus_per_node": 8}]}, "pools[0].nodes"),
    ({"pools": [{"name": "a", "nodes": 2, "gpus_per_node": "8"}]}, "gpus_per_node"),
    ({"pools": [{"name": "a", "nodes": 1, "gpus_per_node": 8}] * 2}, "declared twice"),
    ({"pools": [{"name": "a", "nodes": 1, "gpus_per_node": 8}],
      "teams": [{"name": "t", "quota": {"b": {"nominal": 1}}}]}, "unknown pool 'b'"),
    ({"pools": [{"name": "a", "nodes": 1, "gpus_per_node": 8}],
      "teams": [{"name": "t", "quota": {"a": {"nominal": -1}}}]}, "nominal must be an integer >= 0"),
    ({"pools": [{"name": "a", "nodes": 1, "gpus_per_node": 8}],
      "teams": [{"name": "t", "weight": 0}]}, "weight must be a number > 0"),
])
def test_cluster_file_errors_name_the_field(data, words):
    with pytest.raises(ClusterError, match=words.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(")):
        parse_cluster(data)


def test_cluster_topology_groups_consecutive_nodes():
    cluster = parse_cluster(SMALL_CLUSTER)
    racks = [n.topology["rack"] for n in cluster.nodes]
    assert racks == ["a100-rack0"] * 4 + ["a100-rack1"] * 4


@pytest.mark.parametrize("gpus, nodes, expected", [
    (4, None, (4, 1)), (16, None, (8, 2)), (32, None, (8, 4)), (8, 2, (4, 2)),
])
def test_trace_jobs_become_gangs_of_whole_nodes(gpus, nodes, expected):
    w = to_workload(TraceJob("j", "t", "u", 0.0, gpus, 10.0, num_nodes=nodes),
                    parse_cluster(SMALL_CLUSTER))
    assert (w.gpus_per_node, w.num_nodes) == expected


@pytest.mark.parametrize("gpus, nodes_in_pool, expected", [
    (20, 8, (5, 4)),      # 20 on 8-GPU nodes: 4 × 5 (no longer an abort)
    (12, 8, (6, 2)),
    (24, 8, (8, 3)),
    (13, 16, (1, 13)),    # a prime spreads one GPU per node
    (13, 8, None),        # ... which needs 13 nodes: rejected, not a crash
])
def test_gpu_counts_that_do_not_fill_whole_nodes_are_split_evenly(gpus, nodes_in_pool, expected):
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": nodes_in_pool,
                                        "gpus_per_node": 8}]})
    job = TraceJob("j", "t", "u", 0.0, gpus, 10.0)
    if expected is None:
        with pytest.raises(ShapeError, match="13 GPUs do not split"):
            to_workload(job, cluster)
    else:
        w = to_workload(job, cluster)
        assert (w.gpus_per_node, w.num_nodes) == expected


def test_replay_places_a_20_gpu_job_and_rejects_an_impossible_split_without_aborting():
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": 4, "gpus_per_node": 8}]})
    trace = [
        TraceJob("twenty", "t", "u", 0.0, 20, 100.0, time_limit_s=200.0),
        TraceJob("fixed", "t", "u", 0.0, 20, 100.0, time_limit_s=200.0, num_nodes=3),
        TraceJob("small", "t", "u", 10.0, 4, 100.0, time_limit_s=200.0),
    ]
    for name in sorted(POLICIES):
        result = simulate(trace, cluster, get_policy(name), check=True)
        assert result.problems == []
        records = {r.job_id: r for r in result.records}
        assert records["twenty"].finish == pytest.approx(100.0)
        assert "num_nodes asks for" in records["fixed"].rejected
        assert records["small"].finish is not None
        assert (result.metrics["finished"], result.metrics["rejected"]) == (2, 1)


def test_fifo_plain_reads_no_time_limit_and_fifo_does():
    """The same trace with other time limits (still above every run time):
    fifo-plain decides exactly the same; fifo's drain-aware placement reads them."""
    import random
    rng = random.Random(5)
    cluster = parse_cluster(SMALL_CLUSTER)
    trace = small_trace(250, load=1.2, seed=3)
    longer = [replace(j, time_limit_s=j.duration_s * rng.uniform(1.0, 20.0)) for j in trace]

    def outcome(policy, jobs):
        return [(r.job_id, r.first_start, r.finish)
                for r in simulate(jobs, cluster, get_policy(policy)).records]

    assert outcome("fifo-plain", trace) == outcome("fifo-plain", longer)
    assert outcome("fifo", trace) != outcome("fifo", longer)


def test_trace_job_with_unknown_pool_is_an_error():
    with pytest.raises(SimulationError, match="gpu_type 'h100'"):
        to_workload(TraceJob("j", "t", "u", 0.0, 1, 10.0, gpu_type="h100"),
                    parse_cluster(SMALL_CLUSTER))


@pytest.mark.parametrize("values, q, expected", [
    ([5.0], 99, 5.0), ([1, 2, 3, 4], 50, 2), (list(range(1, 101)), 99, 99), ([3, 1, 2], 100, 3),
])
def test_percentile_nearest_rank(values, q, expected):
    assert percentile(values, q) == expected


@pytest.mark.parametrize("values, expected", [
    ([1, 1, 1, 1], 1.0), ([1, 0, 0, 0], 0.25), ([2, 1], 0.9),
])
def test_jain_index(values, expected):
    assert jain(values) == pytest.approx(expected)


def test_cli_simulate_json_and_plot(tmp_path, capsys):
    trace, cluster, png = tmp_path / "t.csv", tmp_path / "c.yaml", tmp_path / "u.png"
    write_trace(trace, small_trace(80))
    import yaml
    cluster.write_text(yaml.safe_dump(SMALL_CLUSTER))
    code = main(["simulate", str(trace), "--cluster", str(cluster), "--policy", "fifo",
                 "--policy", "gpuhub", "--json", "--plot", str(png)])
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["policy"] for r in rows] == ["fifo", "gpuhub"]
    for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s", "makespan_s",
                "utilization_backlog", "jain_fairness", "max_slowdown_per_team", "preemptions",
                "quota_violations"):
        assert key in rows[1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_simulate_reports_bad_trace(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,team\n1,a\n")
    assert main(["simulate", str(trace), "--cluster", str(tmp_path / "none.yaml")]) == 2
    assert "user" in capsys.readouterr().err


def test_cli_bench_json(capsys):
    assert main(["bench", "--json", "--sizes", "300", "--cycles", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["explain"] for r in rows} == {False, True}
    for r in rows:
        assert r["pending"] == 300 and r["gpus"] == 8000 and r["teams"] == 50
        assert r["cycle_p50_ms"] > 0 and r["fifo_cycle_p50_ms"] > 0 and r["admissions"] > 0


def test_cli_records_one_row_per_job_that_recomputes_the_figures(tmp_path, capsys):
    trace, cluster, records = tmp_path / "t.csv", tmp_path / "c.yaml", tmp_path / "jobs.csv"
    write_trace(trace, small_trace(120))
    cluster.write_text(yaml.safe_dump(SMALL_CLUSTER))
    assert main(["simulate", str(trace), "--cluster", str(cluster), "--policy", "gpuhub",
                 "--json", "--records", str(records)]) == 0
    m = json.loads(capsys.readouterr().out)
    with records.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["job_id", "team", "gpus", "submit_s", "first_start_s", "finish_s",
                             "run_s", "preemptions"]
    assert len(rows) == 120
    done = [r for r in rows if r["finish_s"]]
    assert len(done) == m["finished"]
    jct = [float(r["finish_s"]) - float(r["submit_s"]) for r in done]
    assert sum(jct) / len(jct) == pytest.approx(m["avg_jct_s"], rel=1e-6)
    assert sum(int(r["preemptions"]) for r in rows) == m["preemptions"]


def test_cli_records_with_several_policies_writes_one_file_each(tmp_path):
    trace, cluster = tmp_path / "t.csv", tmp_path / "c.yaml"
    write_trace(trace, small_trace(40))
    cluster.write_text(yaml.safe_dump(SMALL_CLUSTER))
    assert main(["simulate", str(trace), "--cluster", str(cluster), "--policy", "fifo",
                 "--policy", "fifo-plain", "--json", "--records", str(tmp_path / "r.csv")]) == 0
    assert sorted(p.name for p in tmp_path.glob("r-*.csv")) == ["r-fifo-plain.csv", "r-fifo.csv"]


REDUCED_SWEEP = {"jobs": 120, "nodes": 4, "loads": [0.8, 1.6], "teams": [3],
                 "quotas": ["proportional", "skewed"],
                 "limits": {"exact": {"factor": [1.0, 1.0]},
                            "noisy": {"factor": [2.0, 10.0], "blanket_share": 0.3}},
                 "policies": ["fifo-plain", "backfill", "gpuhub"]}


@pytest.fixture(scope="module")
def reduced_sweep_rows():
    """The reduced sweep CI runs: 2 loads × 2 limits × 2 quota files on 32 GPUs."""
    from gpuspawner.sim.sweep import parse_sweep, run_sweep
    return run_sweep(parse_sweep(REDUCED_SWEEP), check=True)


def test_reduced_sweep_replays_every_policy_on_every_case_without_invariant_violations(
        reduced_sweep_rows):
    cases = {r["case"] for r in reduced_sweep_rows}
    assert len(cases) == 8
    assert sorted(r["policy"] for r in reduced_sweep_rows) == \
        sorted(["backfill", "fifo-plain", "gpuhub"] * 8)
    for r in reduced_sweep_rows:
        assert r["invariant_problems"] == 0, r["case"]
        assert r["finished"] + r["rejected"] == 120
        assert set(r["p99_queue_s_by_size"]) <= {"1", "2-4", "5-8", ">8"}
        assert r["max_preemptions_per_job"] <= 3  # gpuhub's cap; the others never preempt


@pytest.mark.parametrize("goals, met", [
    ({}, None),                                       # the real goals: whatever they say
    ({"jct_ratio_queued": 100, "jct_ratio_light": 100, "p99_queue_ratio": 100,
      "p99_slack_s": 1e9, "jain_slack": 1, "team_slowdown_ratio": 100,
      "max_preemptions_per_job": 100, "lost_gpu_fraction": 1, "utilization_backlog": 0}, True),
    ({"utilization_backlog": 1.0, "jct_ratio_light": 0.01, "jct_ratio_queued": 0.01}, False),
])
def test_sweep_exit_status_says_whether_the_goals_are_met(tmp_path, capsys, goals, met):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({**REDUCED_SWEEP, "loads": [1.6], "quotas": ["skewed"],
                                     "limits": {"exact": {"factor": [1.0, 1.0]}},
                                     "goals": goals}))
    code = main(["simulate", "--sweep", str(sweep), "--json"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    verdict = lines[-1]
    assert len(lines) == 4 and {r["policy"] for r in lines[:-1]} == {"fifo-plain", "backfill",
                                                                     "gpuhub"}
    assert code == (1 if verdict["goals_missed"] else 0)
    if met is not None:
        assert (verdict["goals_missed"] == []) == met
    if met is False:
        assert any("utilisation under backlog" in m for m in verdict["goals_missed"])
        jct = [m for m in verdict["goals_missed"] if "avg JCT" in m]
        assert jct and all("with no queueing at all" in m for m in jct)


def test_sweep_table_names_every_case_and_policy(tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({**REDUCED_SWEEP, "loads": [1.0], "quotas": ["skewed"],
                                     "limits": {"exact": {"factor": [1.0, 1.0]}}}))
    code = main(["simulate", "--sweep", str(sweep)])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert "load 1 · 3 teams · skewed · exact | gpuhub |" in out
    assert sum(line.startswith("load 1 · 3 teams · skewed · exact |")
               for line in out.splitlines()) == 3
    assert ("every goal met" in out) == (code == 0)


@pytest.mark.parametrize("data, words", [
    ({}, "loads is required"),
    ({"loads": []}, "loads must be a non-empty list"),
    ({"loads": [1.0], "jobs": 0}, "jobs must be an integer >= 1"),
    ({"loads": [1.0], "policies": ["lottery"]}, "policies[0] is 'lottery'"),
    ({"loads": [1.0], "quotas": ["random"]}, "quotas[0] is 'random'"),
    ({"loads": [1.0], "limits": {"x": {"factor": [3, 2]}}}, "limits.x.factor"),
    ({"loads": [1.0], "limits": {"x": {"blanket_share": 2}}}, "limits.x.blanket_share"),
    ({"loads": [1.0], "goals": {"speed": 1}}, "goals.speed is unknown"),
    ({"loads": [1.0], "colour": "red"}, "unknown field(s) colour"),
    ({"loads": [1.0], "seed": 7, "seeds": [7, 11]}, "give seed or seeds, not both"),
    ({"loads": [1.0], "seeds": [7, -1]}, "seeds[1] must be an integer >= 0"),
    ({"loads": [1.0], "variants": ["x"]}, "variants must map a name"),
    ({"loads": [1.0], "variants": {"gpuhub": {"base": "gpuhub"}}}, "a name of its own"),
    ({"loads": [1.0], "variants": {"v": {"base": "lottery"}}}, "variants.v.base must name"),
    ({"loads": [1.0], "variants": {"v": {"base": "gpuhub", "speed": 1}}},
     "variants.v.speed is not a policy knob"),
    ({"loads": [1.0], "variants": {"v": {"base": "gpuhub", "min_runtime": -1}}},
     "variants.v.min_runtime: must be seconds"),
    ({"loads": [1.0], "variants": {"v": {"base": "gpuhub", "preemption": "no"}}},
     "variants.v.preemption: must be true or false"),
    ({"loads": [1.0], "policies": ["v"], "variants": {"w": {"base": "gpuhub"}}},
     "policies[0] is 'v'; known policies: backfill"),
])
def test_sweep_file_errors_name_the_field(tmp_path, capsys, data, words):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(data))
    assert main(["simulate", "--sweep", str(sweep)]) == 2
    assert words in capsys.readouterr().err


def test_a_sweep_variant_is_its_base_policy_with_the_knobs_changed(tmp_path, capsys):
    """An ablation in one file: gpuhub without preemption preempts nothing
    on the case where gpuhub itself preempts."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        **REDUCED_SWEEP, "loads": [1.6], "quotas": ["skewed"],
        "limits": {"exact": {"factor": [1.0, 1.0]}},
        "policies": ["backfill", "gpuhub", "gpuhub-no-preemption"],
        "variants": {"gpuhub-no-preemption": {"base": "gpuhub", "preemption": False,
                                              "aging_after": None}}}))
    main(["simulate", "--sweep", str(sweep), "--json"])
    rows = {r["policy"]: r for r in map(json.loads, capsys.readouterr().out.splitlines()[:-1])}
    assert set(rows) == {"backfill", "gpuhub", "gpuhub-no-preemption"}
    assert rows["gpuhub"]["preemptions_per_job"] > 0
    assert rows["gpuhub-no-preemption"]["preemptions_per_job"] == 0
    assert rows["gpuhub-no-preemption"]["avg_jct_s"] != rows["gpuhub"]["avg_jct_s"]


def test_a_sweep_over_seeds_replays_every_case_once_per_seed_and_tallies_each_policy(
        tmp_path, capsys):
    """One seed's verdict is noise for an ablation: with ``seeds`` every case
    runs on each seed's trace, and the verdict counts, per policy judged as
    the candidate, the goals it misses."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        **REDUCED_SWEEP, "loads": [1.6], "quotas": ["skewed"], "seeds": [7, 11],
        "limits": {"exact": {"factor": [1.0, 1.0]}},
        "policies": ["backfill", "gpuhub", "gpuhub-no-preemption"],
        "variants": {"gpuhub-no-preemption": {"base": "gpuhub", "preemption": False}}}))
    main(["simulate", "--sweep", str(sweep), "--json"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows, verdict = lines[:-1], lines[-1]
    names = {r["case"] for r in rows}
    assert names == {"load 1.6 · 3 teams · skewed · exact · seed 7",
                     "load 1.6 · 3 teams · skewed · exact · seed 11"}
    assert {r["seed"] for r in rows} == {7, 11} and len(rows) == 6
    backfill = [r for r in rows if r["policy"] == "backfill"]
    assert backfill[0]["avg_jct_s"] != backfill[1]["avg_jct_s"]  # two different traces
    by_policy = verdict["goals_missed_by_policy"]
    assert set(by_policy) == {"gpuhub", "gpuhub-no-preemption"}
    assert sum(by_policy["gpuhub"].values()) == len(verdict["goals_missed"])


def test_the_shipped_ablation_file_names_its_variants():
    from gpuspawner.sim.sweep import load_sweep
    sweep = load_sweep(Path(__file__).resolve().parent.parent / "examples" / "ablation.yaml")
    assert set(sweep.variants) <= set(sweep.policies)
    assert sweep.variants["gpuhub-no-preemption"].preemption is False
    assert sweep.policy("gpuhub-min-runtime-4h").min_runtime == 4 * 3600


@pytest.mark.parametrize("argv, words", [
    (["simulate"], "needs TRACE.csv and --cluster"),
    (["simulate", "--sweep", "examples/sweep.yaml", "t.csv"], "takes no TRACE"),
])
def test_cli_simulate_argument_errors(capsys, argv, words):
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_shipped_sweep_file_is_the_issue_sweep():
    from gpuspawner.sim.sweep import load_sweep
    sweep = load_sweep(Path(__file__).resolve().parent.parent / "examples" / "sweep.yaml")
    assert sweep.loads == [0.8, 1.0, 1.3, 1.6] and sweep.teams == [6, 15]
    assert sweep.quotas == ["proportional", "skewed"]
    assert sweep.limits["noisy"] == {"factor": (2.0, 10.0), "blanket_share": 0.3}
    assert {"fifo", "fifo-plain", "backfill", "gpuhub"} <= set(sweep.policies)


def _row(policy, **changes):
    """A sweep row of one case with figures a test sets (hours for the waits)."""
    h = 3600.0
    row = {"case": "load 1.6 · 6 teams · skewed · exact", "policy": policy,
           "avg_jct_s": 10 * h, "avg_queue_s": 5 * h, "avg_run_s": 5 * h,
           "p99_queue_s_by_size": {"1": 2 * h, ">8": 40 * h},
           "avg_queue_s_by_size": {"1": 1 * h, ">8": 20 * h},
           "jain_fairness": 0.90, "team_slowdown_ratio": 1.2, "max_preemptions_per_job": 0,
           "lost_gpu_fraction": 0.0, "utilization_backlog": 0.89, "invariant_problems": 0}
    for key, value in changes.items():
        if isinstance(value, dict):
            row[key] = {**row[key], **value}
        else:
            row[key] = value
    return row


@pytest.mark.parametrize("candidate, issue, restated", [
    # The same figures as backfill's on a case where jobs queue.
    ({}, ["avg JCT", "utilisation"], ["avg queueing"]),
    # Queueing cut by 30%, avg JCT only 0.85x (the run time stays): the issue's 0.8x JCT
    # is missed, the restated 0.8x of the mean queueing met.
    ({"avg_jct_s": 8.5 * 3600, "avg_queue_s": 3.5 * 3600}, ["avg JCT", "utilisation"], []),
    # A near-twin's Jain (0.01 lower) and utilisation (0.5 point lower).
    ({"avg_jct_s": 8 * 3600, "avg_queue_s": 3 * 3600, "jain_fairness": 0.89,
      "utilization_backlog": 0.885}, ["Jain", "utilisation"], []),
    # The >8-GPU jobs starve (p99 2x, mean 1.5x): missed under both.
    ({"avg_jct_s": 8 * 3600, "avg_queue_s": 3 * 3600, "utilization_backlog": 0.95,
      "p99_queue_s_by_size": {">8": 80 * 3600}, "avg_queue_s_by_size": {">8": 30 * 3600}},
     ["p99 >8"], ["mean wait >8", "p99 >8"]),
    # Utilisation 2 points under backfill's: missed under both.
    ({"avg_jct_s": 8 * 3600, "avg_queue_s": 3 * 3600, "utilization_backlog": 0.87},
     ["utilisation"], ["utilisation"]),
])
def test_restated_goals_judge_beside_the_issues_goals(candidate, issue, restated):
    """The restated goals (sim.sweep.RESTATED_GOALS) forgive what the baseline's own
    near-twin shows by chance and what no policy reaches on these traces; they still
    catch a starving bucket or lost utilisation."""
    from gpuspawner.sim.sweep import misses, parse_sweep
    sweep = parse_sweep({"loads": [1.6], "policies": ["backfill", "gpuhub"]})
    rows = [_row("backfill"), _row("gpuhub", **candidate)]
    assert sorted(g for g, _ in misses(rows, sweep, "gpuhub")) == issue
    assert sorted(g for g, _ in misses(rows, sweep, "gpuhub", restated=True)) == restated


@pytest.mark.parametrize("waiting_gpus, backlog, saturated", [
    # 3 GPUs wait, 4 idle as 2 + 2 on two nodes: a backlog, but not one that could fill them.
    (3, 0.75, 1.0),
    # 16 GPUs (a gang of two nodes) wait with 4 idle: the backlog could use every idle GPU.
    (16, 0.75, 0.75),
])
def test_utilisation_while_the_backlog_could_fill_the_idle_gpus(waiting_gpus, backlog,
                                                                saturated):
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": 2, "gpus_per_node": 8}],
                             "teams": [{"name": "t", "quota": {"a100": {"nominal": 16}}}]})
    trace = [TraceJob("a", "t", "u", 0.0, 6, 1000.0, time_limit_s=1000.0),
             TraceJob("b", "t", "u", 0.0, 6, 1000.0, time_limit_s=1000.0),
             TraceJob("wait", "t", "u", 1.0, waiting_gpus, 100.0, time_limit_s=100.0)]
    m = simulate(trace, cluster, get_policy("backfill")).metrics
    assert m["utilization_backlog"] == pytest.approx(backlog)
    assert m["utilization_saturated"] == pytest.approx(saturated)


def test_the_four_seed_file_judges_gpuhub_its_ablation_and_the_baselines_near_twin():
    from gpuspawner.sim.sweep import load_sweep
    sweep = load_sweep(Path(__file__).resolve().parent.parent / "examples" / "ablation-seeds.yaml")
    assert sweep.seeds == [7, 11, 23, 31]
    assert (sweep.baseline, sweep.candidate) == ("backfill", "gpuhub")
    assert sweep.policy("gpuhub").reserve_past_team_block is True
    assert sweep.policy("gpuhub-no-reserve-past-team-block") == replace(
        get_policy("gpuhub"), name="gpuhub-no-reserve-past-team-block",
        reserve_past_team_block=False)
    twin = sweep.policy("backfill-plain")
    assert twin == replace(get_policy("backfill"), name="backfill-plain",
                           drain_aware_placement=False)


def test_a_replay_holds_jobs_to_the_cpus_their_trace_asks_for_on_nodes_that_count_them(tmp_path):
    """Four 1-GPU jobs of 2 CPUs each on one 8-GPU node with 4 CPUs: two
    run at a time, so the last two start when the first two end; the trace
    and the cluster file carry CPUs and memory through a round trip."""
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 8,
                                        "cpus": 4, "memory_gib": 64}]})
    trace = [TraceJob(f"j{i}", "t", "u", 0.0, 1, 100.0, time_limit_s=200.0, cpus=2.0,
                      memory_gib=8.0) for i in range(4)]
    path = tmp_path / "trace.csv"
    write_trace(path, trace)
    from gpuspawner.sim.cluster import cluster_document
    from gpuspawner.sim.trace import read_trace
    assert read_trace(path) == trace
    assert parse_cluster(cluster_document(cluster)).nodes == cluster.nodes
    assert to_workload(trace[0], cluster).cpus == 2.0
    assert to_workload(trace[0], cluster).memory == 8 << 30
    result = simulate(trace, cluster, get_policy("gpuhub"), check=True)
    assert result.problems == [] and result.metrics["finished"] == 4
    assert result.metrics["makespan_s"] == pytest.approx(200.0)


def test_a_trace_without_cpus_replays_as_before():
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 8,
                                        "cpus": 4}]})
    trace = [TraceJob(f"j{i}", "t", "u", 0.0, 1, 100.0, time_limit_s=200.0) for i in range(4)]
    assert simulate(trace, cluster, get_policy("gpuhub")).metrics["makespan_s"] == \
        pytest.approx(100.0)


def test_a_replay_holds_a_team_to_its_cpu_quota_and_checks_clean():
    """A team with a CPU ceiling of 4 and eight 1-GPU jobs of 2 CPUs on a
    node with GPUs and CPUs to spare: two run at a time, the invariants
    (work conservation included) hold."""
    cluster = parse_cluster({"pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 8,
                                        "cpus": 64, "memory_gib": 512}],
                             "teams": [{"name": "t", "quota": {"a100": {"nominal": 8,
                                                                       "cpus": 4}}}]})
    assert cluster.teams[0].quotas["a100"].cpus == 4
    from gpuspawner.sim.cluster import cluster_document
    assert parse_cluster(cluster_document(cluster)).teams == cluster.teams
    trace = [TraceJob(f"j{i}", "t", "u", 0.0, 1, 100.0, time_limit_s=200.0, cpus=2.0)
             for i in range(8)]
    result = simulate(trace, cluster, get_policy("gpuhub"), check=True)
    assert result.problems == [] and result.metrics["finished"] == 8
    assert result.metrics["makespan_s"] == pytest.approx(400.0)
