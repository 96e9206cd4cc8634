"""``gpuhub submit --sweep/--after`` and ``gpuhub sweep``: the pure parts
(arguments to request bodies, grid files, the results table) and the
``%gpuhub`` magic's parser taking the same options. Against a real hub:
tests/test_workflows_e2e.py."""
from __future__ import annotations

import argparse

import pytest

from gpuspawner.cli import build_parser
from gpuspawner.cli.jobs import build_job_spec
from gpuspawner.cli.sweep import (GridError, check_options, fmt_counts, format_results,
                                  load_grid, parse_after_arg, parse_metric_arg, sweep_body)
from gpuspawner.magic import build_parser as magic_parser


@pytest.mark.parametrize("text,expected", [
    ("w0123456789ab", {"id": "w0123456789ab", "condition": "ok"}),
    ("s0123456789ab:any", {"id": "s0123456789ab", "condition": "any"}),
    ("w0123456789ab:failed", {"id": "w0123456789ab", "condition": "failed"}),
    ("w0123456789ab:afterok", None), (":ok", None),
])
def test_parse_after_arg(text, expected):
    if expected is None:
        with pytest.raises(argparse.ArgumentTypeError):
            parse_after_arg(text)
    else:
        assert parse_after_arg(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("acc", {"name": "acc", "goal": "max"}), ("loss:min", {"name": "loss", "goal": "min"}),
    ("loss:down", None)])
def test_parse_metric_arg(text, expected):
    if expected is None:
        with pytest.raises(argparse.ArgumentTypeError):
            parse_metric_arg(text)
    else:
        assert parse_metric_arg(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("grid:\n  lr: [0.1, 0.01]\n  bs: [32]\n", {"grid": {"lr": [0.1, 0.01], "bs": [32]}}),
    ("tasks:\n  - {lr: 0.1}\n  - {lr: 1}\n", {"tasks": [{"lr": 0.1}, {"lr": 1}]}),
    ("grid: {lr: [1]}\ntasks: []\n", GridError), ("lr: [1]\n", GridError),
    ("grid: [\n", GridError),
])
def test_load_grid(text, expected):
    if expected is GridError:
        with pytest.raises(GridError):
            load_grid(text)
    else:
        assert load_grid(text) == expected


def submit_args(*argv):
    return build_parser().parse_args(["submit", *argv])


def test_a_sweep_body_takes_the_job_as_its_template():
    args = submit_args("--gpus", "1", "--name", "lrs", "--team", "a", "--max-running", "2",
                       "--metric", "acc:max", "--after", "w0123456789ab", "--sweep", "g.yaml",
                       "--notebook", "train.ipynb", "-p", "epochs", "3")
    body = sweep_body(build_job_spec(args), {"grid": {"lr": [1, 2]}}, args)
    assert body == {"template": {"notebook": "train.ipynb", "gpus_per_node": 1,
                                 "parameters": {"epochs": 3}},
                    "grid": {"lr": [1, 2]}, "name": "lrs", "team": "a", "max_running": 2,
                    "metric": {"name": "acc", "goal": "max"},
                    "after": [{"id": "w0123456789ab", "condition": "ok"}]}


def test_after_is_repeatable_on_a_plain_submit():
    args = submit_args("--after", "w0123456789ab", "--after", "s0123456789ab:any", "--", "true")
    assert build_job_spec(args)["after"] == [{"id": "w0123456789ab", "condition": "ok"},
                                             {"id": "s0123456789ab", "condition": "any"}]


@pytest.mark.parametrize("argv,problem", [
    (["--max-running", "2", "--", "true"], "go with --sweep"),
    (["--metric", "acc", "--", "true"], "go with --sweep"),
    (["--sweep", "g.yaml", "--max-running", "0", "--", "true"], "at least 1"),
    (["--sweep", "g.yaml", "--", "true"], None),
])
def test_sweep_options_without_a_sweep_are_a_usage_error(argv, problem):
    found = check_options(submit_args(*argv))
    assert (found is None) if problem is None else (problem in found)


SWEEP = {"id": "s0123456789ab", "name": "lrs", "state": "running", "total": 3,
         "counts": {"succeeded": 2, "running": 1, "waiting": 0},
         "metric": {"name": "acc", "goal": "max"},
         "best": {"index": 1, "value": 0.9, "parameters": {"lr": 0.01}, "workload_id": "w2"},
         "tasks": [
             {"index": 0, "parameters": {"lr": 0.1}, "state": "succeeded", "metric": 0.5,
              "workload_id": "w1"},
             {"index": 1, "parameters": {"lr": 0.01}, "state": "succeeded", "metric": 0.9,
              "workload_id": "w2"},
             {"index": 2, "parameters": {"lr": 0.001}, "state": "running", "metric": None,
              "workload_id": "w3"}]}


def test_the_results_table_marks_the_best():
    lines = format_results(SWEEP).splitlines()
    assert lines[0] == "s0123456789ab lrs running: 2/3 done (1 running); metric acc (max)"
    assert lines[1].split() == ["#", "lr", "STATE", "ACC", "WORKLOAD"]
    rows = [line.split() for line in lines[2:]]
    assert rows == [["0", "0.1", "succeeded", "0.5", "w1"],
                    ["*", "1", "0.01", "succeeded", "0.9", "w2"],
                    ["2", "0.001", "running", "-", "w3"]]


def test_fmt_counts():
    assert fmt_counts({"total": 4, "counts": {"succeeded": 1, "failed": 1, "waiting": 2}}) == \
        "2/4 done (2 waiting, 1 failed)"


def test_the_magic_takes_the_same_sweep_and_after_options():
    args = magic_parser().parse_args(["submit", "--sweep", "g.yaml", "--max-running", "2",
                                      "--after", "w0123456789ab:any", "--notebook", "nb.ipynb"])
    assert (args.sweep, args.max_running, args.after) == (
        "g.yaml", 2, [{"id": "w0123456789ab", "condition": "any"}])
    args = magic_parser().parse_args(["sweep", "show", "s0123456789ab"])
    assert (args.action, args.id) == ("show", "s0123456789ab")


def test_follow_and_sweep_do_not_go_together(capsys):
    from gpuspawner.cli import main
    rc = main(["submit", "--url", "http://127.0.0.1:9", "--token", "t", "--sweep", "g.yaml",
               "-f", "--", "true"])
    assert rc == 2 and "follows one job" in capsys.readouterr().err
