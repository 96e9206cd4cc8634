"""``gpuhub schedule``: what the command line becomes (the request bodies,
an edit's merged job) and how schedules are shown. Pure: no hub (the
commands against a real hub: tests/test_schedules_e2e.py)."""
from __future__ import annotations

import pytest

from gpuspawner.cli import build_parser
from gpuspawner.cli.common import UsageError
from gpuspawner.cli.jobs import build_job_spec, job_fields
from gpuspawner.cli.schedule import (edited_spec, format_schedule, format_schedules,
                                     parse_options, schedule_fields)

NOW = 1_780_000_000.0  # 2026-05-28T20:26:40Z


def options(*argv):
    outer = build_parser().parse_args(["schedule", *argv])
    return parse_options(outer.action, outer.rest)


@pytest.mark.parametrize("argv, words, fields, spec", [
    (["create", "nightly", "--cron", "*/5 * * * *", "--timezone", "Europe/Paris",
      "--catch-up", "skip", "--gpus", "2", "--", "python", "train.py", "--lr", "0.1"],
     ["nightly"], {"cron": "*/5 * * * *", "timezone": "Europe/Paris", "catch_up": "skip"},
     {"command": ["python", "train.py", "--lr", "0.1"], "gpus_per_node": 2}),
    (["create", "report", "--cron", "@daily", "--notebook", "r.ipynb", "-p", "day", "3",
      "-p", "name", "x"],
     ["report"], {"cron": "@daily"}, {"notebook": "r.ipynb", "parameters": {"day": 3, "name": "x"}}),
    # a command that takes options of its own keeps them, after '--'
    (["create", "n", "--cron", "@hourly", "--", "python", "-c", "print(1)", "--cron", "x"],
     ["n"], {"cron": "@hourly"}, {"command": ["python", "-c", "print(1)", "--cron", "x"]}),
])
def test_create_options(argv, words, fields, spec):
    args = options(*argv)
    assert args.words == words
    assert schedule_fields(args) == fields
    assert build_job_spec(args) == spec


def test_edit_options_give_only_what_changes():
    args = options("edit", "c0123456789ab", "--cron", "0 6 * * MON-FRI", "--gpus", "4")
    assert schedule_fields(args) == {"cron": "0 6 * * MON-FRI"}
    assert job_fields(args) == {"gpus_per_node": 4}


@pytest.mark.parametrize("argv, message", [
    (["create", "n", "--", "echo"], "--cron is required"),
    (["create", "n", "--cron", "@daily"], "exactly one"),
    (["create", "n", "--cron", "@daily", "echo", "hi"], "usage: gpuhub schedule create NAME"),
    (["pause"], "name the schedule"),
    (["pause", "c1", "--cron", "@daily"], "takes no job or timing options"),
    (["edit", "c1"], "nothing to change"),
    (["ls", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_usage_errors(argv, message, capsys):
    outer = build_parser().parse_args(["schedule", *argv])
    assert outer.func(outer) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("current, changes, merged", [
    ({"command": "a", "gpus_per_node": 1}, {"gpus_per_node": 2}, {"command": "a", "gpus_per_node": 2}),
    # a notebook replaces the command, and a command a notebook with its parameters
    ({"command": "a", "pool": "p"}, {"notebook": "n.ipynb"}, {"notebook": "n.ipynb", "pool": "p"}),
    ({"notebook": "n.ipynb", "parameters": {"x": 1}, "output_notebook": "o.ipynb"},
     {"command": ["python", "t.py"]}, {"command": ["python", "t.py"]}),
    ({"notebook": "n.ipynb", "parameters": {"x": 1}}, {"parameters": {"x": 2}},
     {"notebook": "n.ipynb", "parameters": {"x": 2}}),
])
def test_edited_spec(current, changes, merged):
    assert edited_spec(current, changes) == merged


SCHEDULE = {"id": "c0123456789ab", "name": "nightly", "team": "a", "user": "alice",
            "cron": "0 2 * * *", "timezone": "Europe/Paris", "catch_up": "once", "paused": False,
            "spec": {"command": ["python", "train.py"]},
            "next_run_at": "2026-05-29T00:00:00Z", "last_run_at": "2026-05-28T00:00:05Z",
            "last_workload_id": "w00000000abcd", "created_at": "2026-05-01T00:00:00Z",
            "recent": [{"workload_id": "w00000000abcd", "scheduled_for": "2026-05-28T00:00:00Z",
                        "fired_at": "2026-05-28T00:00:05Z", "cause": "cron",
                        "state": "succeeded"}]}


def test_format_schedules():
    lines = format_schedules([SCHEDULE, {**SCHEDULE, "id": "c2", "paused": True,
                                         "spec": {"notebook": "r.ipynb",
                                                  "parameters": {"day": 3}}}], NOW).splitlines()
    assert lines[0].split() == ["ID", "NAME", "TEAM", "USER", "CRON", "TIMEZONE", "NEXT", "LAST",
                                "LAST", "WORKLOAD", "JOB"]
    assert "0 2 * * *  Europe/Paris  in 3h33m  20h26m ago  w00000000abcd  python train.py" \
        in lines[1]
    assert "paused" in lines[2] and lines[2].endswith("notebook r.ipynb (day=3)")
    assert format_schedules([], NOW) == "No schedules."


def test_format_schedule_shows_its_firings():
    text = format_schedule(SCHEDULE, NOW)
    assert "cron:      0 2 * * *  (Europe/Paris)" in text
    assert "next run:  2026-05-29T00:00:00Z" in text
    fired = [line for line in text.splitlines() if "w00000000abcd" in line]
    assert fired and fired[0].split()[1:] == ["2026-05-28T00:00:00Z", "20h26m", "ago", "cron",
                                              "succeeded"]
    assert "no firings yet" in format_schedule({**SCHEDULE, "recent": []}, NOW)
    assert "error:" not in text


def test_format_schedule_shows_the_last_failed_firing():
    failed = {**SCHEDULE, "last_error": "the firing for 2026-05-28 00:00Z could not be "
                                        "submitted: spec.pool: unknown pool 'a100'",
              "last_error_at": "2026-05-28T00:00:01Z"}
    (line,) = [line for line in format_schedule(failed, NOW).splitlines() if "error:" in line]
    assert line == ("  error:     the firing for 2026-05-28 00:00Z could not be submitted: "
                    "spec.pool: unknown pool 'a100' (20h26m ago)")


def test_usage_error_type_is_the_cli_one():
    with pytest.raises(UsageError):
        options("ls", "--bogus")
