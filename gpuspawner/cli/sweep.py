"""``gpuhub submit --sweep GRID.yaml`` and ``gpuhub sweep ls | show ID |
cancel ID | retry ID``; ``--after ID[:ok|any|failed]`` for any submit.

GRID.yaml is ``{grid: {param: [values...]}}`` (every combination) or
``{tasks: [{param: value}, ...]}`` (one task each). The formatting and
parsing functions are pure.
"""
from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence

import yaml

from .common import UsageError, connect, format_table, guard, note, print_json

CONDITIONS = ("ok", "any", "failed")
GOALS = ("max", "min")


class GridError(ValueError):
    """A grid file that cannot be read (a usage error)."""


def _pair(text: str, choices: tuple, what: str) -> tuple[str, str]:
    """``NAME`` or ``NAME:CHOICE`` (the first choice when left out)."""
    name, _, choice = text.partition(":")
    choice = choice or choices[0]
    if not name or choice not in choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}[:{'|'.join(choices)}]")
    return name, choice


def parse_after_arg(text: str) -> dict:
    """``ID`` or ``ID:ok|any|failed`` → {"id", "condition"}."""
    target, condition = _pair(text, CONDITIONS, "ID")
    return {"id": target, "condition": condition}


def parse_metric_arg(text: str) -> dict:
    """``NAME`` or ``NAME:max|min`` → {"name", "goal"} (max when left out)."""
    name, goal = _pair(text, GOALS, "NAME")
    return {"name": name, "goal": goal}


def load_grid(text: str, where: str = "the grid file") -> dict:
    """``{"grid": ...}`` or ``{"tasks": ...}`` from a grid file's YAML."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise GridError(f"{where} is not YAML: {e}") from None
    if not isinstance(data, dict) or len(set(data) & {"grid", "tasks"}) != 1 \
            or set(data) - {"grid", "tasks"}:
        raise GridError(f"{where} must hold exactly one of 'grid: {{param: [values]}}' or "
                        f"'tasks: [{{param: value}}]'")
    return data


def sweep_body(template: dict, grid: dict, args: argparse.Namespace) -> dict:
    """The body of POST /sweeps: the job ``gpuhub submit`` would send as the
    template, the grid file's grid or tasks, and the sweep's own options."""
    template = dict(template)
    after = template.pop("after", None)
    body: dict[str, Any] = {"template": template, **grid}
    if template.get("name"):
        body["name"] = template.pop("name")
    if template.get("team"):
        body["team"] = template.pop("team")
    if args.max_running is not None:
        body["max_running"] = args.max_running
    if args.metric is not None:
        body["metric"] = args.metric
    if after:
        body["after"] = after
    return body


def fmt_counts(sweep: dict) -> str:
    """"3/6 done (2 running, 1 waiting)" from a sweep's counts."""
    counts = sweep.get("counts") or {}
    done = sum(counts.get(s, 0) for s in ("succeeded", "failed", "cancelled", "stopped"))
    parts = [f"{counts[s]} {s}" for s in ("running", "queued", "waiting", "failed", "cancelled")
             if counts.get(s)]
    return f"{done}/{sweep.get('total', 0)} done" + (f" ({', '.join(parts)})" if parts else "")


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_sweeps(sweeps: Sequence[dict]) -> str:
    rows = [[s["id"], s.get("name") or "-", s.get("team", ""), s.get("state", ""),
             fmt_counts(s), fmt_value((s.get("best") or {}).get("value"))] for s in sweeps]
    return format_table(["ID", "NAME", "TEAM", "STATE", "PROGRESS", "BEST"], rows)


def format_results(sweep: dict) -> str:
    """The sweep's summary, then one row per task: its parameters, state and
    metric, the best one marked with '*'."""
    metric = sweep.get("metric") or {}
    best = (sweep.get("best") or {}).get("index")
    tasks = sweep.get("tasks") or []
    names = list(dict.fromkeys(k for t in tasks for k in t.get("parameters", {})))
    head = (f"{sweep['id']} {sweep.get('name') or ''} {sweep.get('state', '')}: "
            f"{fmt_counts(sweep)}").replace("  ", " ")
    if metric:
        head += f"; metric {metric['name']} ({metric.get('goal', 'max')})"
    rows = [["*" if t["index"] == best else "", t["index"], *[fmt_value(t["parameters"].get(n))
                                                            for n in names],
             t.get("state", ""), fmt_value(t.get("metric")), t.get("workload_id", "")]
            for t in tasks]
    table = format_table(["", "#", *names, "STATE", (metric.get("name") or "METRIC").upper(),
                          "WORKLOAD"], rows)
    return head + "\n" + table


# ---- commands -------------------------------------------------------------------------
def submit_sweep(args, client, template: dict) -> int:
    try:
        with open(args.sweep) as f:
            grid = load_grid(f.read(), args.sweep)
    except OSError as e:
        raise UsageError(f"cannot read {args.sweep}: {e.strerror}") from None
    except GridError as e:
        raise UsageError(str(e)) from None
    sweep = client.submit_sweep(sweep_body(template, grid, args))
    if args.json:
        print_json(sweep)
        return 0
    print(sweep["id"], flush=True)
    cap = f", at most {sweep['max_running']} at once" if sweep.get("max_running") else ""
    note(f"{sweep['id']}: {sweep['total']} tasks{cap}; see them with "
          f"`gpuhub sweep show {sweep['id']}`")
    return 0


def cmd_sweep(args) -> int:
    client = connect(args)
    if args.action == "ls":
        out: Any = client.list_sweeps(state=args.state or None,
                                      team=[args.team] if args.team else None)["sweeps"]
        text = format_sweeps(out) if out else "no sweeps"
    else:
        if not args.id:
            raise UsageError(f"sweep {args.action} needs a sweep id")
        act = {"show": client.get_sweep, "cancel": client.cancel_sweep,
               "retry": client.retry_sweep}[args.action]
        out = act(args.id)
        text = format_results(out)
    if args.json:
        print_json(out)
    else:
        print(text)
    return 0


def add_submit_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweeps and dependencies")
    g.add_argument("--sweep", metavar="GRID.yaml",
                   help="submit the job once per task of GRID.yaml ({grid: {param: [values]}} "
                        "or {tasks: [{param: value}]}): notebook parameters, or for a command "
                        "$GPUHUB_PARAM_<NAME> and {name} in its arguments")
    g.add_argument("--max-running", type=int, metavar="N",
                   help="with --sweep: at most N tasks queued or running at once")
    g.add_argument("--metric", type=parse_metric_arg, metavar="NAME[:max|min]",
                   help="with --sweep: the metric each task reports (a scrapbook scrap of its "
                        "output notebook, or metrics.json) and which way is best")
    g.add_argument("--after", action="append", type=parse_after_arg,
                   metavar="ID[:ok|any|failed]",
                   help="wait for a workload or sweep to succeed (ok, the default), fail, or "
                        "end at all (any); repeatable")


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("sweep", parents=[common], help="list sweeps, or show, cancel or retry one",
                       usage="gpuhub sweep ls | show ID | cancel ID | retry ID",
                       description="show prints each task's parameters, state and metric, the "
                                   "best one marked '*'; cancel stops every task not ended; "
                                   "retry runs the failed and cancelled tasks again")
    p.add_argument("action", choices=("ls", "show", "cancel", "retry"))
    p.add_argument("id", nargs="?", metavar="ID")
    p.add_argument("--state", action="append", choices=("running", "succeeded", "failed",
                                                        "cancelled"), help="with ls")
    p.add_argument("--team", help="with ls")
    p.set_defaults(func=guard("sweep", cmd_sweep))


def check_options(args) -> Optional[str]:
    """A usage problem of submit's sweep options, or None."""
    if args.sweep is None and (args.max_running is not None or args.metric is not None):
        return "--max-running and --metric go with --sweep GRID.yaml"
    if args.max_running is not None and args.max_running < 1:
        return "--max-running must be at least 1"
    return None
