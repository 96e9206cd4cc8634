"""``gpuhub submit | ls | logs | cancel | quota | pools`` (and ``sweep``,
sweep.py): the REST API from a shell.

Every command takes ``--url`` (else ``$GPUHUB_URL``, else the embedded hub at
http://127.0.0.1:8000/services/gpuhub), ``--token`` (else ``$GPUHUB_TOKEN``,
else ``$JUPYTERHUB_API_TOKEN``) and ``--json`` (print the API's JSON instead
of a table). A refused request prints ``gpuhub CMD: <the server's message>``
and exits 1; a usage error (or no token) exits 2.

The formatting and parsing functions here are pure (rows in, text out) so
they can be tested without a hub.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any, Optional, Sequence

from ..client import TERMINAL_STATES, ApiError, GpuHubClient
from ..isolation.resources import human_memory
from ..sim.whatif import parse_value
from .common import UsageError, common_options, connect, format_table, guard, note, print_json
from .listing import format_pools, format_workloads
from .workdir import command_words, elsewhere_warning, job_directory

STATES = ("waiting", "queued", "held", "running", "stopping", "succeeded", "failed", "cancelled")
ACTIVE_STATES = ("waiting", "queued", "held", "running", "stopping")


# ---- pure helpers: parsing ----------------------------------------------------------

def parse_env_pair(text: str) -> tuple[str, str]:
    """``K=V`` → (K, V); the value may contain '=' and be empty."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


# A papermill-style parameter value: int, float, true/false, none, else the string.
parse_param_value = parse_value


NO_LIMIT = ("none", "null", "unlimited", "-")


def _number_or_none(text: str, kind: type, what: str):
    """``text`` as a non-negative ``kind``, or None for one of NO_LIMIT."""
    if text.strip().lower() in NO_LIMIT:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} or 'none'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def parse_limit(text: str) -> Optional[int]:
    """A quota limit: a non-negative integer, or ``none`` for no limit."""
    return _number_or_none(text, int, "a non-negative integer")


def command_payload(argv: Sequence[str]) -> Any:
    """What ``-- COMMAND...`` becomes: one argument is a shell string
    (``"echo a && echo b"``), several an argv list run without a shell."""
    argv = list(argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        return None
    return argv[0] if len(argv) == 1 else argv


def build_job_spec(args: argparse.Namespace) -> dict:
    """The JSON body of POST /workloads from ``gpuhub submit``'s arguments."""
    command = command_payload(args.command or [])
    if (command is None) == (args.notebook is None):
        raise UsageError("give a command after '--' or --notebook NB.ipynb (exactly one)")
    if args.parameters and args.notebook is None:
        raise UsageError("-p/--parameter only applies to --notebook")
    return job_fields(args)


def job_fields(args: argparse.Namespace) -> dict:
    """The job fields the options of ``add_job_options`` gave (those not
    given are left out)."""
    spec: dict[str, Any] = {}
    command = command_payload(args.command or [])
    if command is not None:
        spec["command"] = command
    if args.notebook is not None:
        spec["notebook"] = args.notebook
    if args.parameters:
        spec["parameters"] = {k: parse_param_value(v) for k, v in args.parameters}
    if args.output_notebook:
        spec["output_notebook"] = args.output_notebook
    for key, value in (("name", getattr(args, "name", None)), ("pool", args.pool),
                       ("gpus_per_node", args.gpus),
                       ("cpus", getattr(args, "cpus", None)),
                       ("memory", getattr(args, "memory", None)),
                       ("gpu_share", args.gpu_share), ("gpu_memory", args.gpu_memory),
                       ("nodes", args.nodes), ("topology", args.topology),
                       ("topology_key", args.topology_key), ("time_limit", args.time_limit),
                       ("grace_period", args.grace_period), ("priority", args.priority),
                       ("team", args.team), ("project", args.project),
                       ("working_dir", args.workdir), ("checkpoint_dir", args.checkpoint_dir)):
        if value is not None:
            spec[key] = value
    if args.env:
        spec["env"] = dict(args.env)
    if getattr(args, "after", None):
        spec["after"] = args.after
    if getattr(args, "datasets", None):
        spec["datasets"] = args.datasets
    return spec


def parse_ceiling(text: str) -> Optional[str]:
    """A memory ceiling as given (``64G``; the service checks it), or
    ``none`` for no limit."""
    return None if text.strip().lower() in NO_LIMIT else text.strip()


def parse_cpu_ceiling(text: str) -> Optional[float]:
    """A CPU ceiling: a non-negative number, or ``none`` for no limit."""
    return _number_or_none(text, float, "a number of CPUs")


def quota_change(team: Optional[dict], pool: Optional[str], nominal: Optional[int],
                 borrowing: Any = ..., lending: Any = ...,
                 weight: Optional[float] = None, cpus: Any = ..., memory: Any = ...) -> dict:
    """The PUT /teams/{name} body for ``gpuhub quota set``: the pool's quota
    with the limits not given kept from ``team`` (the team as it is now, or
    None for a new team). ``...`` means "not given"; None means "no limit"."""
    body: dict[str, Any] = {}
    if weight is not None:
        body["weight"] = weight
    if pool is not None:
        current = ((team or {}).get("quotas") or {}).get(pool) or {}
        quota = {"nominal": nominal if nominal is not None else current.get("nominal", 0),
                 "borrowing_limit": current.get("borrowing_limit"),
                 "lending_limit": current.get("lending_limit")}
        if borrowing is not ...:
            quota["borrowing_limit"] = borrowing
        if lending is not ...:
            quota["lending_limit"] = lending
        # CPU and memory ceilings: a PUT sets them too, so those not given are kept.
        for key, given in (("cpus", cpus), ("memory", memory)):
            value = current.get(key) if given is ... else given
            if value is not None:
                quota[key] = value
        body["quotas"] = {pool: quota}
    return body


# ---- pure helpers: formatting ------------------------------------------------------------

def fmt_limit(value: Optional[int]) -> str:
    return "none" if value is None else str(value)


def format_quotas(teams: Sequence[dict]) -> str:
    rows = []
    for t in teams:
        weight = f"{t.get('weight', 1.0):g}"
        quotas = t.get("quotas") or {}
        if not quotas:
            rows.append([t.get("name", ""), "-", weight, "-", "-", "-", "-", "-", "-"])
        for pool, q in sorted(quotas.items()):
            rows.append([t.get("name", ""), pool, weight, q.get("nominal", 0),
                         fmt_limit(q.get("borrowing_limit")), fmt_limit(q.get("lending_limit")),
                         q.get("used", 0), fmt_held(q, "cpus", lambda v: f"{v:g}"),
                         fmt_held(q, "memory", human_memory)])
    if not rows:
        return "No teams."
    return format_table(("TEAM", "POOL", "WEIGHT", "NOMINAL", "BORROWING", "LENDING", "USED",
                         "CPUS", "MEMORY"), rows)


def fmt_held(quota: dict, key: str, show) -> str:
    """What the team holds of a CPU or memory ceiling: ``2/4``, ``8GiB/none``."""
    used = quota.get(f"used_{key}") or 0
    cap = quota.get(key)
    return f"{show(used) if used else 0}/{'none' if cap is None else show(cap)}"


def format_cancelled(w: dict) -> str:
    if w.get("state") == "cancelled":
        return f"{w['id']} cancelled"
    return f"{w['id']} {w.get('state', '')}: {w.get('reason') or 'stopping'}"


# ---- commands -------------------------------------------------------------------------

def _stream(client: GpuHubClient, wid: str, attempt: Optional[int] = None) -> None:
    for text in client.follow_logs(wid, attempt, notify=note):
        sys.stdout.write(text)
        sys.stdout.flush()


def submitted_note(w: dict, following: bool) -> str:
    """What ``gpuhub submit`` tells a person: the job's state, and how to
    see how it goes."""
    state = w.get("state", "")
    if w.get("queue_position"):
        state += f", position {w['queue_position']} in the team's queue"
    if (w.get("expected_start") or {}).get("text"):
        state += f", {w['expected_start']['text']}"
    reason = w.get("reason") or ""
    text = f"{w['id']} {state}" + (f": {reason}" if reason and reason != w.get("state") else "")
    if following:
        return text + "; following its log (Ctrl-C stops following, not the job)"
    return text + f"; follow it with `gpuhub logs -f {w['id']}` (or submit with -f)"


def _looked_at(client: GpuHubClient, w: dict, seconds: float = 2.0) -> dict:
    """The workload once a scheduling cycle has looked at it (the submit
    triggers one): started, or waiting with a reason and an expected start."""
    deadline = time.monotonic() + seconds
    while w.get("state") == "queued" and w.get("reason") == "queued" \
            and time.monotonic() < deadline:
        time.sleep(0.1)
        w = client.get_workload(w["id"])
    return w


def default_working_dir(client: GpuHubClient, spec: dict) -> None:
    """A job given no --workdir runs in this directory when it is in the
    user's workspace; else a warning when its files are not there."""
    workspace = client.get_me().get("workspace")
    if workspace:
        cwd = os.getcwd()
        workdir, missing = job_directory(cwd, workspace, command_words(spec))
        if workdir:
            spec["working_dir"] = workdir
        elif missing:
            note(elsewhere_warning(cwd, workspace, missing))


def cmd_submit(args) -> int:
    from .sweep import check_options, submit_sweep
    spec = build_job_spec(args)
    problem = check_options(args)
    if problem:
        raise UsageError(problem)
    if args.sweep and args.follow:
        raise UsageError("-f/--follow follows one job, not a sweep: see its tasks with "
                         "`gpuhub sweep show ID`")
    client = connect(args)
    if args.workdir is None:
        default_working_dir(client, spec)
    if args.sweep:
        return submit_sweep(args, client, spec)
    w = client.submit_workload(spec)
    if args.json:
        print_json(w)
    else:
        # The id alone on stdout (ID=$(gpuhub submit ...)); the rest for people.
        print(w["id"], flush=True)
        note(submitted_note(_looked_at(client, w), args.follow))
    if not args.follow:
        return 0
    _stream(client, w["id"])
    final = client.wait(w["id"], TERMINAL_STATES, timeout=30)
    if final["state"] != "succeeded":
        note(f"{w['id']} {final['state']}: {final.get('reason') or ''}".rstrip(": "))
        return 1
    return 0


LS_PAGE = 500  # rows per request while ``gpuhub ls`` pages through a long list


def cmd_ls(args) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    states = args.state or ([] if args.all else list(ACTIVE_STATES))
    client = connect(args)
    workloads: list = []
    cursor = args.cursor
    # Page by the list's cursor: each page costs the service what it returns,
    # and work submitted meanwhile does not show twice or push rows out.
    while len(workloads) < args.limit:
        page = client.list_workloads(state=states, team=args.team, user=args.user,
                                     pool=args.pool, project=args.project, kind=args.kind,
                                     limit=min(args.limit - len(workloads), LS_PAGE),
                                     detail=1, cursor=cursor)
        workloads += page["workloads"]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if args.json:
        print_json({"workloads": workloads, "next_cursor": cursor})
    else:
        # On a terminal the reasons wrap to its width; piped (or --wide), one line each.
        width = None if args.wide or not sys.stdout.isatty() else \
            shutil.get_terminal_size().columns
        print(format_workloads(workloads, time.time(), width))
        if cursor:
            note(f"more than {len(workloads)}: the next ones with --cursor {cursor} "
                 f"(or a larger --limit)")
    return 0


def earlier_attempts_note(w: dict) -> Optional[str]:
    """What ``gpuhub logs`` says (on stderr) of a workload that ran more than
    once: which attempt it shows, and how to see the others."""
    n = int(w.get("attempt") or 0)
    if n == 0:
        return None
    earlier = "--attempt 0" if n == 1 else f"--attempt N (0 to {n - 1})"
    why = f": {w['reason']}" if w.get("state") == "queued" and w.get("reason") else ""
    return (f"{w['id']} is on attempt {n} ({w.get('state')}{why}); its earlier attempts' "
            f"output: gpuhub logs {w['id']} {earlier}")


def cmd_logs(args) -> int:
    client = connect(args)
    if args.attempt is None and not args.json:
        told = earlier_attempts_note(client.get_workload(args.id))
        if told:
            note(told)
    if args.follow:
        _stream(client, args.id, args.attempt)
        return 0
    text = client.get_workload_logs(args.id, attempt=args.attempt)
    if args.json:
        print_json({"id": args.id, "attempt": args.attempt, "text": text})
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def cmd_cancel(args) -> int:
    client = connect(args)
    status, out = 0, []
    for wid in args.ids:
        try:
            w = client.cancel_workload(wid)
        except ApiError as e:
            if e.status == 0:
                raise
            print(f"gpuhub cancel: {wid}: {e}", file=sys.stderr)
            status = 1
            continue
        out.append(w)
        if not args.json:
            print(format_cancelled(w))
    if args.json:
        print_json(out[0] if len(args.ids) == 1 and out else out)
    return status


def cmd_quota(args) -> int:
    words = list(args.words)
    setting = bool(words) and words[0] == "set"
    flags_given = any(v is not None for v in (args.pool, args.nominal, args.weight)) or \
        any(v is not ... for v in (args.borrowing_limit, args.lending_limit, args.cpus,
                                   args.memory))
    if not setting:
        if len(words) > 1:
            raise UsageError("usage: gpuhub quota [TEAM] | gpuhub quota set TEAM --pool P ...")
        if flags_given:
            raise UsageError("--pool/--nominal/--borrowing-limit/--lending-limit/--weight go "
                             "with 'gpuhub quota set TEAM'")
        client = connect(args)
        teams = [client.get_team(words[0])] if words else client.list_teams()["teams"]
        if args.json:
            print_json(teams[0] if words else {"teams": teams})
        else:
            print(format_quotas(teams))
        return 0
    if len(words) != 2:
        raise UsageError("usage: gpuhub quota set TEAM --pool P --nominal N "
                         "[--borrowing-limit N|none] [--lending-limit N|none] [--weight W]")
    name = words[1]
    pool_flags = args.nominal is not None or any(
        v is not ... for v in (args.borrowing_limit, args.lending_limit, args.cpus, args.memory))
    if pool_flags and args.pool is None:
        raise UsageError("--nominal, --borrowing-limit and --lending-limit need --pool")
    if args.pool is not None and args.nominal is None:
        raise UsageError("--pool needs --nominal N")
    if args.pool is None and args.weight is None:
        raise UsageError("nothing to change: give --pool P --nominal N and/or --weight W")
    client = connect(args)
    current = None
    if args.pool is not None:
        try:
            current = client.get_team(name)
        except ApiError as e:
            if e.status != 404:
                raise
    body = quota_change(current, args.pool, args.nominal, args.borrowing_limit,
                        args.lending_limit, args.weight, args.cpus, args.memory)
    team = client.set_team(name, body)
    if args.json:
        print_json(team)
    else:
        print(format_quotas([team]))
        for warning in team.get("warnings") or ():
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_pools(args) -> int:
    pools = connect(args).list_pools()["pools"]
    if args.json:
        print_json({"pools": pools})
    else:
        print(format_pools(pools))
    return 0


# ---- argparse ---------------------------------------------------------------------------

def add_job_options(p: argparse.ArgumentParser) -> None:
    """The options that describe a job (``gpuhub submit``, ``gpuhub schedule``)."""
    p.add_argument("--gpus", type=int, help="GPUs per node (default 1)")
    p.add_argument("--nodes", type=int, help="nodes (default 1)")
    p.add_argument("--cpus", type=float,
                   help="CPU cores per node, e.g. 0.5 or 4 (default: the service's, 1)")
    p.add_argument("--memory", metavar="SIZE",
                   help="memory per node, e.g. 512M, 16G, 8GiB (default: the service's, 8G)")
    p.add_argument("--gpu-share", metavar="FRACTION",
                   help="part of one GPU instead of whole GPUs, e.g. 1/4 (a pool that shares "
                        "its GPUs rounds it up to its slots)")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="GPU memory the job needs of one shared GPU, e.g. 35GiB (with or "
                        "instead of --gpu-share)")
    p.add_argument("--topology", choices=("none", "preferred", "required"),
                   help="keep a multi-node job's nodes in one domain of --topology-key")
    p.add_argument("--topology-key", help="the topology level (default switch: a Slurm node's "
                                          "leaf switch)")
    p.add_argument("--pool", help="GPU pool (default: the configured default)")
    p.add_argument("--time-limit", help="e.g. 90, 45m, 2h30m, 1d")
    p.add_argument("--grace-period", help="seconds between SIGTERM and SIGKILL (e.g. 30, 2m)")
    p.add_argument("--priority", help="production, interactive, batch or best-effort")
    p.add_argument("--team", help="team to charge (default: your only team)")
    p.add_argument("--project", help="label for cost attribution")
    p.add_argument("--workdir", help="working directory (relative to your workspace). Default: "
                                      "this directory when it is in your workspace (a notebook "
                                      "server's terminal), else the workspace")
    p.add_argument("--env", action="append", type=parse_env_pair, metavar="K=V",
                   help="environment variable (repeat)")
    p.add_argument("--checkpoint-dir", help="handed to the job as GPUHUB_CHECKPOINT_DIR")
    p.add_argument("--dataset", dest="datasets", action="append", metavar="NAME",
                   help="a dataset the job reads, read-only at /datasets/NAME (repeat)")
    p.add_argument("--notebook", metavar="NB.ipynb", help="run a notebook with papermill")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append",
                   metavar=("KEY", "VALUE"), help="notebook parameter (repeat)")
    p.add_argument("--output-notebook", help="where the executed notebook goes")


def add_parsers(sub) -> None:
    """Register the client commands into the ``gpuhub`` subparsers."""
    common = common_options()

    _add_submit(sub, common)
    _add_ls(sub, common)

    p = sub.add_parser("logs", parents=[common], help="print a workload's output")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    p.add_argument("--attempt", type=int,
                   help="attempt number, from 0 (default: the latest; a preempted job is "
                        "requeued as its next attempt)")
    p.add_argument("id")
    p.set_defaults(func=guard("logs", cmd_logs))

    p = sub.add_parser("cancel", parents=[common], help="cancel workloads")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=guard("cancel", cmd_cancel))

    p = sub.add_parser("quota", parents=[common], help="show or set team quotas",
                       usage="gpuhub quota [TEAM]\n       gpuhub quota set TEAM --pool P "
                             "--nominal N [--borrowing-limit N|none] [--lending-limit N|none] "
                             "[--cpus N|none] [--memory SIZE|none] [--weight W]",
                       description="Show the quotas of your teams (all for admins), or, as an "
                                   "admin, set one. Limits not given are kept; 'none' means "
                                   "no limit.")
    p.add_argument("words", nargs="*", metavar="TEAM | set TEAM")
    p.add_argument("--pool")
    p.add_argument("--nominal", type=int)
    p.add_argument("--borrowing-limit", type=parse_limit, default=..., metavar="N|none")
    p.add_argument("--lending-limit", type=parse_limit, default=..., metavar="N|none")
    p.add_argument("--cpus", type=parse_cpu_ceiling, default=..., metavar="N|none",
                   help="most CPUs the team's running work in the pool may ask for")
    p.add_argument("--memory", type=parse_ceiling, default=..., metavar="SIZE|none",
                   help="most memory (64G) the team's running work in the pool may ask for")
    p.add_argument("--weight", type=float)
    p.set_defaults(func=guard("quota", cmd_quota))

    p = sub.add_parser("pools", parents=[common], help="GPU pools: capacity, use, queue")
    p.set_defaults(func=guard("pools", cmd_pools))

    from .sweep import add_parsers as add_sweep
    add_sweep(sub, common)


def _add_submit(sub, common) -> None:
    p = sub.add_parser("submit", parents=[common], help="submit a job",
                       usage="gpuhub submit [options] -- COMMAND... | --notebook NB.ipynb",
                       description="Submit a job and print its id. The command goes after '--': "
                                   "several words are run as an argv list without a shell, one "
                                   "quoted argument with /bin/sh -c.")
    p.add_argument("--name", help="a name for the workload")
    add_job_options(p)
    p.add_argument("-f", "--follow", action="store_true",
                   help="stream the output until the job ends; exit 0 only if it succeeded")
    from .sweep import add_submit_options
    add_submit_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after '--'")
    p.set_defaults(func=guard("submit", cmd_submit))


def _add_ls(sub, common) -> None:
    p = sub.add_parser("ls", parents=[common], help="list workloads",
                       description="Workloads of your teams (all for admins), newest first. "
                                   "By default the queued, running and stopping ones.")
    p.add_argument("--state", action="extend", nargs="+", choices=STATES,
                   help="only these states (repeatable)")
    p.add_argument("--team")
    p.add_argument("--user")
    p.add_argument("--pool")
    p.add_argument("--project")
    p.add_argument("--kind", choices=("job", "notebook", "deployment"),
                   help="only jobs, notebook servers or deployment replicas")
    p.add_argument("--all", action="store_true", help="finished workloads too")
    p.add_argument("-w", "--wide", action="store_true",
                   help="each reason whole on its line (on a terminal they wrap to its width; "
                        "piped output is never wrapped)")
    p.add_argument("--limit", type=int, default=100,
                   help="at most this many (default 100; more than 500 are fetched in pages)")
    p.add_argument("--cursor", help="start after the rows an earlier listing showed (the cursor "
                                    "it printed)")
    p.set_defaults(func=guard("ls", cmd_ls))
