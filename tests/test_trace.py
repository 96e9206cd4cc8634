"""Tests for the trace CSV format and the Philly-like generator."""

import statistics
from collections import Counter

import pytest

from gpuspawner.sim.trace import TraceError, TraceJob, generate_philly_trace, read_trace, write_trace

HEADER = "job_id,team,user,submit_time_s,num_gpus,duration_s,time_limit_s,num_nodes\n"
GOOD_ROW = "j1,vision,alice.vision,0,1,60,120,1\n"


def write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, line, column",
    [
        pytest.param("job_id,team,user,submit_time_s,duration_s\nj1,a,u,0,60\n", 1, "num_gpus",
                     id="missing-required-column"),
        pytest.param(HEADER + GOOD_ROW + "j2,a,u,soon,1,60,,\n", 3, "submit_time_s", id="non-numeric-submit"),
        pytest.param(HEADER + "j2,a,u,0,two,60,,\n", 2, "num_gpus", id="non-numeric-gpus"),
        pytest.param(HEADER + "j2,a,u,0,1.5,60,,\n", 2, "num_gpus", id="fractional-gpus"),
        pytest.param(HEADER + "j2,a,u,0,1,nan,,\n", 2, "duration_s", id="nan-duration"),
        pytest.param(HEADER + "j2,a,u,0,0,60,,\n", 2, "num_gpus", id="zero-gpus"),
        pytest.param(HEADER + "j2,a,u,0,-2,60,,\n", 2, "num_gpus", id="negative-gpus"),
        pytest.param(HEADER + "j2,a,u,0,1,0,,\n", 2, "duration_s", id="zero-duration"),
        pytest.param(HEADER + "j2,a,u,0,1,-5,,\n", 2, "duration_s", id="negative-duration"),
        pytest.param(HEADER + "j2,a,u,-1,1,60,,\n", 2, "submit_time_s", id="negative-submit"),
        pytest.param(HEADER + GOOD_ROW + GOOD_ROW, 3, "job_id", id="duplicate-job-id"),
        pytest.param(HEADER + "j2,a,u,0,1,60,,0\n", 2, "num_nodes", id="zero-nodes"),
        pytest.param(HEADER + "j2,a,u,0,1,60,0,\n", 2, "time_limit_s", id="zero-time-limit"),
        pytest.param(HEADER + "j2,a,u,0,1,60,-60,\n", 2, "time_limit_s", id="negative-time-limit"),
        pytest.param(HEADER + "j2,,u,0,1,60,,\n", 2, "team", id="empty-team"),
        pytest.param(HEADER + "j2,a,u,0,1\n", 2, "duration_s", id="short-row"),
    ],
)
def test_read_trace_rejects_bad_input(tmp_path, text, line, column):
    path = write(tmp_path, text)
    with pytest.raises(TraceError) as excinfo:
        read_trace(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert f"line {line}," in message
    assert f"column '{column}'" in message


def test_read_trace_sorts_by_submit_time_keeping_file_order_on_ties(tmp_path):
    path = write(tmp_path, "job_id,team,user,submit_time_s,num_gpus,duration_s,extra\n"
                           "late,a,u,10,1,60,x\nfirst,a,u,5,1,60,x\n\nsecond,a,u,5,2,30,x\n")
    jobs = read_trace(path)
    assert [job.job_id for job in jobs] == ["first", "second", "late"]
    assert jobs[1] == TraceJob("second", "a", "u", 5.0, 2, 30.0)


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param([TraceJob("a", "nlp", "bob.nlp", 0.0, 1, 60.0),
                      TraceJob("b", "nlp", "bob.nlp", 1.25, 8, 3600.5)], id="required-only"),
        pytest.param([TraceJob("a", "nlp", "bob.nlp", 0.0, 16, 7200.0, 9000.0, "a100", "high", 2),
                      TraceJob("b", "ads", "eve.ads", 0.1, 1, 61.0)], id="optional-with-gaps"),
        pytest.param(generate_philly_trace(200, seed=3, gpu_type="h100"), id="generated"),
    ],
)
def test_write_then_read_round_trips(tmp_path, jobs):
    path = tmp_path / "out.csv"
    write_trace(path, jobs)
    assert read_trace(path) == jobs


def test_write_trace_omits_unused_optional_columns(tmp_path):
    path = tmp_path / "out.csv"
    write_trace(path, [TraceJob("a", "nlp", "bob.nlp", 0.0, 1, 60.0, priority="low")])
    assert path.read_text().splitlines() == [
        "job_id,team,user,submit_time_s,num_gpus,duration_s,priority", "a,nlp,bob.nlp,0,1,60,low"]


@pytest.fixture(scope="module")
def big_trace():
    return generate_philly_trace(20_000, seed=7)


def test_generator_is_deterministic_per_seed():
    assert generate_philly_trace(500, seed=1) == generate_philly_trace(500, seed=1)
    assert generate_philly_trace(500, seed=1) != generate_philly_trace(500, seed=2)


@pytest.mark.parametrize(
    "gpus, low, high",
    [(1, 0.66, 0.72), (2, 0.02, 0.04), (4, 0.12, 0.14), (8, 0.115, 0.137), (16, 0.011, 0.021),
     (32, 0.005, 0.012)],
)
def test_generator_gpu_size_shares(big_trace, gpus, low, high):
    share = Counter(job.num_gpus for job in big_trace)[gpus] / len(big_trace)
    assert low <= share <= high


def test_generator_durations_are_heavy_tailed_hours(big_trace):
    durations = [job.duration_s for job in big_trace]
    assert 1.5 * 3600 <= statistics.median(durations) <= 4 * 3600
    assert statistics.mean(durations) > 3 * statistics.median(durations)
    assert 60 <= min(durations) and max(durations) <= 14 * 86400


@pytest.mark.parametrize("load, capacity", [(1.2, 2000), (0.6, 512), (2.0, 64)])
def test_generator_offered_load_matches_target(load, capacity):
    jobs = generate_philly_trace(5_000, seed=11, capacity_gpus=capacity, load=load)
    span = jobs[-1].submit_time_s
    offered = sum(job.num_gpus * job.duration_s for job in jobs) / (capacity * span)
    assert offered == pytest.approx(load, rel=0.10)


def test_generator_job_invariants(big_trace):
    submits = [job.submit_time_s for job in big_trace]
    assert submits == sorted(submits)
    assert len({job.job_id for job in big_trace}) == len(big_trace)
    for job in big_trace:
        assert job.time_limit_s >= job.duration_s and job.time_limit_s % 60 == 0
        assert job.user.endswith("." + job.team)
        assert job.num_nodes == (job.num_gpus // 8 if job.num_gpus > 8 else None)


def test_generator_team_sizes_are_skewed(big_trace):
    counts = Counter(job.team for job in big_trace)
    assert set(counts) == {"vision", "nlp", "speech", "recsys", "robotics", "research", "platform", "ads"}
    biggest_two = sum(n for _, n in counts.most_common(2))
    assert biggest_two > 0.45 * len(big_trace)
    for team in counts:
        assert 3 <= len({job.user for job in big_trace if job.team == team}) <= 10


@pytest.mark.parametrize(
    "teams, expected",
    [(3, ["team00", "team01", "team02"]), (["a", "b"], ["a", "b"])],
)
def test_generator_team_names(teams, expected):
    assert sorted({job.team for job in generate_philly_trace(300, teams=teams)}) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_jobs": -1}, {"teams": 0}, {"teams": ["a", "a"]}, {"teams": []}, {"load": 0},
        {"capacity_gpus": 0}, {"time_limit_factor": (0.5, 2.0)}, {"time_limit_factor": (3.0, 2.0)},
    ],
)
def test_generator_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        generate_philly_trace(**{"num_jobs": 10, **kwargs})
