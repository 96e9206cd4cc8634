"""``gpuhub schedule create|ls|show|pause|resume|run|rm|edit``: recurring jobs
from a terminal, through the REST API (docs/workflows.md, "Schedules").

    gpuhub schedule create nightly --cron '0 2 * * *' --timezone Europe/Paris -- python train.py
    gpuhub schedule create report --cron @daily --notebook report.ipynb -p day today
    gpuhub schedule ls
    gpuhub schedule run cab12cd34ef56

The formatting and merging functions are pure, tested without a hub."""
from __future__ import annotations

import argparse
import time
from typing import Any, Optional, Sequence

from .common import (UsageError, common_options, connect, fmt_age, format_table, guard, note,
                     parse_time, print_json)
from .jobs import add_job_options, build_job_spec, default_working_dir, job_fields

ACTIONS = ("create", "ls", "show", "pause", "resume", "run", "rm", "edit")
# Fields of a job that one kind of job has and the other has not.
COMMAND_ONLY, NOTEBOOK_ONLY = ("command",), ("notebook", "parameters", "output_notebook")


def schedule_fields(args: argparse.Namespace) -> dict:
    """The schedule's own fields the options gave (not its job's)."""
    out = {}
    for key, value in (("cron", args.cron), ("timezone", args.timezone),
                       ("catch_up", args.catch_up)):
        if value is not None:
            out[key] = value
    return out


def edited_spec(current: dict, changes: dict) -> dict:
    """A schedule's job with ``changes`` (from the options): a command given
    replaces a notebook (and its parameters), a notebook a command."""
    spec = dict(current)
    if "command" in changes:
        for key in NOTEBOOK_ONLY:
            spec.pop(key, None)
    if "notebook" in changes:
        for key in COMMAND_ONLY:
            spec.pop(key, None)
    spec.update(changes)
    return spec


def when(iso: Optional[str], now: float) -> str:
    t = parse_time(iso)
    if t is None:
        return "-"
    return f"in {fmt_age(t - now)}" if t >= now else f"{fmt_age(now - t)} ago"


def job_text(spec: dict) -> str:
    if spec.get("notebook"):
        params = " ".join(f"{k}={v}" for k, v in (spec.get("parameters") or {}).items())
        return f"notebook {spec['notebook']}" + (f" ({params})" if params else "")
    command = spec.get("command")
    return command if isinstance(command, str) else " ".join(command or [])


def format_schedules(schedules: Sequence[dict], now: float) -> str:
    """The ``gpuhub schedule ls`` table."""
    if not schedules:
        return "No schedules."
    rows = [[s["id"], s["name"], s["team"], s["user"], s["cron"], s["timezone"],
             "paused" if s["paused"] else when(s.get("next_run_at"), now),
             when(s.get("last_run_at"), now), s.get("last_workload_id") or "-",
             job_text(s.get("spec") or {})] for s in schedules]
    return format_table(("ID", "NAME", "TEAM", "USER", "CRON", "TIMEZONE", "NEXT", "LAST",
                         "LAST WORKLOAD", "JOB"), rows)


def format_schedule(s: dict, now: float) -> str:
    """``gpuhub schedule show``: the schedule and its last firings."""
    lines = [f"{s['id']}  {s['name']}  (team {s['team']}, {s['user']})",
             f"  cron:      {s['cron']}  ({s['timezone']})",
             f"  catch-up:  {s['catch_up']}",
             f"  next run:  {'paused' if s['paused'] else s.get('next_run_at') or '-'}",
             f"  job:       {job_text(s.get('spec') or {})}"]
    if s.get("last_error"):
        lines.append(f"  error:     {s['last_error']} ({when(s.get('last_error_at'), now)})")
    recent = s.get("recent") or []
    if not recent:
        return "\n".join(lines + ["  no firings yet"])
    table = format_table(("WORKLOAD", "SCHEDULED FOR", "FIRED", "CAUSE", "STATE"),
                         [[f["workload_id"], f["scheduled_for"], when(f["fired_at"], now),
                           f["cause"], f.get("state") or "-"] for f in recent])
    return "\n".join(lines + [""] + ["  " + line for line in table.splitlines()])


# ---- commands -------------------------------------------------------------------------

def _one(args) -> str:
    if not args.words:
        raise UsageError(f"name the schedule: gpuhub schedule {args.action} ID")
    if len(args.words) > 1:
        raise UsageError(f"one schedule at a time: gpuhub schedule {args.action} ID")
    return args.words[0]


def cmd_schedule(args) -> int:
    action = args.action
    if action == "create":
        return _create(args)
    if action == "edit":
        return _edit(args)
    _no_job_options(args)
    now = time.time()
    if action == "ls":
        if args.words:
            raise UsageError("gpuhub schedule ls takes no arguments (--team TEAM filters)")
        found = connect(args).list_schedules(team=args.team)["schedules"]
        print_json({"schedules": found}) if args.json else print(format_schedules(found, now))
        return 0
    sid = _one(args)
    client = connect(args)
    if action == "rm":
        client.delete_schedule(sid)
        print(f"deleted {sid}")
        return 0
    if action == "run":
        w = client.run_schedule(sid)
        if args.json:
            print_json(w)
        else:
            print(w["id"])  # as gpuhub submit prints it
            note(f"{w['id']} {w['name']} {w['state']}; follow it with `gpuhub logs -f {w['id']}`")
        return 0
    act = {"show": client.get_schedule, "pause": client.pause_schedule,
           "resume": client.resume_schedule}[action]
    s = act(sid)
    print_json(s) if args.json else print(format_schedule(s, now))
    return 0


def _create(args) -> int:
    if len(args.words) != 1:
        raise UsageError("usage: gpuhub schedule create NAME --cron EXPR [options] -- COMMAND "
                         "(the command goes after '--')")
    if args.cron is None:
        raise UsageError("--cron is required, e.g. --cron '*/5 * * * *' or --cron @daily")
    spec = build_job_spec(args)
    team = spec.pop("team", None)
    body: dict[str, Any] = {"name": args.words[0], **schedule_fields(args), "spec": spec}
    if team:
        body["team"] = team
    if args.paused:
        body["paused"] = True
    client = connect(args)
    if args.workdir is None:
        default_working_dir(client, spec)
    s = client.create_schedule(body)
    print_json(s) if args.json else print(format_schedule(s, time.time()))
    return 0


def _edit(args) -> int:
    sid = _one(args)
    if args.paused:
        raise UsageError("to pause a schedule: gpuhub schedule pause ID")
    changes = schedule_fields(args)
    if args.rename:
        changes["name"] = args.rename
    job = job_fields(args)
    if not changes and not job:
        raise UsageError("nothing to change: give --cron, --timezone, --catch-up, --rename or "
                         "job options (a new command after '--')")
    client = connect(args)
    if job:
        changes["spec"] = edited_spec(client.get_schedule(sid)["spec"], job)
    s = client.edit_schedule(sid, changes)
    print_json(s) if args.json else print(format_schedule(s, time.time()))
    return 0


def _no_job_options(args) -> None:
    given = sorted(set(job_fields(args)) | set(schedule_fields(args)))
    if given or args.paused or args.rename:
        raise UsageError(f"gpuhub schedule {args.action} takes no job or timing options "
                         f"(got {', '.join(given) or '--paused/--rename'})")


class _Options(argparse.ArgumentParser):
    """The options after ``gpuhub schedule ACTION``: errors are usage errors."""

    def error(self, message: str):
        raise UsageError(message)

    def exit(self, status: int = 0, message: Optional[str] = None):
        if message:
            print(message, end="")
        raise _Exit(status)


class _Exit(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


USAGE = ("gpuhub schedule create NAME --cron EXPR [--timezone TZ] [--catch-up once|skip] "
         "[--paused] [job options] -- COMMAND | --notebook NB.ipynb [-p KEY VALUE]\n"
         "       gpuhub schedule ls [--team TEAM]\n"
         "       gpuhub schedule show|pause|resume|run|rm ID\n"
         "       gpuhub schedule edit ID [--cron EXPR] [--timezone TZ] [--catch-up once|skip] "
         "[--rename NAME] [job options] [-- COMMAND]")
DESCRIPTION = ("A job submitted at each firing of a cron expression (minute hour day-of-month "
               "month day-of-week, or @hourly @daily @weekly @monthly @yearly) in a time zone, "
               "as a normal workload of the team, named NAME-YYYYmmddTHHMM. 'run' fires it now "
               "and prints the workload's id. `gpuhub schedule ACTION --help` lists the options.")


def options_parser(action: str) -> argparse.ArgumentParser:
    p = _Options(prog=f"gpuhub schedule {action}", parents=[common_options()], usage=USAGE,
                 description=DESCRIPTION)
    p.add_argument("words", nargs="*", metavar="NAME | ID")
    p.add_argument("--cron", help="e.g. '*/5 * * * *', '0 2 * * MON-FRI', @daily")
    p.add_argument("--timezone", help="an IANA time zone (default UTC), e.g. Europe/Paris")
    p.add_argument("--catch-up", choices=("once", "skip"),
                   help="after the service was down: run the latest missed firing once "
                        "(default) or skip it")
    p.add_argument("--paused", action="store_true", help="for create: create it paused")
    p.add_argument("--rename", metavar="NAME", help="for edit: a new name")
    add_job_options(p)
    return p


def parse_options(action: str, rest: Sequence[str]) -> argparse.Namespace:
    """``gpuhub schedule ACTION REST...``: the options, and the command after
    the first ``--`` (argparse alone cannot have both NAME and a command)."""
    rest = list(rest)
    cut = rest.index("--") if "--" in rest else len(rest)
    args = options_parser(action).parse_intermixed_args(rest[:cut])
    args.action, args.command = action, rest[cut + 1:]
    return args


def run_schedule(outer) -> int:
    try:
        args = parse_options(outer.action, outer.rest)
    except _Exit as e:  # --help
        return e.status
    return cmd_schedule(args)


def add_parsers(sub) -> None:
    p = sub.add_parser("schedule", help="recurring jobs (cron)", usage=USAGE,
                       description=DESCRIPTION, add_help=True)
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                   help="NAME or ID, options, and for create/edit the command after '--'")
    p.set_defaults(func=guard("schedule", run_schedule))
