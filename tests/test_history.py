"""The cluster's history as a trace (sim/history.py): what each workload
becomes, what is left out, the service's start lag, pseudonyms, and the
cluster file written back."""
from __future__ import annotations

import pytest

from gpuspawner.scheduler.model import Node, Quota, Team
from gpuspawner.sim.cluster import Cluster, cluster_document, parse_cluster
from gpuspawner.sim.history import (NEVER_STARTED, NO_GPUS, UNKNOWN_POOL, PastAttempt,
                                    PastWorkload, StartLag, cluster_of, history_trace,
                                    pseudonymise, run_jitter, start_lag)
from gpuspawner.sim.trace import TraceJob, read_trace, write_trace

SINCE, UNTIL = 1000.0, 2000.0


def past(wid="w1", kind="job", gpus=1, nodes=1, submitted=1100.0, attempts=((1110.0, 1170.0),),
         pool="a100", priority="", limit=None, preemptions=0, share=0.0, cpus=0.0, memory=0):
    return PastWorkload(wid, kind, "vision", "alice", pool, gpus, submitted,
                        tuple(PastAttempt(s, e) for s, e in attempts), nodes, priority, limit,
                        preemptions, gpu_share=share, cpus=cpus, memory=memory)


@pytest.mark.parametrize("workload, job", [
    pytest.param(past(limit=3600.0), TraceJob("w1", "vision", "alice", 100.0, 1, 60.0, 3600.0,
                                               "a100"), id="a-job"),
    pytest.param(past(attempts=((1110.0, 1140.0), (1200.0, 1250.0))),
                 TraceJob("w1", "vision", "alice", 100.0, 1, 80.0, None, "a100"),
                 id="run-times-of-the-attempts-add-up"),
    pytest.param(past(kind="notebook", priority="interactive", attempts=((1110.0, None),)),
                 TraceJob("w1", "vision", "alice", 100.0, 1, 890.0, None, "a100", "interactive",
                          kind="notebook"), id="a-session-still-running-counts-until-the-end"),
    pytest.param(past(kind="deployment", gpus=2, nodes=2, priority="production"),
                 TraceJob("w1", "vision", "alice", 100.0, 4, 60.0, None, "a100", "production", 2,
                          kind="deployment"), id="a-replica-on-two-nodes"),
    pytest.param(past(kind="notebook", priority="interactive", share=0.25),
                 TraceJob("w1", "vision", "alice", 100.0, 1, 60.0, None, "a100", "interactive",
                          kind="notebook", gpu_share=0.25), id="a-quarter-of-a-gpu"),
    pytest.param(past(cpus=2.0, memory=6 << 30),
                 TraceJob("w1", "vision", "alice", 100.0, 1, 60.0, None, "a100", cpus=2.0,
                          memory_gib=6.0), id="with-the-cpus-and-memory-it-asked-for"),
    pytest.param(past(attempts=((1110.0, 1110.0),)),
                 TraceJob("w1", "vision", "alice", 100.0, 1, 0.001, None, "a100"),
                 id="an-instant-run-still-ran"),
])
def test_a_workload_becomes_a_trace_job(workload, job):
    history = history_trace([workload], SINCE, UNTIL, ["a100"])
    assert history.jobs == [job] and history.left_out == {}
    outcome = history.outcomes["w1"]
    assert outcome.wait_s == pytest.approx(10.0)
    assert outcome.held[0][0] == pytest.approx(110.0)


@pytest.mark.parametrize("workload, why", [
    pytest.param(past(attempts=()), NEVER_STARTED, id="never-started"),
    pytest.param(past(gpus=0), NO_GPUS, id="no-gpus"),
    pytest.param(past(pool="v100"), UNKNOWN_POOL, id="pool-gone"),
])
def test_what_cannot_be_replayed_is_left_out_and_counted(workload, why):
    history = history_trace([workload, past("w2")], SINCE, UNTIL, ["a100"])
    assert [j.job_id for j in history.jobs] == ["w2"]
    assert history.left_out == {why: 1}


@pytest.mark.parametrize("submitted, kept", [(999.0, False), (1000.0, True), (1999.0, True),
                                             (2000.0, False)])
def test_only_the_periods_submissions_are_in_it(submitted, kept):
    w = past(submitted=submitted, attempts=((submitted + 1, submitted + 5),))
    assert bool(history_trace([w], SINCE, UNTIL, ["a100"]).jobs) == kept


def test_the_trace_is_in_submit_order_and_reads_back_as_written(tmp_path):
    history = history_trace([past("late", submitted=1500.0, attempts=((1500.0, 1600.0),)),
                             past("early", kind="notebook")], SINCE, UNTIL, ["a100"])
    assert [j.job_id for j in history.jobs] == ["early", "late"]
    write_trace(tmp_path / "t.csv", history.jobs)
    assert read_trace(tmp_path / "t.csv") == history.jobs


def attempt(start, end, *gpus):
    return PastAttempt(start, end, tuple(("n1", g) for g in gpus))


@pytest.mark.parametrize("workloads, lag", [
    pytest.param([], StartLag(), id="nothing-ran"),
    pytest.param([PastWorkload("a", "job", "t", "u", "p", 1, 10.0, (attempt(10.1, 20.0, 0),)),
                  PastWorkload("b", "job", "t", "u", "p", 1, 12.0, (attempt(20.3, 30.0, 0),)),
                  PastWorkload("c", "job", "t", "u", "p", 1, 40.0, (attempt(40.05, 50.0, 0),))],
                 StartLag(0.075, 0.3, 2, 1, 0.1, 0.3), id="queued-behind-an-exit-and-on-free-gpus"),
    pytest.param([PastWorkload("a", "job", "t", "u", "p", 1, 0.0, (attempt(0.0, 10.0, 0),)),
                  PastWorkload("b", "job", "t", "u", "p", 1, 0.0, (attempt(0.0, 12.0, 1),)),
                  PastWorkload("gang", "job", "t", "u", "p", 2, 1.0, (attempt(12.5, 20.0, 0, 1),))],
                 StartLag(0.0, 0.5, 2, 1, 0.0, 0.5), id="a-gang-waits-for-the-last-of-its-gpus"),
    pytest.param([PastWorkload("a", "job", "t", "u", "p", 1, 0.0, (attempt(0.0, 10.0, 0),
                                                                   attempt(10.2, 15.0, 0)))],
                 StartLag(0.0, 0.2, 1, 1, 0.0, 0.2), id="a-requeued-attempt-after-its-own-exit"),
])
def test_start_lag_is_the_services_delay_after_a_submission_and_after_an_exit(workloads, lag):
    assert vars(start_lag(workloads)) == pytest.approx(vars(lag))


def named(wid, user, name, *spans):
    return PastWorkload(wid, "job", "t", user, "p", 1, 0.0,
                        tuple(PastAttempt(a, b) for a, b in spans), name=name)


@pytest.mark.parametrize("workloads, jitter", [
    pytest.param([], 0.0, id="nothing"),
    pytest.param([named("a", "u", "train", (0, 10)), named("b", "u", "train", (0, 10.4)),
                  named("c", "u", "train", (0, 9.9))], 0.4, id="one-group"),
    pytest.param([named("a", "u", "train", (0, 10)), named("b", "v", "train", (0, 50)),
                  named("c", "u", "", (0, 1)), named("d", "u", "", (0, 9))], 0.0,
                 id="no-repeats-of-one-user-and-name"),
    pytest.param([named("a", "u", "x", (0, 10)), named("b", "u", "x", (0, 3), (5, 20)),
                  named("c", "u", "x", (0, None)), named("d", "u", "x", (0, 12))], 1.0,
                 id="only-finished-single-attempts"),
])
def test_run_jitter_is_how_much_repeated_work_varied(workloads, jitter):
    assert run_jitter(workloads) == pytest.approx(jitter)


def test_cluster_of_counts_the_gpus_work_can_run_on():
    nodes = [Node("n1", "a100", 8, unhealthy_gpus=frozenset({3}), share_units=4),
             Node("n2", "a100", 8, share_units=4), Node("n3", "a100", 2, healthy=False)]
    cluster = cluster_of(nodes, [Team("vision", {"a100": Quota(4)})])
    assert [(n.name, n.gpus, n.share_units) for n in cluster.nodes] == [("n1", 7, 4), ("n2", 8, 4)]
    assert cluster.capacity == {"a100": 15}


def test_the_cluster_file_reads_back_as_the_same_cluster():
    cluster = Cluster(
        [Node("n1", "a100", 8, {"rack": "r1"}, {"region": "eu"}), Node("n2", "t4", 4,
                                                                        share_units=4)],
        [Team("vision", {"a100": Quota(4, 2, None), "t4": Quota(1)}, 2.0,
              frozenset({"a100"}), {"region": "eu"}), Team("nlp", {"a100": Quota(4, None, 1)})])
    again = parse_cluster(cluster_document(cluster))
    assert again.nodes == cluster.nodes and again.teams == cluster.teams


def test_pseudonyms_agree_between_the_trace_and_the_cluster_file():
    history = history_trace([past("w9", submitted=1100.0), past("w1", submitted=1200.0,
                                                                  attempts=((1200, 1300),))],
                            SINCE, UNTIL, ["a100"])
    cluster = Cluster([Node("gpu-host-7.internal", "a100", 8)],
                      [Team("vision", {"a100": Quota(4)}), Team("nlp", {"a100": Quota(4)})])
    named, renamed = pseudonymise(history, cluster)
    assert [(j.job_id, j.team, j.user) for j in named.jobs] == [
        ("job-000001", "team-2", "user-1"), ("job-000002", "team-2", "user-1")]
    assert [t.name for t in renamed.teams] == ["team-2", "team-1"]  # nlp < vision
    assert [(n.name, n.pool) for n in renamed.nodes] == [("node-1", "a100")]
    assert set(named.outcomes) == {"job-000001", "job-000002"}
    assert named.outcomes["job-000002"].team == "team-2"
    text = repr((named, renamed))
    for real in ("vision", "alice", "w9", "gpu-host-7"):
        assert real not in text
