"""The ``gpuhub`` client commands (submit, ls, logs, cancel, quota, pools,
bench api) and the HTTP client under them.

Pure parts (parsing, formatting, SSE) are table-driven; the log follower's
resume is checked against a scripted local HTTP server; the commands run
in-process (``main([...])``) against one real hub (JupyterHub + proxy +
service, tests/hub_harness.py) shared by the module.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from gpuspawner.bench import api as bench_api
from gpuspawner.cli import build_parser, main
from gpuspawner.cli.common import UsageError, fmt_age, format_table
from gpuspawner.cli.jobs import (build_job_spec, command_payload, format_cancelled, format_quotas,
                                 parse_env_pair, parse_limit, parse_param_value, quota_change,
                                 submitted_note)
from gpuspawner.cli.listing import format_pools, format_workloads, readable_reason, workload_row
from gpuspawner.cli.workdir import command_words, job_directory
from gpuspawner.client import (DEFAULT_URL, ApiError, GpuHubClient, TokenMissing, hub_url_of,
                               iter_lines, iter_sse, normalize_url, resolve_token, resolve_url)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_harness import Hub  # noqa: E402

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def iso(t):
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


# ---- pure: configuration ----------------------------------------------------------------

@pytest.mark.parametrize("given, service", [
    ("http://h:8000", "http://h:8000/services/gpuhub"),
    ("http://h:8000/", "http://h:8000/services/gpuhub"),
    ("http://h:8000/hub/", "http://h:8000/services/gpuhub"),
    ("h:8000", "http://h:8000/services/gpuhub"),
    ("http://h:8000/services/gpuhub/", "http://h:8000/services/gpuhub"),
    ("http://h:8000/services/gpuhub/api/v1", "http://h:8000/services/gpuhub"),
    ("https://gpu.example.org/prefix/services/gpuhub", "https://gpu.example.org/prefix/services/gpuhub"),
])
def test_normalize_url(given, service):
    assert normalize_url(given) == service


@pytest.mark.parametrize("flag, env, expected", [
    ("http://a:1", {"GPUHUB_URL": "http://b:2"}, "http://a:1/services/gpuhub"),
    (None, {"GPUHUB_URL": "http://b:2/services/gpuhub"}, "http://b:2/services/gpuhub"),
    (None, {}, DEFAULT_URL),
])
def test_resolve_url(flag, env, expected):
    assert resolve_url(flag, env) == expected


@pytest.mark.parametrize("flag, env, expected", [
    ("t-flag", {"GPUHUB_TOKEN": "t-env", "JUPYTERHUB_API_TOKEN": "t-nb"}, "t-flag"),
    (None, {"GPUHUB_TOKEN": "t-env", "JUPYTERHUB_API_TOKEN": "t-nb"}, "t-env"),
    (None, {"JUPYTERHUB_API_TOKEN": "t-nb"}, "t-nb"),
    (None, {}, TokenMissing),
    ("", {"GPUHUB_TOKEN": ""}, TokenMissing),
])
def test_resolve_token(flag, env, expected):
    if expected is TokenMissing:
        with pytest.raises(TokenMissing, match="--token.*GPUHUB_TOKEN"):
            resolve_token(flag, env)
    else:
        assert resolve_token(flag, env) == expected


def test_hub_url_of():
    assert hub_url_of("http://h:8000/services/gpuhub/api/v1") == "http://h:8000"
    assert hub_url_of("http://h:8000") == "http://h:8000"


@pytest.mark.parametrize("error, shown", [
    (ApiError(400, "pool: unknown pool 'x'", "pool"), "pool: unknown pool 'x'"),
    (ApiError(400, "must be positive", "gpus"), "gpus: must be positive"),
    (ApiError(403, "forbidden"), "forbidden"),
])
def test_api_error_names_field(error, shown):
    assert str(error) == shown


# ---- pure: server-sent events -----------------------------------------------------------

@pytest.mark.parametrize("chunks, lines", [
    ([b"a\nb\n"], ["a", "b"]),
    ([b"a\r", b"\nb\r\n"], ["a", "b"]),          # CRLF split across chunks
    ([b"a\rb\r"], ["a", "b"]),                   # bare CR
    ([b"\xc3", b"\xa9t\xc3\xa9\n"], ["été"]),     # UTF-8 split across chunks
    ([b"x\n\n", b"y"], ["x", "", "y"]),           # unterminated tail
    ([b"", b"z\n"], ["z"]),
])
def test_iter_lines(chunks, lines):
    assert list(iter_lines(chunks)) == lines


@pytest.mark.parametrize("text, events", [
    ('id: 6\nevent: log\ndata: {"text": "hi"}\n\n',
     [("log", '{"text": "hi"}', "6")]),
    (': comment\ndata: a\ndata: b\n\n', [("message", "a\nb", None)]),
    ('event: end\ndata:{"attempt_state":"failed"}\n\n', [("end", '{"attempt_state":"failed"}', None)]),
    ('event: log\ndata: cut off', []),          # no blank line: never dispatched
    ('event: ping\n\nid: 3\nevent: log\ndata: x\n\n', [("log", "x", "3")]),
])
def test_iter_sse(text, events):
    got = [(e.event, e.data, e.id) for e in iter_sse(iter_lines([text.encode()]))]
    assert got == events


# ---- pure: submit arguments -----------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--", "echo a && echo b"], "echo a && echo b"),
    (["--", "python", "train.py", "--lr", "3"], ["python", "train.py", "--lr", "3"]),
    (["python", "x.py"], ["python", "x.py"]),
    (["--", "--", "x"], ["--", "x"]),
    ([], None),
    (["--"], None),
])
def test_command_payload(argv, expected):
    assert command_payload(argv) == expected


@pytest.mark.parametrize("text, expected", [
    ("A=1", ("A", "1")), ("B=x=y", ("B", "x=y")), ("EMPTY=", ("EMPTY", "")),
    ("novalue", argparse.ArgumentTypeError), ("=v", argparse.ArgumentTypeError),
])
def test_parse_env_pair(text, expected):
    if expected is argparse.ArgumentTypeError:
        with pytest.raises(argparse.ArgumentTypeError):
            parse_env_pair(text)
    else:
        assert parse_env_pair(text) == expected


@pytest.mark.parametrize("text, value", [
    ("3", 3), ("-2", -2), ("0.1", 0.1), ("1e-3", 0.001), ("True", True), ("false", False),
    ("None", None), ("resnet", "resnet"), ("", ""),
])
def test_parse_param_value(text, value):
    assert parse_param_value(text) == value and type(parse_param_value(text)) is type(value)


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("4", 4), ("none", None), ("None", None), ("-1", argparse.ArgumentTypeError),
    ("x", argparse.ArgumentTypeError),
])
def test_parse_limit(text, value):
    if value is argparse.ArgumentTypeError:
        with pytest.raises(argparse.ArgumentTypeError):
            parse_limit(text)
    else:
        assert parse_limit(text) == value


@pytest.mark.parametrize("argv, spec", [
    (["--", "nvidia-smi"], {"command": "nvidia-smi"}),
    (["--gpus", "2", "--nodes", "2", "--pool", "a100", "--time-limit", "2h", "--priority",
      "production", "--team", "a", "--project", "p1", "--name", "run-1", "--workdir", "exp",
      "--env", "A=1", "--env", "B=2", "--checkpoint-dir", "ckpt", "--", "python", "t.py"],
     {"command": ["python", "t.py"], "gpus_per_node": 2, "nodes": 2, "pool": "a100", "time_limit": "2h",
      "priority": "production", "team": "a", "project": "p1", "name": "run-1",
      "working_dir": "exp", "env": {"A": "1", "B": "2"}, "checkpoint_dir": "ckpt"}),
    (["--nodes", "2", "--topology", "required", "--", "python", "t.py"],
     {"command": ["python", "t.py"], "nodes": 2, "topology": "required"}),
    (["--nodes", "4", "--topology", "preferred", "--topology-key", "rack", "--", "x"],
     {"command": "x", "nodes": 4, "topology": "preferred", "topology_key": "rack"}),
    (["--gpus", "0", "--notebook", "nb.ipynb", "-p", "lr", "0.01", "-p", "arch", "resnet"],
     {"notebook": "nb.ipynb", "gpus_per_node": 0, "parameters": {"lr": 0.01, "arch": "resnet"}}),
    (["--gpu-share", "1/4", "--pool", "h200", "--", "python", "t.py"],
     {"command": ["python", "t.py"], "gpu_share": "1/4", "pool": "h200"}),
    (["--gpu-memory", "35GiB", "--", "x"], {"command": "x", "gpu_memory": "35GiB"}),
    (["--gpus", "0", "--cpus", "0.5", "--memory", "2GiB", "--", "x"],
     {"command": "x", "gpus_per_node": 0, "cpus": 0.5, "memory": "2GiB"}),
])
def test_build_job_spec(argv, spec):
    assert build_job_spec(build_parser().parse_args(["submit"] + argv)) == spec


@pytest.mark.parametrize("argv, message", [
    ([], "exactly one"),
    (["--notebook", "nb.ipynb", "--", "echo"], "exactly one"),
    (["-p", "a", "1", "--", "echo"], "only applies to --notebook"),
])
def test_build_job_spec_refuses(argv, message):
    with pytest.raises(UsageError, match=message):
        build_job_spec(build_parser().parse_args(["submit"] + argv))


@pytest.mark.parametrize("team, args, body", [
    (None, ("default", 2, ..., ..., None),
     {"quotas": {"default": {"nominal": 2, "borrowing_limit": None, "lending_limit": None}}}),
    ({"quotas": {"default": {"nominal": 1, "borrowing_limit": 3, "lending_limit": 1}}},
     ("default", 2, ..., ..., None),
     {"quotas": {"default": {"nominal": 2, "borrowing_limit": 3, "lending_limit": 1}}}),
    ({"quotas": {"default": {"nominal": 1, "borrowing_limit": 3, "lending_limit": 1}}},
     ("default", 1, None, 0, None),
     {"quotas": {"default": {"nominal": 1, "borrowing_limit": None, "lending_limit": 0}}}),
    ({"quotas": {"other": {"nominal": 5, "borrowing_limit": 1}}}, ("default", 4, 2, ..., 2.5),
     {"weight": 2.5, "quotas": {"default": {"nominal": 4, "borrowing_limit": 2,
                                            "lending_limit": None}}}),
    (None, (None, None, ..., ..., 3.0), {"weight": 3.0}),
    # CPU and memory ceilings: kept when not given, set, or taken off with none
    ({"quotas": {"default": {"nominal": 1, "cpus": 4.0, "memory": 64 << 30}}},
     ("default", 2, ..., ..., None),
     {"quotas": {"default": {"nominal": 2, "borrowing_limit": None, "lending_limit": None,
                             "cpus": 4.0, "memory": 64 << 30}}}),
    ({"quotas": {"default": {"nominal": 1, "cpus": 4.0, "memory": 64 << 30}}},
     ("default", 1, ..., ..., None, 8.0, None),
     {"quotas": {"default": {"nominal": 1, "borrowing_limit": None, "lending_limit": None,
                             "cpus": 8.0}}}),
    (None, ("default", 0, ..., ..., None, ..., "16G"),
     {"quotas": {"default": {"nominal": 0, "borrowing_limit": None, "lending_limit": None,
                             "memory": "16G"}}}),
])
def test_quota_change_keeps_limits_not_given(team, args, body):
    assert quota_change(team, *args) == body


# ---- pure: formatting -------------------------------------------------------------------------

@pytest.mark.parametrize("seconds, text", [
    (None, "-"), (-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"),
    (3600, "1h00m"), (3 * 3600 + 5 * 60, "3h05m"), (86400, "1d00h"), (2 * 86400 + 4 * 3600, "2d04h"),
])
def test_fmt_age(seconds, text):
    assert fmt_age(seconds) == text


def test_format_table_aligns_columns():
    text = format_table(("A", "LONGER"), [("xx", 1), ("y", "")])
    assert text.splitlines() == ["A   LONGER", "xx  1", "y"]


@pytest.mark.parametrize("width, lines", [
    (None, ["ID  REASON", "w1  waiting for four GPUs to free up", "w2  ok"]),
    (25, ["ID  REASON", "w1  waiting for four GPUs", "    to free up", "w2  ok"]),
    (5, ["ID  REASON", "w1  waiting for four", "    GPUs to free up", "w2  ok"]),  # >= 20 wide
])
def test_format_table_wraps_the_last_column_to_a_width(width, lines):
    rows = [("w1", "waiting for four GPUs to free up"), ("w2", "ok")]
    assert format_table(("ID", "REASON"), rows, width).splitlines() == lines


@pytest.mark.parametrize("reason, text", [
    ("team a is at 3/2 default GPUs and nothing can be borrowed",
     "team a has 3 default GPUs in use, quota 2 (borrowing 1) and nothing can be borrowed"),
    ("team b is at 1/4 a100 GPUs and only 1 can be borrowed; this workload needs 2 more",
     "team b has 1 a100 GPU in use, quota 4 and only 1 can be borrowed; this workload needs 2 "
     "more"),
    ("team a is at 2.25/2 h200 GPUs and nothing can be borrowed",
     "team a has 2.25 h200 GPUs in use, quota 2 (borrowing 0.25) and nothing can be borrowed"),
    ("waiting\nfor  GPUs", "waiting for GPUs"), (None, ""),
])
def test_readable_reason(reason, text):
    assert readable_reason(reason) == text


WORKLOAD = {"id": "w1", "kind": "job", "name": "train", "team": "a", "user": "alice",
            "state": "running", "gpus": 2, "gpus_per_node": 2, "nodes": 1, "pool": "default",
            "reason": "", "submitted_at": iso(NOW - 600), "started_at": iso(NOW - 90),
            "cpus": 1.0, "memory": 8 << 30}
LONG = "waiting for quota: " + "x" * 60


@pytest.mark.parametrize("overrides, expected", [
    ({}, ["w1", "job", "train", "a", "alice", "running", "2", "1/8GiB", "default", "10m", "1m ago", ""]),
    ({"state": "queued", "started_at": None, "name": "", "reason": LONG},
     ["w1", "job", "-", "a", "alice", "queued", "2", "1/8GiB", "default", "10m", "-", LONG]),
    ({"gpus": 16, "gpus_per_node": 8, "nodes": 2},
     ["w1", "job", "train", "a", "alice", "running", "2x8", "1/8GiB", "default", "10m", "1m ago", ""]),
    # a notebook server: its kind, and JupyterHub's default server named
    ({"kind": "notebook", "name": ""},
     ["w1", "notebook", "(default)", "a", "alice", "running", "2", "1/8GiB", "default", "10m", "1m ago", ""]),
    ({"kind": "notebook", "name": "big"},
     ["w1", "notebook", "big", "a", "alice", "running", "2", "1/8GiB", "default", "10m", "1m ago", ""]),
    # preempted and requeued: queued again, so no start time (the first attempt's is past)
    ({"state": "queued", "attempts": [{"started_at": iso(NOW - 90)}], "reason": "preempted"},
     ["w1", "job", "train", "a", "alice", "queued", "2", "1/8GiB", "default", "10m", "-", "preempted"]),
    # running again: the current attempt's start, not the first one's
    ({"attempts": [{"started_at": iso(NOW - 500)}, {"started_at": iso(NOW - 30)}]},
     ["w1", "job", "train", "a", "alice", "running", "2", "1/8GiB", "default", "10m", "30s ago", ""]),
    # queued with a start estimate (squeue --start): expected, and the range
    ({"state": "queued", "started_at": None, "expected_start": {
        "time": iso(NOW + 720), "earliest": iso(NOW + 300), "latest": iso(NOW + 1800)}},
     ["w1", "job", "train", "a", "alice", "queued", "2", "1/8GiB", "default", "10m", "in ~12m (5m-30m)",
      ""]),
    ({"state": "queued", "started_at": None, "expected_start": {
        "time": None, "reason": "it needs GPUs that running work with no time limit holds"}},
     ["w1", "job", "train", "a", "alice", "queued", "2", "1/8GiB", "default", "10m", "unknown", ""]),
    # what it asked for besides GPUs; "-" for one submitted before requests
    ({"gpus": 0, "gpus_per_node": 0, "cpus": 0.5, "memory": 512 << 20},
     ["w1", "job", "train", "a", "alice", "running", "0", "0.5/512MiB", "default", "10m",
      "1m ago", ""]),
    ({"cpus": None, "memory": None},
     ["w1", "job", "train", "a", "alice", "running", "2", "-", "default", "10m", "1m ago", ""]),
])
def test_workload_row(overrides, expected):
    assert workload_row(dict(WORKLOAD, **overrides), NOW) == expected


def test_format_workloads():
    lines = format_workloads([WORKLOAD, dict(WORKLOAD, id="w22", state="queued")], NOW).splitlines()
    assert lines[0].split() == ["ID", "KIND", "NAME", "TEAM", "USER", "STATE", "GPUS", "CPU/MEM",
                                "POOL", "AGE", "START", "REASON"]
    assert lines[1].split()[:6] == ["w1", "job", "train", "a", "alice", "running"]
    assert lines[2].split()[0] == "w22"
    assert format_workloads([], NOW) == "No workloads."


def test_format_workloads_keeps_the_whole_reason():
    reason = ("team a has 2 default GPUs in use, quota 2 and only 1 can be borrowed; this "
              "workload needs 2 more")
    queued = dict(WORKLOAD, state="queued", reason=reason)
    one_line = format_workloads([queued], NOW).splitlines()
    assert len(one_line) == 2 and one_line[1].endswith(reason)
    wrapped = format_workloads([queued], NOW, width=100).splitlines()
    assert len(wrapped) > 2 and all(len(line) <= 100 for line in wrapped)
    column = wrapped[0].index("REASON")
    assert " ".join(line[column:] for line in wrapped[1:]) == queued["reason"]


@pytest.mark.parametrize("pool, row", [
    ({"name": "default", "capacity": 4, "total": 4, "used": 3, "free": 1, "queued_workloads": 2,
      "queued_gpus": 5, "teams": {"b": 1, "a": 2}},
     ["default", "4", "3", "1", "2", "(5", "GPUs)", "a=2,", "b=1"]),
    ({"name": "a100", "capacity": 7, "total": 8, "used": 0, "free": 7, "queued_workloads": 0,
      "queued_gpus": 0, "teams": {}},
     ["a100", "7", "of", "8", "0", "7", "0", "-"]),
])
def test_format_pools(pool, row):
    lines = format_pools([pool]).splitlines()
    assert lines[0].split() == ["POOL", "CAPACITY", "USED", "FREE", "QUEUED", "TEAMS"]
    assert lines[1].split() == row


@pytest.mark.parametrize("team, rows", [
    ({"name": "a", "weight": 1.0, "quotas": {"default": {"nominal": 2, "borrowing_limit": 2,
                                                          "lending_limit": None, "used": 1}}},
     [["a", "default", "1", "2", "2", "none", "1", "0/none", "0/none"]]),
    ({"name": "b", "weight": 2.5, "quotas": {"y": {"nominal": 0, "borrowing_limit": None,
                                                    "lending_limit": 0, "used": 0},
                                              "x": {"nominal": 8, "borrowing_limit": None,
                                                    "lending_limit": None, "used": 8}}},
     [["b", "x", "2.5", "8", "none", "none", "8", "0/none", "0/none"],
      ["b", "y", "2.5", "0", "none", "0", "0", "0/none", "0/none"]]),
    ({"name": "c", "weight": 1.0, "quotas": {}},
     [["c", "-", "1", "-", "-", "-", "-", "-", "-"]]),
    ({"name": "d", "weight": 1.0, "quotas": {"p": {"nominal": 0, "used": 0, "cpus": 4.0,
                                                   "used_cpus": 2.5, "memory": 64 << 30,
                                                   "used_memory": 8 << 30}}},
     [["d", "p", "1", "0", "none", "none", "0", "2.5/4", "8GiB/64GiB"]]),
])
def test_format_quotas(team, rows):
    lines = format_quotas([team]).splitlines()
    assert lines[0].split() == ["TEAM", "POOL", "WEIGHT", "NOMINAL", "BORROWING", "LENDING", "USED",
                                "CPUS", "MEMORY"]
    assert [line.split() for line in lines[1:]] == rows


@pytest.mark.parametrize("w, text", [
    ({"id": "w1", "state": "cancelled", "reason": "cancelled"}, "w1 cancelled"),
    ({"id": "w2", "state": "stopping", "reason": "cancel requested; stopping"},
     "w2 stopping: cancel requested; stopping"),
])
def test_format_cancelled(w, text):
    assert format_cancelled(w) == text


@pytest.mark.parametrize("values, p, expected", [
    ([], 50, 0.0), ([5.0], 99, 5.0), ([1, 2, 3, 4], 50, 2.5), ([3, 1, 2], 50, 2.0),
    (list(range(101)), 99, 99.0), ([1, 2], 100, 2.0),
])
def test_percentile(values, p, expected):
    assert bench_api.percentile(values, p) == pytest.approx(expected)


def test_bench_rows_and_ratios():
    rows = bench_api.add_ratios([
        bench_api.summarize("GET /hub/api/user (baseline)", [0.002] * 10, 0.01, 0, 2),
        bench_api.summarize("POST /workloads (submit)", [0.004] * 10, 0.02, 1, 2)])
    assert rows[0]["rps"] == 1000 and rows[1]["rps"] == 500
    assert rows[1]["rps_vs_baseline"] == 0.5 and rows[1]["p50_vs_baseline"] == 2.0
    lines = bench_api.format_rows(rows).splitlines()
    assert len(lines) == 3 and "0.50x" in lines[2] and "2.00x" in lines[2]
    assert "p99 vs hub page" not in lines[0]  # no hub page measured: no such column


def test_bench_rows_compare_the_p99_with_the_hubs_own_page_where_it_was_measured():
    rows = bench_api.add_ratios([
        bench_api.summarize("GET /hub/api/user (baseline)", [0.002] * 10, 0.01, 0, 2),
        bench_api.summarize("GET /hub/api/users (the hub's page of 50)", [0.008] * 10, 0.04, 0, 2),
        bench_api.summarize("GET /workloads?limit=50 (list)", [0.012] * 10, 0.06, 0, 2)])
    assert [r["p99_vs_baseline"] for r in rows] == [1.0, 4.0, 6.0]
    assert [r["p99_vs_hub_page"] for r in rows] == [0.25, 1.0, 1.5]
    header, *lines = bench_api.format_rows(rows).splitlines()
    assert "p99 vs hub page" in header and "1.50x" in lines[2]


def test_bench_rows_say_how_much_their_load_slowed_the_hub_beside_them():
    """The hub's p99 beside each row over its p99 beside the baseline's: a
    row slower than the baseline while the hub beside it is not is slow in
    the service, not on the machine."""
    rows = [bench_api.summarize("GET /hub/api/user (baseline)", [0.002] * 10, 0.01, 0, 2),
            bench_api.summarize("POST /workloads (submit)", [0.010] * 10, 0.05, 0, 2)]
    rows[0]["hub_beside_p99_ms"], rows[1]["hub_beside_p99_ms"] = 4.0, 6.0
    rows = bench_api.add_ratios(rows)
    assert [r["hub_beside_vs_baseline"] for r in rows] == [1.0, 1.5]
    header, *lines = bench_api.format_rows(rows).splitlines()
    assert "hub beside: p99 ms" in header and "6.0" in lines[1] and "1.50x" in lines[1]


def test_bench_rows_say_how_long_the_services_cheapest_request_waited_beside_them():
    """A row of costly pages holds the service's one event loop: GET /me
    asked beside it waits behind them (the row's own latency does not show
    what a cheap request meanwhile waited)."""
    rows = [bench_api.summarize("GET /hub/api/user (baseline)", [0.002] * 10, 0.01, 0, 2),
            bench_api.summarize("GET /workloads, the Jobs panel's", [0.010] * 10, 0.05, 0, 2)]
    rows[0]["me_beside_p99_ms"], rows[1]["me_beside_p99_ms"] = 3.5, 48.25
    header, baseline, panel = bench_api.format_rows(bench_api.add_ratios(rows)).splitlines()
    assert header.endswith("/me beside: p99 ms")
    assert baseline.endswith(" 3.5") and panel.endswith(" 48.2")


@pytest.mark.parametrize("stalls, longest, causes, said", [
    (0, 0.0, {"waiting_for_cpu": 0.0, "running": 0.0, "waiting_other": 0.0}, "none"),
    (12, 75.0, {"waiting_for_cpu": 100.0, "running": 790.0, "waiting_other": 110.0},
     "12, longest ≤ 75 ms, 79% running on the loop"),
    (3, 150.0, {"waiting_for_cpu": 200.0, "running": 50.0, "waiting_other": 0.0},
     "3, longest ≤ 150 ms, 80% waiting for a CPU"),
    (2, 100.0, {}, "2, longest ≤ 100 ms"),  # a service that does not divide them
])
def test_bench_rows_say_the_loops_stalls_and_their_largest_cause(stalls, longest, causes, said):
    rows = [bench_api.summarize("GET /hub/api/user (baseline)", [0.002] * 10, 0.01, 0, 2),
            bench_api.summarize("GET /workloads?limit=50 (list)", [0.010] * 10, 0.05, 0, 2)]
    rows[1].update(loop_stalls_over_50ms=stalls, loop_stall_max_ms=longest,
                   stall_causes_ms=causes)
    header, baseline, listing = bench_api.format_rows(bench_api.add_ratios(rows)).splitlines()
    assert header.endswith("loop stalls > 50 ms")
    assert listing.endswith(f"  {said}") and baseline.endswith("  none")


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8000", True), ("http://localhost:8000", True), ("http://[::1]:8000", True),
    ("http://10.1.2.3:8000", False), ("http://192.0.2.1", False),
])
def test_is_loopback(url, local):
    assert bench_api.is_loopback(url) is local


# ---- the log follower against a scripted server ---------------------------------------------

LOG = "/services/gpuhub/api/v1/workloads/w1/logs"
ONE = "/services/gpuhub/api/v1/workloads/w1"


def sse(*events):
    out = ""
    for kind, data, eid in events:
        out += (f"id: {eid}\n" if eid is not None else "") + f"event: {kind}\n" \
               f"data: {json.dumps(data)}\n\n"
    return out.encode()


class Scripted:
    """A local HTTP server answering the logs endpoint from a script: each
    item is (body bytes, how): 'close' ends after the body (HTTP/1.0),
    'short' sends it as one chunk of a chunked body that never ends (the
    connection breaks mid-stream)."""

    def __init__(self, logs, workloads):
        self.logs, self.workloads, self.seen = list(logs), list(workloads), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                outer.seen.append((path, self.path, self.headers.get("Last-Event-ID")))
                if path == LOG:
                    body, how = outer.logs.pop(0)
                    if how == "short":
                        self.protocol_version = "HTTP/1.1"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    if how == "short":
                        self.send_header("Transfer-Encoding", "chunked")
                        body = b"%x\r\n%s\r\n" % (len(body), body)  # no last chunk
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                    self.close_connection = True
                elif path == ONE:
                    w = outer.workloads.pop(0) if len(outer.workloads) > 1 else outer.workloads[0]
                    data = json.dumps(w).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("how", ["close", "short"])
def test_follow_resumes_with_last_event_id(how):
    first = sse(("log", {"text": "hello\n"}, 6)) + b'id: 12\nevent: log\ndata: {"te'
    second = sse(("log", {"text": "world\n"}, 12), ("end", {"attempt_state": "succeeded"}, None))
    srv = Scripted([(first, how), (second, "close")],
                   [{"id": "w1", "state": "succeeded", "attempt": 0}])
    try:
        client = GpuHubClient(srv.url, "tok")
        assert "".join(client.follow_logs("w1")) == "hello\nworld\n"
        assert client.last_attempt_state == "succeeded"
        logs = [s for s in srv.seen if s[0] == LOG]
        assert [s[2] for s in logs] == [None, "6"]
        assert all("follow=true" in s[1] and "attempt=0" in s[1] for s in logs)
    finally:
        srv.close()


def test_follow_waits_while_queued_and_moves_to_requeued_attempt():
    srv = Scripted(
        [(sse(("end", {"attempt_state": "queued"}, None)), "close"),
         (sse(("log", {"text": "a0\n"}, 3), ("end", {"attempt_state": "preempted"}, None)), "close"),
         (sse(("log", {"text": "a1\n"}, 3), ("end", {"attempt_state": "succeeded"}, None)), "close")],
        [{"id": "w1", "state": "queued", "attempt": 0, "reason": "waiting for GPUs"},
         {"id": "w1", "state": "queued", "attempt": 0, "reason": "waiting for GPUs"},
         {"id": "w1", "state": "queued", "attempt": 1, "reason": "preempted"},
         {"id": "w1", "state": "succeeded", "attempt": 1}])
    notes = []
    try:
        client = GpuHubClient(srv.url, "tok")
        out = "".join(client.follow_logs("w1", poll_interval=0.01, notify=notes.append))
        assert out == "a0\na1\n"
        assert client.last_attempt_state == "succeeded"
        attempts = [re.search(r"attempt=(\d+)", s[1]).group(1) for s in srv.seen if s[0] == LOG]
        assert attempts == ["0", "0", "1"]
        assert any("waiting for GPUs" in n for n in notes)
        assert any("following attempt 1" in n for n in notes)
    finally:
        srv.close()


def test_follow_gives_up_when_the_server_is_gone():
    client = GpuHubClient("http://127.0.0.1:9", "tok", timeout=1)
    with pytest.raises(ApiError, match="cannot reach"):
        list(client.follow_logs("w1", attempt=0, max_retries=1))


# ---- end to end: the commands against a real hub -----------------------------------------------

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("hub")),
            groups={"team-a": ["alice"], "team-b": ["bob"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}},
                   "b": {"quotas": {"default": {"nominal": 2}}}},
            gpus=4)
    try:
        h.start()
        yield h
    finally:
        h.stop()


@pytest.fixture
def svc(hub):
    return hub.url + "/services/gpuhub"


@pytest.fixture(autouse=True)
def no_env_config(monkeypatch):
    for name in ("GPUHUB_URL", "GPUHUB_TOKEN", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def run(capsys, *argv):
    """main([...]) in-process: (exit code, stdout, stderr)."""
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def as_user(hub, svc, user):
    return ["--url", svc, "--token", hub.token(user)]


def test_submit_ls_logs_follow(hub, svc, capsys):
    alice = as_user(hub, svc, "alice")
    rc, out, err = run(capsys, "submit", *alice, "--name", "hello", "--gpus", "1", "--",
                       "sh", "-c", "echo hello-from-job; sleep 2; echo done-$((40+2))")
    assert rc == 0, err
    wid = out.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", wid)

    rc, out, err = run(capsys, "ls", *alice, "--kind", "job", "--wide")
    assert rc == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines[0][:6] == ["ID", "KIND", "NAME", "TEAM", "USER", "STATE"]
    mine = [row for row in lines if row[0] == wid]
    assert mine and mine[0][1:5] == ["job", "hello", "a", "alice"]
    assert mine[0][5] in ("queued", "running")

    t0 = time.monotonic()
    rc, out, err = run(capsys, "logs", "-f", *alice, wid)
    assert rc == 0, err
    assert out == "hello-from-job\ndone-42\n"
    assert time.monotonic() - t0 < 20

    rc, out, _ = run(capsys, "ls", *alice, "--all", "--json")
    w = [w for w in json.loads(out)["workloads"] if w["id"] == wid][0]
    assert w["state"] == "succeeded" and w["name"] == "hello"
    rc, out, _ = run(capsys, "ls", *alice, "--state", "succeeded")
    assert wid in out
    rc, out, _ = run(capsys, "ls", *alice)  # finished: not among the active ones
    assert wid not in out
    rc, out, _ = run(capsys, "logs", *alice, "--attempt", "0", wid)
    assert rc == 0 and out == "hello-from-job\ndone-42\n"


def test_ls_pages_through_the_service_by_its_cursor(hub, svc, capsys):
    alice = as_user(hub, svc, "alice")
    made = []
    for i in range(3):
        rc, out, err = run(capsys, "submit", *alice, "--project", "pages", "--name", f"p{i}",
                           "--", "true")
        assert rc == 0, err
        made.append(out.strip())
    rc, out, err = run(capsys, "ls", *alice, "--all", "--project", "pages", "--limit", "2",
                       "--json")
    first = json.loads(out)
    assert rc == 0 and [w["id"] for w in first["workloads"]] == made[:0:-1]  # newest first
    assert first["next_cursor"]
    rc, out, err = run(capsys, "ls", *alice, "--all", "--project", "pages", "--cursor",
                       first["next_cursor"], "--json")
    rest = json.loads(out)
    assert [w["id"] for w in rest["workloads"]] == made[:1] and rest["next_cursor"] is None
    rc, out, err = run(capsys, "ls", *alice, "--cursor", "not-a-cursor")
    assert rc == 1 and "cursor: is not a cursor this list gave" in err


@pytest.mark.parametrize("command, rc_expected, text", [
    (["echo ok-$((1+1))"], 0, "ok-2\n"),                # one string: run by the shell
    (["sh", "-c", "echo failing; exit 3"], 1, "failing\n"),
])
def test_submit_follow_exit_code_is_the_jobs_success(hub, svc, capsys, command, rc_expected,
                                                      text):
    rc, out, err = run(capsys, "submit", *as_user(hub, svc, "alice"), "--gpus", "0",
                       "--follow", "--", *command)
    assert rc == rc_expected, err
    wid, _, logs = out.partition("\n")
    assert logs == text
    if rc_expected:
        assert f"{wid} failed" in err and "code 3" in err


def test_cancel_long_job(hub, svc, capsys):
    alice = as_user(hub, svc, "alice")
    rc, out, err = run(capsys, "submit", *alice, "--gpus", "1", "--", "sleep", "60")
    assert rc == 0, err
    wid = out.strip()
    hub.client("alice").wait(wid, "running", timeout=15)
    rc, out, err = run(capsys, "cancel", *alice, wid)
    assert rc == 0, err
    assert out.startswith(wid)
    w = hub.client("alice").wait(wid, "cancelled", timeout=15)
    assert w["state"] == "cancelled"
    # Cancelling it again, or an unknown id: the server's message, exit 1.
    rc, out, err = run(capsys, "cancel", *alice, wid, "wdoesnotexist")
    assert rc == 1
    assert f"gpuhub cancel: {wid}: workload {wid} has already cancelled" in err
    assert "gpuhub cancel: wdoesnotexist: no workload wdoesnotexist" in err


def test_pools_and_quota(hub, svc, capsys):
    alice = as_user(hub, svc, "alice")
    rc, out, err = run(capsys, "pools", *alice)
    assert rc == 0, err
    header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    assert header == ["POOL", "CAPACITY", "USED", "FREE", "QUEUED", "TEAMS"]
    assert row[0] == "default" and row[1] == "4"
    assert int(row[2]) + int(row[3]) == 4

    rc, out, err = run(capsys, "quota", *alice)
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[:6] for r in rows] == [["a", "default", "1", "2", "2", "none"]]  # b is not hers

    rc, out, _ = run(capsys, "quota", *alice, "a", "--json")
    assert json.loads(out)["quotas"]["default"]["nominal"] == 2
    rc, out, _ = run(capsys, "pools", *alice, "--json")
    assert json.loads(out)["pools"][0]["capacity"] == 4

    rc, out, _ = run(capsys, "quota", *as_user(hub, svc, "root-admin"))
    assert {line.split()[0] for line in out.splitlines()[1:]} >= {"a", "b"}


def test_quota_set_is_admin_only_and_keeps_limits(hub, svc, capsys):
    admin = as_user(hub, svc, "root-admin")
    rc, out, err = run(capsys, "quota", "set", "c", *admin, "--pool", "default", "--nominal",
                       "1", "--borrowing-limit", "3", "--weight", "2")
    assert rc == 0, err
    assert out.splitlines()[1].split()[:6] == ["c", "default", "2", "1", "3", "none"]
    rc, out, err = run(capsys, "quota", "set", "c", *admin, "--pool", "default", "--nominal", "2")
    assert rc == 0, err
    assert out.splitlines()[1].split()[:6] == ["c", "default", "2", "2", "3", "none"]
    rc, out, err = run(capsys, "quota", "set", "c", *admin, "--pool", "default", "--nominal", "2",
                       "--borrowing-limit", "none", "--lending-limit", "1")
    assert out.splitlines()[1].split()[:6] == ["c", "default", "2", "2", "none", "1"]

    rc, out, err = run(capsys, "quota", "set", "a", *as_user(hub, svc, "alice"), "--pool",
                       "default", "--nominal", "4")
    assert rc == 1 and err.startswith("gpuhub quota: ") and "custom:gpuhub:admin" in err
    rc, out, err = run(capsys, "quota", "set", "c", *admin, "--nominal", "2")
    assert rc == 2 and "need --pool" in err
    rc, out, err = run(capsys, "quota", "set", "c", *admin, "--pool", "nope", "--nominal", "1")
    assert rc == 1 and "quotas.nope" in err and "unknown pool" in err


def test_unknown_pool_prints_the_servers_message(hub, svc, capsys):
    rc, out, err = run(capsys, "submit", *as_user(hub, svc, "alice"), "--pool", "nope", "--",
                       "true")
    assert rc == 1 and out == ""
    assert err.strip() == "gpuhub submit: pool: unknown pool 'nope'; known pools: default"


@pytest.mark.parametrize("argv, rc_expected, message", [
    (["ls"], 2, "gpuhub ls: no API token: pass --token"),
    (["pools", "--token", "not-a-real-token"], 1, "gpuhub pools: authentication required"),
])
def test_token_errors(hub, svc, capsys, argv, rc_expected, message):
    rc, out, err = run(capsys, *argv, "--url", svc)
    assert rc == rc_expected and out == ""
    assert err.startswith(message)


def test_environment_and_bare_hub_url(hub, svc, capsys, monkeypatch):
    monkeypatch.setenv("GPUHUB_URL", hub.url)            # the hub's URL is enough
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token("bob"))
    rc, out, err = run(capsys, "quota")
    assert rc == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["b"]


def test_unreachable_and_usage_errors(capsys):
    rc, out, err = run(capsys, "ls", "--url", "http://127.0.0.1:9", "--token", "t")
    assert rc == 1 and err.startswith("gpuhub ls: cannot reach http://127.0.0.1:9/")
    rc, out, err = run(capsys, "submit", "--url", "http://127.0.0.1:9", "--token", "t")
    assert rc == 2 and "exactly one" in err
    rc, out, err = run(capsys, "ls", "--state", "sleeping")
    assert rc == 2 and "invalid choice" in err


@pytest.mark.parametrize("argv, message", [
    (["--start-hub", "--queued", "10", "--fill-clients", "0"], "--fill-clients must be 1..256"),
    (["--start-hub", "--queued", "10", "--fill-clients", "257"], "--fill-clients must be 1..256"),
    (["--queued", "10"], "--queued needs --start-hub"),
    (["--requests", "0"], "--requests must be 1..100000"),
])
def test_bench_api_refuses_bad_options_before_starting_anything(capsys, argv, message):
    rc, out, err = run(capsys, "bench", "api", *argv)
    assert rc == 2 and err.startswith(f"gpuhub bench: {message}"), err


def test_bench_api_smoke(hub, capsys):
    rc, out, err = run(capsys, "bench", "api", "--url", hub.url, "--token", hub.token("alice"),
                       "--requests", "20", "--concurrency", "4", "--json")
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"].split(" (")[0] for r in rows] == [
        "GET /hub/api/user", "GET /workloads?limit=50", "GET /me",
        "GET /workloads, the Jobs panel's", "POST /workloads"]  # submits last: their jobs start
    assert all(r["rps"] > 0 and r["requests"] == 20 and r["errors"] == 0 for r in rows)
    assert rows[0]["rps_vs_baseline"] == 1.0 and rows[1]["rps_vs_baseline"] > 0


def test_bench_rows_say_what_a_request_cost_the_service_and_the_hub(hub):
    """On a hub whose processes are on this machine, each row says the CPU
    per request of the service's process and of the hub's. The service's
    list costs it more than the hub's own request does (which costs the hub),
    whatever else the shared hub's service is doing meanwhile."""
    rows = bench_api.run_api_bench(hub.url, hub.token("alice"), n=100, concurrency=4,
                                   cpu=bench_api.process_cpu(hub),
                                   stalls=bench_api.service_stalls(hub.url,
                                                                   hub.token("root-admin")))
    by_name = {r["name"].split(" (")[0]: r for r in rows}
    baseline, listing = by_name["GET /hub/api/user"], by_name["GET /workloads?limit=50"]
    assert baseline["hub_cpu_ms"] > 0.1, baseline  # 100 answers: well over 10 ms
    assert listing["service_cpu_ms"] > baseline["service_cpu_ms"], (listing, baseline)
    assert all(r["service_cpu_ms"] >= 0 and r["hub_cpu_ms"] >= 0 for r in rows), rows
    # The hub, and the service's GET /me, were asked beside every row, while it ran (Beside).
    assert all(r[f"{who}_beside_requests"] > 0 and r[f"{who}_beside_p99_ms"] > 0
               for r in rows for who in ("hub", "me")), rows
    # ... and the service's loop stalls while it ran (from its metrics)
    assert all(r["loop_stalls_over_50ms"] >= 0 and
               set(r["stall_causes_ms"]) == {"waiting_for_cpu", "running", "waiting_other"}
               for r in rows), rows
    header, *lines = bench_api.format_rows(rows).splitlines()
    assert "CPU ms/req: service" in header and len(lines) == len(rows)
    assert "loop stalls > 50 ms" in header and "/me beside: p99 ms" in header


def test_the_hubs_own_page_is_measured_only_where_the_token_may_list_users(hub):
    """A user's token may not list the hub's users: no such row (and no
    errors in the table); a token with ``list:users`` (the harness's admin
    service, as the temporary hub's bench user has) gets the hub's page,
    named with how many users it returned."""
    from hub_harness import ADMIN_TOKEN
    assert bench_api.hub_page_row(hub.url, hub.token("alice")) is None
    name, method, url, expect, body = bench_api.hub_page_row(hub.url, ADMIN_TOKEN)
    users = requests.get(hub.url + "/hub/api/users",
                         headers={"Authorization": f"token {ADMIN_TOKEN}"}).json()
    assert name == f"GET /hub/api/users (the hub's page of {min(50, len(users))})"
    assert (method, url, expect) == ("GET", hub.url + "/hub/api/users?limit=50", 200)
    assert {"alice", "bob"} <= {u["name"] for u in users}


def test_job_turnover_follows_every_job_to_its_end_and_says_what_it_cost(hub):
    from gpuspawner.bench import turnover
    token = hub.token("bob")
    row = turnover.job_turnover(hub, token, bench_api.BENCH_JOB["project"], bench_api.submitter(
        hub.url, token, dict(bench_api.BENCH_JOB, team="b"), 3), n=12, timeout=120)
    assert row["errors"] == 0 and row["jobs"] == 12, row
    assert row["all_ended_s"] >= row["submitted_s"] > 0
    # the service started 12 processes; the hub made no token for them
    assert 0 <= row["hub_cpu_ms_per_job"] < row["service_cpu_ms_per_job"], row
    # the runners (a fork of the runner server each, reaped by it) are counted
    assert row["service_cpu_ms_per_job"] > row["service_own_cpu_ms_per_job"] + 5, row
    assert "all ended" in turnover.format_turnover(row)
    assert turnover.format_turnover({"name": "job turnover", "errors": 1,
                                     "error": "earlier jobs did not end"}).endswith(
        "earlier jobs did not end")


def test_the_queued_start_row_times_each_job_to_running_and_leaves_none_behind(hub):
    from gpuspawner.bench import admission
    api = hub.url + "/services/gpuhub/api/v1"
    client = hub.client("bob")
    row = admission.queued_start_row(api, hub.token("bob"), "b", queued=0, runs=3)
    assert row["name"] == "job submit to running, 0 GPUs, 0 queued" and row["runs"] == 3
    assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"] < 60, row
    assert "median" in bench_api.format_extra([row])
    # each of its jobs was cancelled once it ran
    mine = client.get("/workloads", params={"state": ["queued", "running"]}).json()["workloads"]
    assert not [w for w in mine if w["name"] == "gpuhub-bench-start"]


@pytest.mark.parametrize("w, following, says", [
    ({"id": "j1", "state": "queued", "reason": "queued", "queue_position": None}, False,
     "j1 queued; follow it with `gpuhub logs -f j1` (or submit with -f)"),
    ({"id": "j2", "state": "queued", "reason": "team a holds 2 of its 2 GPUs",
      "queue_position": 3}, False,
     "j2 queued, position 3 in the team's queue: team a holds 2 of its 2 GPUs; follow it with "
     "`gpuhub logs -f j2` (or submit with -f)"),
    ({"id": "j3", "state": "queued", "reason": ""}, True,
     "j3 queued; following its log (Ctrl-C stops following, not the job)"),
    ({"id": "j4", "state": "queued", "reason": "waiting for 2 × default GPUs",
      "queue_position": 1, "expected_start": {
          "time": "…", "text": "expected to start in ~12 min (between 5 min and 30 min)"}}, False,
     "j4 queued, position 1 in the team's queue, expected to start in ~12 min (between 5 min "
     "and 30 min): waiting for 2 × default GPUs; follow it with `gpuhub logs -f j4` (or submit "
     "with -f)"),
])
def test_submit_tells_the_state_and_how_to_follow(w, following, says):
    assert submitted_note(w, following) == says


# ---- where a submitted job runs, seen from the shell that submits it ---------------------------

@pytest.fixture
def places(tmp_path):
    """A workspace (with sub/ and its own examples/shared.py) and, outside
    it, a repository with examples/x.py and examples/shared.py; a link to
    the workspace."""
    ws, repo = tmp_path / "ws", tmp_path / "repo"
    for path in (ws / "sub" / "x.py", ws / "examples" / "shared.py",
                 repo / "examples" / "x.py", repo / "examples" / "shared.py"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("print('hi')\n")
    (tmp_path / "ws-link").symlink_to(ws)
    return tmp_path


@pytest.mark.parametrize("cwd, spec, workdir, missing", [
    ("ws", {"command": ["python", "x.py"]}, None, []),                       # the top: the default
    ("ws/sub", {"command": ["python", "x.py"]}, "sub", []),                  # runs where you are
    ("ws-link/sub", {"command": "python x.py"}, "sub", []),                  # through a link
    ("ws/sub", {"notebook": "train.ipynb"}, "sub", []),
    ("repo", {"command": ["python", "examples/x.py", "--out", "models"]}, None, ["examples/x.py"]),
    ("repo", {"command": "python examples/x.py && cat 'examples/x.py'"}, None,  # a shell string
     ["examples/x.py", "examples/x.py"]),
    ("repo", {"command": ["python", "examples/shared.py"]}, None, []),       # there too
    ("repo", {"command": ["python", "{repo}/examples/x.py"]}, None, []),      # a full path
    ("repo", {"command": ["python", "-c", "print(1)"]}, None, []),
    ("repo", {"notebook": "examples/x.py"}, None, ["examples/x.py"]),
    ("repo", {"command": "python 'unbalanced"}, None, []),                   # the service says why
])
def test_job_directory(places, cwd, spec, workdir, missing):
    spec = json.loads(json.dumps(spec).replace("{repo}", str(places / "repo")))
    assert job_directory(str(places / cwd), str(places / "ws"), command_words(spec)) \
        == (workdir, missing)


def test_a_job_submitted_from_a_workspace_folder_runs_there(hub, svc, capsys, monkeypatch):
    """A notebook server's terminal is in the workspace: `gpuhub submit --
    python x.py` there runs x.py there, not at the workspace's top."""
    folder = hub.workspace_folder("alice")
    with open(os.path.join(folder, "where.py"), "w") as f:
        f.write("import os; print('ran in', os.getcwd())\n")
    hub.give("alice", folder)
    monkeypatch.chdir(folder)
    rc, out, err = run(capsys, "submit", *as_user(hub, svc, "alice"), "--gpus", "0", "-f", "--",
                       "python", "where.py")
    assert rc == 0, err
    assert out.splitlines()[1] == f"ran in {folder}"
    assert "warning" not in err


def test_a_repository_path_is_warned_about_before_the_job_is_sent(hub, svc, capsys, monkeypatch,
                                                                   places):
    """`gpuhub submit -- python examples/x.py` from a repository outside the
    workspace: the job would not find the file; the user is told where the
    job runs and how to give the path, before it is submitted."""
    monkeypatch.chdir(places / "repo")
    rc, out, err = run(capsys, "submit", *as_user(hub, svc, "alice"), "--gpus", "0", "--",
                       "python", "examples/x.py")
    assert rc == 0, err
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    warning, submitted = err.splitlines()[:2]
    assert warning == (
        f"gpuhub: warning: the job runs in your workspace {workspace}, not here "
        f"({places / 'repo'}): it will not find examples/x.py there. Give the full path "
        f"(\"$PWD/examples/x.py\") if your account can read it, or copy it into the workspace "
        f"and submit from there (or name a directory of it with --workdir).")
    # the state once the scheduler looked at it: a 0-GPU job runs at once
    assert re.match(rf"gpuhub: {out.strip()} (queued|running)", submitted), submitted


def test_deploy_wait_ends_failed_with_the_reason_and_deployments_wait_gives_up_in_time(
        hub, svc, capsys):
    alice = as_user(hub, svc, "alice")
    # The training fails: --wait follows the waiting revision to its end, exit 1.
    rc, out, err = run(capsys, "submit", *alice, "--gpus", "0", "--", "sh", "-c",
                       "sleep 1; exit 3")
    assert rc == 0, err
    train = out.strip()
    rc, out, err = run(capsys, "deploy", *alice, "waits", "models/none", "--after", train,
                       "--wait", "--timeout", "120")
    assert rc == 1, (out, err)
    assert f"a/waits revision 1 is waiting for {train} (ok)" in err
    assert f"a/waits revision 1 failed: dependency {train} failed" in err
    assert "failed" in out.splitlines()[1]          # the deployment's table, as it ended
    # A training that runs on: `deployments NAME --wait` gives up at --timeout, exit 3.
    rc, out, err = run(capsys, "submit", *alice, "--gpus", "0", "--", "sleep", "120")
    slow = out.strip()
    rc, out, err = run(capsys, "deploy", *alice, "waits", "models/none", "--after", slow)
    assert rc == 0, err
    t0 = time.monotonic()
    rc, out, err = run(capsys, "deployments", *alice, "waits", "--wait", "--timeout", "3")
    assert rc == 3, (out, err)
    assert 3 <= time.monotonic() - t0 < 15
    assert err.splitlines()[-1] == (f"gave up waiting after 3 s: a/waits revision 2 is "
                                    f"waiting for {slow} (ok)")
    # Naming no deployment, or an action with --wait: a usage error.
    assert run(capsys, "deployments", *alice, "--wait")[0] == 2
    assert run(capsys, "deployments", *alice, "a/waits", "delete", "--wait")[0] == 2
    run(capsys, "cancel", *alice, slow)
    run(capsys, "deployments", *alice, "a/waits", "delete")
