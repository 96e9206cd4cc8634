"""Fractional GPUs in the simulator (issue 22): the trace column, the pool
setting, the notebook-heavy generator, and a replay with and without sharing."""
import json

import pytest
import yaml

from gpuspawner.cli import main
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.sim.cluster import ClusterError, cluster_document, parse_cluster
from gpuspawner.sim.simulate import simulate, to_workload
from gpuspawner.sim.trace import (TraceError, TraceJob, generate_notebook_trace, read_trace,
                                  write_trace)

HEADER = "job_id,team,user,submit_time_s,num_gpus,duration_s,num_nodes,gpu_share\n"
ONE_NODE = {"pools": [{"name": "h200", "nodes": 1, "gpus_per_node": 2, "share_units": 4}],
            "teams": [{"name": "t", "quota": {"h200": {"nominal": 2}}}]}


@pytest.mark.parametrize("row, column", [
    pytest.param("n1,t,u,0,1,60,,1.5\n", "gpu_share", id="share-above-one"),
    pytest.param("n1,t,u,0,1,60,,0\n", "gpu_share", id="share-zero"),
    pytest.param("n1,t,u,0,1,60,,half\n", "gpu_share", id="share-not-a-number"),
    pytest.param("n1,t,u,0,2,60,,0.5\n", "num_gpus", id="share-of-two-gpus"),
    pytest.param("n1,t,u,0,1,60,2,0.5\n", "num_nodes", id="share-over-two-nodes"),
])
def test_a_bad_gpu_share_cell_names_its_line_and_column(tmp_path, row, column):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + row)
    with pytest.raises(TraceError, match=f"line 2, column '{column}'"):
        read_trace(path)


def test_gpu_share_round_trips_and_is_written_only_when_used(tmp_path):
    jobs = [TraceJob("n1", "t", "u", 0.0, 1, 60.0, kind="notebook", gpu_share=0.25),
            TraceJob("j1", "t", "u", 1.0, 2, 60.0)]
    write_trace(tmp_path / "a.csv", jobs)
    assert read_trace(tmp_path / "a.csv") == jobs
    write_trace(tmp_path / "b.csv", jobs[1:])
    assert "gpu_share" not in (tmp_path / "b.csv").read_text()


@pytest.mark.parametrize("units, ok", [(0, True), (4, True), (1, False), (-2, False), ("4", False)])
def test_pool_share_units(units, ok):
    data = {"pools": [{"name": "h200", "nodes": 2, "gpus_per_node": 8, "share_units": units}]}
    if not ok:
        with pytest.raises(ClusterError, match="share_units"):
            parse_cluster(data)
        return
    cluster = parse_cluster(data)
    assert {n.share_units for n in cluster.nodes} == {units}
    assert parse_cluster(cluster_document(cluster)).nodes == cluster.nodes


def test_notebook_heavy_trace_adds_share_notebooks_to_the_same_batch_jobs():
    trace = generate_notebook_trace(200, 600, capacity_gpus=64, seed=4)
    again = generate_notebook_trace(200, 600, capacity_gpus=64, seed=4)
    assert trace == again
    notebooks = [j for j in trace if j.kind == "notebook"]
    assert len(notebooks) == 600 and {j.gpu_share for j in notebooks} == {0.25, 0.5}
    assert all(j.num_gpus == 1 and j.time_limit_s is None for j in notebooks)
    batch = [j for j in trace if j.kind != "notebook"]
    assert len(batch) == 200 and not any(j.gpu_share for j in batch)
    assert [j.submit_time_s for j in trace] == sorted(j.submit_time_s for j in trace)


def test_a_share_replayed_without_sharing_asks_a_whole_gpu():
    cluster = parse_cluster(ONE_NODE)
    job = TraceJob("n1", "t", "u", 0.0, 1, 60.0, kind="notebook", gpu_share=0.25)
    assert to_workload(job, cluster).gpu_units == 0.25
    assert to_workload(job, cluster, sharing=False).gpu_units == 1


@pytest.mark.parametrize("sharing, notebook_gpus, job_wait", [
    pytest.param(True, 1, 0.0, id="four-quarters-on-one-gpu"),
    pytest.param(False, 2, 10799.0, id="each-notebook-a-gpu-the-job-waits-for-all"),
])
def test_sharing_frees_a_gpu_for_the_whole_gpu_job(sharing, notebook_gpus, job_wait):
    """Four 1/4 notebooks (two for 1 h, two for 2 h), then a 1-GPU job, on two
    GPUs: shared, the notebooks take one GPU; whole, both, and the job waits."""
    trace = [TraceJob(f"n{i}", "t", "u", 0.0, 1, 3600.0, kind="notebook", gpu_share=0.25)
             for i in range(2)] + \
            [TraceJob(f"n{i}", "t", "u", 0.0, 1, 7200.0, kind="notebook", gpu_share=0.25)
             for i in range(2, 4)] + \
            [TraceJob("job", "t", "u", 1.0, 1, 600.0, time_limit_s=600.0)]
    result = simulate(trace, parse_cluster(ONE_NODE), get_policy("gpuhub"), check=True,
                      sharing=sharing)
    assert not result.problems
    m = result.metrics
    assert m["notebook_peak_gpus"] == notebook_gpus
    assert m["whole_job_p50_wait_s"] == job_wait
    # Two quarters leave after an hour: with sharing, half a GPU stays
    # stranded while nothing whole waits, so it costs nothing here.
    assert m["stranded_gpu_hours"] == 0.0
    assert m["notebook_gpu_hours"] == pytest.approx(2.0 if sharing else 6.0)


def test_cli_trace_notebook_heavy_and_simulate_no_sharing(tmp_path, capsys):
    trace, cluster = tmp_path / "t.csv", tmp_path / "c.yaml"
    assert main(["trace", str(trace), "--kind", "notebook-heavy", "--jobs", "60",
                 "--notebooks", "200", "--capacity", "16", "--load", "1.0"]) == 0
    cluster.write_text(yaml.safe_dump(
        {"pools": [{"name": "h200", "nodes": 2, "gpus_per_node": 8, "share_units": 4}]}))
    capsys.readouterr()
    rows = []
    for extra in ([], ["--no-sharing"]):
        assert main(["simulate", str(trace), "--cluster", str(cluster), "--policy", "gpuhub",
                     "--json", *extra]) == 0
        rows.append(json.loads(capsys.readouterr().out))
    on, off = rows
    assert (on["sharing"], off["sharing"]) == (True, False)
    assert on["notebook_gpu_hours"] < off["notebook_gpu_hours"]
    assert on["notebook_peak_gpus"] < off["notebook_peak_gpus"]
    assert main(["simulate", str(trace), "--cluster", str(cluster), "--policy", "gpuhub"]) == 0
    assert "GPU shares on: notebooks held" in capsys.readouterr().out


def test_cli_trace_notebooks_need_the_notebook_heavy_kind(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "t.csv"), "--notebooks", "5"]) == 2
    assert "--kind notebook-heavy" in capsys.readouterr().err
