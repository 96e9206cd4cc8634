"""The simulator, cluster file, metrics and the gpuhub CLI, end to end."""
import json

import pytest

from gpuspawner.cli import main
from gpuspawner.scheduler.policy import POLICIES, get_policy
from gpuspawner.sim.cluster import ClusterError, parse_cluster
from gpuspawner.sim.metrics import jain, percentile
from gpuspawner.sim.simulate import SimulationError, simulate, to_workload
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


def test_reclaim_preempts_and_requeued_job_finishes_later_with_restart_cost():
    cluster = parse_cluster({
        "pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 4}],
        "teams": [{"name": "owner", "quota": {"a100": {"nominal": 4}}},
                  {"name": "borrower", "quota": {"a100": {"nominal": 0}}}]})
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
