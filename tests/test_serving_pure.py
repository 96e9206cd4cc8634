"""Model serving's pure parts as tables: traffic splitting, replica choice,
latency windows, the rollback rule, the autoscaler, replica settings and
the deploy request."""
from __future__ import annotations

import collections
import os

import pytest

from gpuspawner.serving.autoscale import ScalePolicy, desired_replicas, split
from gpuspawner.serving.replica import model_settings, server_settings
from gpuspawner.serving.traffic import (RollbackRule, Series, SmoothWeighted, Window, least_busy,
                                        percentile, rollback_reason)
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.vocab.specs import SpecError


@pytest.mark.parametrize("weights, n, expected", [
    ({1: 80, 2: 20}, 50, {1: 40, 2: 10}),
    ({1: 90, 2: 10}, 10, {1: 9, 2: 1}),
    ({1: 100}, 7, {1: 7}),
    ({1: 50, 2: 50}, 4, {1: 2, 2: 2}),
    ({1: 0, 2: 100}, 5, {2: 5}),
])
def test_smooth_weighted_split_is_exact_over_each_period(weights, n, expected):
    wrr = SmoothWeighted()
    got = collections.Counter(wrr.choose(weights) for _ in range(n))
    assert dict(got) == expected


def test_smooth_weighted_interleaves_rather_than_bunching():
    wrr = SmoothWeighted()
    picks = [wrr.choose({1: 80, 2: 20}) for _ in range(10)]
    assert picks.count(2) == 2 and picks[:5].count(2) == 1


def test_no_weight_no_choice():
    assert SmoothWeighted().choose({1: 0}) is None


@pytest.mark.parametrize("in_flight, ready, expected", [
    ({"a": 3, "b": 1}, ["a", "b"], "b"),
    ({"a": 0, "b": 0}, ["b", "a"], "a"),
    ({"a": 0}, ["b"], "b"),
    ({}, [], None),
])
def test_least_busy(in_flight, ready, expected):
    assert least_busy(in_flight, ready) == expected


def test_window_summary_and_expiry():
    w = Window(seconds=60)
    for i in range(100):
        w.add(1000 + i * 0.1, latency=(i + 1) / 1000, error=(i % 10 == 0))
    s = w.summary(1010)
    assert s["requests"] == 100 and s["error_rate"] == 0.1
    assert s["p50_ms"] == 50.0 and s["p99_ms"] == 99.0
    assert w.summary(1100)["requests"] == 0


def test_series_has_a_point_per_bucket_with_gaps_and_forgets_old_buckets():
    s = Series(interval=5, keep=4)
    for i in range(10):  # 10 requests in the bucket [1000, 1005), one an error
        s.add(1000 + i * 0.4, latency=(i + 1) / 100, error=(i == 3))
    s.replicas(1001, ready=1, in_flight=2)
    s.replicas(1002, ready=2, in_flight=0)
    s.add(1011, latency=0.5, error=False)  # [1010, 1015); [1005, 1010) stays empty
    points = s.points(1012, seconds=15)
    assert [p["t"] for p in points] == [1000, 1005, 1010]
    assert [p["requests"] for p in points] == [10, 0, 1]
    assert points[0]["rps"] == 2.0 and points[0]["error_rate"] == 0.1
    assert points[0]["p50_ms"] == 50.0 and points[0]["p99_ms"] == 100.0
    assert points[0]["ready_replicas"] == 2 and points[0]["in_flight"] == 2
    assert points[1]["p99_ms"] is None and points[1]["rps"] == 0.0
    s.add(1030, latency=0.1, error=False)  # four buckets later: the first one is gone
    assert 200 not in s.buckets and len(s.points(1030, seconds=600)) == 4


@pytest.mark.parametrize("values, p, expected", [([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 99, 4),
                                                 ([7], 99, 7), ([], 50, 0.0)])
def test_percentile(values, p, expected):
    assert percentile(values, p) == expected


@pytest.mark.parametrize("stats, rule, words", [
    ({"requests": 50, "error_rate": 0.2, "p99_ms": 10}, RollbackRule(error_rate=0.05), "error rate 20.0%"),
    ({"requests": 50, "error_rate": 0.0, "p99_ms": 900}, RollbackRule(p99_ms=500), "p99 latency 900 ms"),
    ({"requests": 5, "error_rate": 1.0, "p99_ms": 900}, RollbackRule(error_rate=0.05), None),
    ({"requests": 50, "error_rate": 0.01, "p99_ms": 100}, RollbackRule(0.05, 500), None),
])
def test_rollback_rule(stats, rule, words):
    reason = rollback_reason(stats, rule)
    assert (reason is None) if words is None else (words in reason)


@pytest.mark.parametrize("policy, in_flight, idle, expected", [
    (ScalePolicy(1, 4, 4.0), 0, 0, 1),
    (ScalePolicy(1, 4, 4.0), 9, 0, 3),
    (ScalePolicy(1, 4, 4.0), 100, 0, 4),
    (ScalePolicy(2, 4, 4.0), 1, 0, 2),
    (ScalePolicy(0, 2, 4.0, scale_to_zero_after=60), 0, 61, 0),
    (ScalePolicy(0, 2, 4.0, scale_to_zero_after=60), 0, 30, 1),
    (ScalePolicy(0, 2, 4.0, scale_to_zero_after=60, gpus=1), 0, 600, 1),
])
def test_desired_replicas(policy, in_flight, idle, expected):
    assert desired_replicas(policy, in_flight, idle)[0] == expected


def test_scale_reason_says_why():
    assert "capped at max 4" in desired_replicas(ScalePolicy(1, 4, 4.0), 100, 0)[1]
    assert "scaled to zero" in desired_replicas(ScalePolicy(0, 2, 4.0, 60), 0, 61)[1]


@pytest.mark.parametrize("total, weights, expected", [
    (4, {1: 80, 2: 20}, {1: 3, 2: 1}),
    (1, {1: 90, 2: 10}, {1: 1, 2: 1}),
    (3, {1: 100, 2: 0}, {1: 3, 2: 0}),
    (0, {1: 100}, {1: 0}),
])
def test_replicas_split_by_traffic(total, weights, expected):
    assert split(total, weights) == expected


def test_replica_settings():
    m = model_settings("iris", "/models/iris", "predictor", "p.py:M", 32, 0.01, "r2")
    assert m["implementation"] == "gpuspawner.serving.runtime.PredictorModel"
    assert m["parameters"] == {"uri": "/models/iris", "version": "r2", "extra": {"predictor": "p.py:M"}}
    assert (m["max_batch_size"], m["max_batch_time"]) == (32, 0.01)
    assert "max_batch_size" not in model_settings("iris", "/m", "sklearn", "", 1, 0, "r1")
    s = server_settings(9000)
    assert (s["http_port"], s["grpc_port"], s["metrics_port"], s["host"]) == (9000, 9001, 9002,
                                                                               "127.0.0.1")
    with pytest.raises(ValueError, match="unknown runtime 'onnx'"):
        model_settings("x", "/m", "onnx", "", 1, 0, "r1")


@pytest.mark.parametrize("body, field", [
    ({"model_dir": "m"}, "name"),
    ({"name": "-bad", "model_dir": "m"}, "name"),
    ({"name": "ok"}, "model_dir"),
    ({"name": "ok", "model_dir": "m", "gpus": -1}, "gpus"),
    ({"name": "ok", "model_dir": "m", "canary_percent": 0}, "canary_percent"),
    ({"name": "ok", "model_dir": "m", "scale_to_zero_after": 60}, "scale_to_zero_after"),
    ({"name": "ok", "model_dir": "m", "rollback": {"errors": 1}}, "rollback"),
    ({"name": "ok", "model_dir": "m", "replicas": 2}, "replicas"),
    ({"name": "ok", "model_dir": "m", "runtime": "predictor", "predictor": "nocolon"}, "predictor"),
])
def test_deploy_request_names_the_bad_field(body, field):
    with pytest.raises(SpecError) as e:
        parse_deploy(body, "default")
    assert e.value.field == field


def test_deploy_request_defaults():
    spec = parse_deploy({"name": "iris", "model_dir": "models/iris"}, "a100")
    assert (spec.pool, spec.gpus, spec.min_replicas, spec.max_replicas, spec.runtime) == \
        ("a100", 0, 1, 1, "sklearn")
    zero = parse_deploy({"name": "iris", "model_dir": "m", "min_replicas": 0, "max_replicas": 3,
                         "scale_to_zero_after": 300}, "a100")
    assert zero.scale_to_zero_after == 300.0


def test_ports_for_servers_are_free_and_below_the_ephemeral_range(tmp_path):
    import random
    import socket

    from gpuspawner.serving.ports import ephemeral_start, ports_below_ephemeral
    fake = tmp_path / "range"
    fake.write_text("32768\t60999\n")
    assert ephemeral_start(str(fake)) == 32768
    assert ephemeral_start(str(tmp_path / "missing")) == 32768
    base = ports_below_ephemeral(3, random.Random(7))
    assert 20000 <= base and base + 3 <= ephemeral_start()
    # a taken port is never handed out
    with socket.socket() as s:
        s.bind(("127.0.0.1", base))
        assert ports_below_ephemeral(3, random.Random(7)) != base


def test_bench_finds_processes_by_command_line_and_reads_their_cpu_time():
    import subprocess
    import sys
    import time

    from gpuspawner.serving.bench import _processes, cpu_seconds
    marker = f"gpuhub-bench-marker-{os.getpid()}"
    burner = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\nt = time.process_time()\n"
                               "while time.process_time() - t < 0.3: pass\ntime.sleep(30)",
                               marker])
    try:
        deadline = time.monotonic() + 10
        while not _processes(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes(marker) == [burner.pid]
        while cpu_seconds([burner.pid]) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.3 <= cpu_seconds([burner.pid]) < 5
    finally:
        burner.kill()
        burner.wait()
    assert cpu_seconds([burner.pid]) == 0  # gone: counts nothing


@pytest.mark.parametrize("given, body, sent", [
    (None, b'{"inputs": []}', "application/json"),                               # no header
    ("application/x-www-form-urlencoded", b'{"inputs": []}', "application/json"),  # curl -d
    ("text/plain; charset=utf-8", b'{"inputs": []}', "application/json"),
    ("application/json", b'{"inputs": []}', "application/json"),
    ("application/x-www-form-urlencoded", b"a=1&b=2", "application/x-www-form-urlencoded"),
    ("application/octet-stream", b'{"inputs": []}', "application/octet-stream"),
    (None, None, "application/json"),                                            # a GET
])
def test_endpoint_passes_a_json_body_as_json(given, body, sent):
    from gpuspawner.service.serving.endpoints import request_content_type
    assert request_content_type(given, body) == sent
