"""Sweeps and dependencies in the simulator: the trace's ``sweep`` and
``after`` columns, the replay holding a dependent back until its
dependencies are met (and cancelling it when they never will be), and each
sweep's and pipeline's makespan."""
from __future__ import annotations

import pytest

from gpuspawner.cli import main
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.sim.cluster import parse_cluster
from gpuspawner.sim.pipelines import parse_after_cell
from gpuspawner.sim.simulate import simulate
from gpuspawner.sim.trace import TraceError, TraceJob, read_trace, write_trace

CLUSTER = parse_cluster({"pools": [{"name": "a100", "nodes": 1, "gpus_per_node": 2}],
                         "teams": [{"name": "vision", "quota": {"a100": {"nominal": 2}}}]})


def job(jid, duration, sweep=None, after=None, t=0.0, limit=None, gpus=1):
    return TraceJob(jid, "vision", "alice", t, gpus, duration, time_limit_s=limit, sweep=sweep,
                    after=after)


PIPELINE = [job(f"t{i}", 100.0, sweep="lrs") for i in range(4)] + [
    job("evaluate", 50.0, after="lrs"), job("deploy", 30.0, after="evaluate:ok")]


def test_a_pipeline_runs_in_order_and_reports_its_makespans():
    result = simulate(PIPELINE, CLUSTER, get_policy("gpuhub"), check=True)
    records = {r.job_id: r for r in result.records}
    assert records["evaluate"].first_start == 200.0  # after the sweep's two rounds
    assert records["deploy"].first_start == 250.0
    assert result.metrics["sweep_makespan_s"] == {"lrs": 200.0}
    assert result.metrics["pipeline_makespan_s"] == {"lrs": 280.0}
    assert not result.problems


@pytest.mark.parametrize("condition,runs", [("ok", False), ("failed", True), ("any", True)])
def test_a_dependency_that_can_never_be_met_cancels(condition, runs):
    trace = [job("train", 500.0, limit=60.0),            # hits its time limit: failed
             job("next", 10.0, after=f"train:{condition}"), job("then", 10.0, after="next")]
    records = {r.job_id: r for r in simulate(trace, CLUSTER, get_policy("gpuhub")).records}
    assert (records["next"].finish is not None) == runs
    if not runs:
        assert records["next"].rejected == "cancelled: dependency train failed"
        assert records["then"].rejected == "cancelled: dependency next cancelled"


@pytest.mark.parametrize("text,expected", [
    ("a", [{"id": "a", "condition": "ok"}]),
    ("a:any; s1:failed b", [{"id": "a", "condition": "any"}, {"id": "s1", "condition": "failed"},
                            {"id": "b", "condition": "ok"}]),
    ("a:later", ValueError)])
def test_parse_after_cell(text, expected):
    if expected is ValueError:
        with pytest.raises(ValueError):
            parse_after_cell(text)
    else:
        assert parse_after_cell(text) == expected


@pytest.mark.parametrize("jobs,problem", [
    ([job("a", 1.0, after="nope")], "neither a job id nor a sweep"),
    ([job("a", 1.0, after="b"), job("b", 1.0, after="a")], "dependency cycle"),
    ([job("a", 1.0, sweep="s", after="s")], "dependency cycle: a -> s -> a"),
    ([job("a", 1.0, sweep="a")], "both a job id and a sweep name"),
])
def test_a_trace_with_bad_dependencies_is_refused(tmp_path, jobs, problem):
    path = tmp_path / "trace.csv"
    write_trace(path, jobs)
    with pytest.raises(TraceError, match=problem):
        read_trace(path)


def test_the_columns_round_trip_and_the_cli_prints_the_makespans(tmp_path, capsys):
    path = tmp_path / "trace.csv"
    write_trace(path, PIPELINE)
    assert read_trace(path) == PIPELINE
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("pools: [{name: a100, nodes: 1, gpus_per_node: 2}]\n"
                       "teams: [{name: vision, quota: {a100: {nominal: 2}}}]\n")
    assert main(["simulate", str(path), "--cluster", str(cluster), "--policy", "gpuhub"]) == 0
    out = capsys.readouterr().out
    assert "  sweep lrs: makespan 200 s\n" in out and "  pipeline lrs: makespan 280 s\n" in out


def test_the_services_history_carries_its_sweeps_and_dependencies():
    """What the service exports (``gpuhub trace export``, the what-if
    previews) waits in the replay as it did in the service; a target the
    trace does not hold is dropped; pseudonyms rename the references too."""
    from gpuspawner.sim.history import PastAttempt, PastWorkload, history_trace, pseudonymise

    def past(wid, t, sweep=None, after=()):
        return PastWorkload(wid, "job", "vision", "alice", "a100", 1, t,
                            (PastAttempt(t + 1, t + 101),), sweep=sweep, after=after)
    workloads = [past("w1", 10, sweep="s1"), past("w2", 10, sweep="s1"),
                 past("w3", 11, after=(("s1", "ok"), ("wgone", "ok"))),
                 past("w4", 12, after=(("w3", "any"),))]
    history = history_trace(workloads, 0.0, 1000.0, ["a100"])
    by_id = {j.job_id: j for j in history.jobs}
    assert (by_id["w1"].sweep, by_id["w3"].after, by_id["w4"].after) == ("s1", "s1:ok", "w3:any")
    result = simulate(history.jobs, CLUSTER, get_policy("gpuhub"))
    records = {r.job_id: r for r in result.records}
    assert records["w3"].first_start == records["w1"].finish == 110.0
    assert result.metrics["pipeline_makespan_s"] == {"s1": 300.0}
    renamed, _cluster = pseudonymise(history, CLUSTER)
    jobs = {j.job_id: j for j in renamed.jobs}
    assert (jobs["job-000001"].sweep, jobs["job-000003"].after,
            jobs["job-000004"].after) == ("sweep-1", "sweep-1:ok", "job-000003:any")


@pytest.mark.parametrize("gate_ends,first", [(50.0, "dependent"), (200.0, "other")])
def test_a_released_dependent_is_queued_from_its_release_as_the_service_does(gate_ends, first):
    # 2 GPUs; both 2-GPU jobs wait for "hold" (until 300). The dependent was
    # submitted first, but is eligible only once "gate" ends.
    trace = [job("gate", gate_ends), job("hold", 300.0),
             job("dependent", 100.0, after="gate", gpus=2), job("other", 100.0, t=100.0, gpus=2)]
    records = {r.job_id: r for r in simulate(trace, CLUSTER, get_policy("gpuhub"),
                                             check=True).records}
    assert records[first].first_start == 300.0
    assert records["other" if first == "dependent" else "dependent"].first_start == 400.0
