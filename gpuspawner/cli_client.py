"""``gpuhub submit | ls | logs | cancel | quota | pools`` (and ``sweep``,
cli_sweep.py): the REST API from a shell.

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
import json
import os
import re
import shutil
import sys
import textwrap
import time
from typing import Any, Callable, Iterable, Optional, Sequence

from .cli_workdir import command_words, elsewhere_warning, job_directory
from .isolation.resources import human_memory
from .sim.whatif import parse_value
from .times import from_iso
from .client import (TERMINAL_STATES, ApiError, GpuHubClient, GpuHubError, TokenMissing,
                     resolve_token, resolve_url)

STATES = ("waiting", "queued", "held", "running", "stopping", "succeeded", "failed", "cancelled")
ACTIVE_STATES = ("waiting", "queued", "held", "running", "stopping")


class UsageError(Exception):
    """A command line that cannot be run (exit 2)."""


# ---- pure helpers: parsing ----------------------------------------------------------

def parse_env_pair(text: str) -> tuple[str, str]:
    """``K=V`` → (K, V); the value may contain '=' and be empty."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


# A papermill-style parameter value: int, float, true/false, none, else the string.
parse_param_value = parse_value


def parse_limit(text: str) -> Optional[int]:
    """A quota limit: a non-negative integer, or ``none`` for no limit."""
    if text.strip().lower() in ("none", "null", "unlimited", "-"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer or 'none'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


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
    return spec


def quota_change(team: Optional[dict], pool: Optional[str], nominal: Optional[int],
                 borrowing: Any = ..., lending: Any = ...,
                 weight: Optional[float] = None) -> dict:
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
        body["quotas"] = {pool: quota}
    return body


def parse_time(value: Optional[str]) -> Optional[float]:
    """UNIX seconds from the API's ISO 8601 times (``…Z``)."""
    t = from_iso(value)
    return None if t is None else t.timestamp()


# ---- pure helpers: formatting ------------------------------------------------------------

def fmt_age(seconds: Optional[float]) -> str:
    """A short duration: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                 width: Optional[int] = None) -> str:
    """Columns left-aligned, two spaces apart, no trailing spaces. With
    ``width`` (a terminal's), the last column is wrapped onto lines of their
    own, indented under it, so that no line is longer (when the other columns
    leave it at least 20 characters); without, it is left whole."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    indent = sum(widths[:-1]) + 2 * (len(headers) - 1)
    room = None if width is None else max(width - indent, 20)
    lines = []
    for row in [list(headers)] + rows:
        head = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        last = textwrap.wrap(row[-1], room, break_on_hyphens=False) if room else [row[-1]]
        lines.append((head + "  " + (last[0] if last else "")).rstrip())
        lines.extend(" " * indent + more for more in last[1:])
    return "\n".join(lines)


def fmt_gpus(w: dict) -> str:
    nodes = w.get("nodes") or 1
    if nodes > 1:
        return f"{nodes}x{w.get('gpus_per_node', 0)}"
    return str(w.get("gpus", 0))


def fmt_resources(w: dict) -> str:
    """CPUs/memory per node ("1/8GiB"); "-" for one submitted before requests."""
    if w.get("cpus") is None or w.get("memory") is None:
        return "-"
    return f"{w['cpus']:g}/{human_memory(w['memory'])}"


def fmt_limit(value: Optional[int]) -> str:
    return "none" if value is None else str(value)


WORKLOAD_HEADERS = ("ID", "KIND", "NAME", "TEAM", "USER", "STATE", "GPUS", "CPU/MEM", "POOL",
                    "AGE", "START", "REASON")
# The scheduler's "team a is at 3/2 default GPUs ...": used/nominal.
_AT_QUOTA = re.compile(r"\bis at (\d+(?:\.\d+)?)/(\d+) (\S+) GPUs\b")  # shares: 1.25/2


def readable_reason(reason: Optional[str]) -> str:
    """The reason on one line, with "is at 3/2 default GPUs" spelled out as
    "has 3 default GPUs in use, quota 2 (borrowing 1)"."""
    def spell(m: re.Match) -> str:
        used, nominal, pool = float(m.group(1)), int(m.group(2)), m.group(3)
        text = f"has {used:g} {pool} GPU{'s' if used != 1 else ''} in use, quota {nominal}"
        return text + (f" (borrowing {used - nominal:g})" if used > nominal else "")
    return _AT_QUOTA.sub(spell, " ".join((reason or "").split()))


def workload_name(w: dict) -> str:
    """The name, or for a notebook server without one JupyterHub's default server."""
    if w.get("name"):
        return w["name"]
    return "(default)" if w.get("kind") == "notebook" else "-"


def expected_start(w: dict, now: float) -> str:
    """A queued workload's expected start, as ``squeue --start`` would say it:
    "in ~12m (5m-30m)", "unknown", or "-" before the scheduler looked at it."""
    e = w.get("expected_start")
    if not e:
        return "-"
    if e.get("time") is None:
        return "unknown"
    at, low, high = (parse_time(e.get(k)) for k in ("time", "earliest", "latest"))
    if high is not None and high - now < 60:
        return "now"
    text = f"in ~{fmt_age(at - now)}"
    if low is not None and high is not None:
        text += f" ({fmt_age(low - now)}-{fmt_age(high - now)})"
    return text


def workload_row(w: dict, now: float) -> list[str]:
    submitted = parse_time(w.get("submitted_at"))
    # The current attempt's start: a requeued workload waiting again has none.
    attempts = w.get("attempts") or []
    started = parse_time(attempts[-1].get("started_at") if attempts else w.get("started_at"))
    if w.get("state") == "queued":
        start = expected_start(w, now)
    elif w.get("state") == "held" or not started:
        start = "-"
    else:
        start = fmt_age(now - started) + " ago"
    return [w.get("id", ""), w.get("kind") or "job", workload_name(w), w.get("team", ""),
            w.get("user", ""), w.get("state", ""), fmt_gpus(w), fmt_resources(w), w.get("pool", ""),
            fmt_age(now - submitted) if submitted else "-", start,
            readable_reason(w.get("reason"))]


def format_workloads(workloads: Sequence[dict], now: float, width: Optional[int] = None) -> str:
    """The ``gpuhub ls`` table; the reasons wrapped to ``width`` when given."""
    if not workloads:
        return "No workloads."
    return format_table(WORKLOAD_HEADERS, [workload_row(w, now) for w in workloads], width)


def format_pools(pools: Sequence[dict]) -> str:
    rows = []
    for p in pools:
        capacity = str(p.get("capacity", 0))
        if p.get("total", p.get("capacity")) != p.get("capacity"):
            capacity += f" of {p['total']}"
        queued = str(p.get("queued_workloads", 0))
        if p.get("queued_workloads"):
            queued += f" ({p.get('queued_gpus', 0)} GPUs)"
        teams = ", ".join(f"{t}={n}" for t, n in sorted((p.get("teams") or {}).items())) or "-"
        rows.append([p.get("name", ""), capacity, p.get("used", 0), p.get("free", 0), queued,
                     teams])
    if not rows:
        return "No pools."
    return format_table(("POOL", "CAPACITY", "USED", "FREE", "QUEUED", "TEAMS"), rows)


def format_quotas(teams: Sequence[dict]) -> str:
    rows = []
    for t in teams:
        weight = f"{t.get('weight', 1.0):g}"
        quotas = t.get("quotas") or {}
        if not quotas:
            rows.append([t.get("name", ""), "-", weight, "-", "-", "-", "-"])
        for pool, q in sorted(quotas.items()):
            rows.append([t.get("name", ""), pool, weight, q.get("nominal", 0),
                         fmt_limit(q.get("borrowing_limit")), fmt_limit(q.get("lending_limit")),
                         q.get("used", 0)])
    if not rows:
        return "No teams."
    return format_table(("TEAM", "POOL", "WEIGHT", "NOMINAL", "BORROWING", "LENDING", "USED"),
                        rows)


def format_cancelled(w: dict) -> str:
    if w.get("state") == "cancelled":
        return f"{w['id']} cancelled"
    return f"{w['id']} {w.get('state', '')}: {w.get('reason') or 'stopping'}"


# ---- commands -------------------------------------------------------------------------

def _client(args) -> GpuHubClient:
    return GpuHubClient(resolve_url(args.url), resolve_token(args.token))


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _note(text: str) -> None:
    print(f"gpuhub: {text}", file=sys.stderr, flush=True)


def _stream(client: GpuHubClient, wid: str, attempt: Optional[int] = None) -> None:
    for text in client.follow_logs(wid, attempt, notify=_note):
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
        w = client.workload(w["id"])
    return w


def default_working_dir(client: GpuHubClient, spec: dict) -> None:
    """A job given no --workdir runs in this directory when it is in the
    user's workspace; else a warning when its files are not there."""
    workspace = client.me().get("workspace")
    if workspace:
        cwd = os.getcwd()
        workdir, missing = job_directory(cwd, workspace, command_words(spec))
        if workdir:
            spec["working_dir"] = workdir
        elif missing:
            _note(elsewhere_warning(cwd, workspace, missing))


def cmd_submit(args) -> int:
    from .cli_sweep import check_options, submit_sweep
    spec = build_job_spec(args)
    problem = check_options(args)
    if problem:
        raise UsageError(problem)
    if args.sweep and args.follow:
        raise UsageError("-f/--follow follows one job, not a sweep: see its tasks with "
                         "`gpuhub sweep show ID`")
    client = _client(args)
    if args.workdir is None:
        default_working_dir(client, spec)
    if args.sweep:
        return submit_sweep(args, client, spec)
    w = client.submit(spec)
    if args.json:
        _print_json(w)
    else:
        # The id alone on stdout (ID=$(gpuhub submit ...)); the rest for people.
        print(w["id"], flush=True)
        _note(submitted_note(_looked_at(client, w), args.follow))
    if not args.follow:
        return 0
    _stream(client, w["id"])
    final = client.wait(w["id"], TERMINAL_STATES, timeout=30)
    if final["state"] != "succeeded":
        _note(f"{w['id']} {final['state']}: {final.get('reason') or ''}".rstrip(": "))
        return 1
    return 0


def cmd_ls(args) -> int:
    states = args.state or ([] if args.all else list(ACTIVE_STATES))
    workloads = _client(args).list_workloads(state=states, team=args.team, user=args.user,
                                             pool=args.pool, project=args.project,
                                             kind=args.kind, limit=args.limit, detail=True)
    if args.json:
        _print_json({"workloads": workloads})
    else:
        # On a terminal the reasons wrap to its width; piped (or --wide), one line each.
        width = None if args.wide or not sys.stdout.isatty() else \
            shutil.get_terminal_size().columns
        print(format_workloads(workloads, time.time(), width))
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
    client = _client(args)
    if args.attempt is None and not args.json:
        note = earlier_attempts_note(client.workload(args.id))
        if note:
            _note(note)
    if args.follow:
        _stream(client, args.id, args.attempt)
        return 0
    text = client.logs(args.id, args.attempt)
    if args.json:
        _print_json({"id": args.id, "attempt": args.attempt, "text": text})
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def cmd_cancel(args) -> int:
    client = _client(args)
    status, out = 0, []
    for wid in args.ids:
        try:
            w = client.cancel(wid)
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
        _print_json(out[0] if len(args.ids) == 1 and out else out)
    return status


def cmd_quota(args) -> int:
    words = list(args.words)
    setting = bool(words) and words[0] == "set"
    flags_given = any(v is not None for v in (args.pool, args.nominal, args.weight)) or \
        args.borrowing_limit is not ... or args.lending_limit is not ...
    if not setting:
        if len(words) > 1:
            raise UsageError("usage: gpuhub quota [TEAM] | gpuhub quota set TEAM --pool P ...")
        if flags_given:
            raise UsageError("--pool/--nominal/--borrowing-limit/--lending-limit/--weight go "
                             "with 'gpuhub quota set TEAM'")
        client = _client(args)
        teams = [client.team(words[0])] if words else client.teams()
        if args.json:
            _print_json(teams[0] if words else {"teams": teams})
        else:
            print(format_quotas(teams))
        return 0
    if len(words) != 2:
        raise UsageError("usage: gpuhub quota set TEAM --pool P --nominal N "
                         "[--borrowing-limit N|none] [--lending-limit N|none] [--weight W]")
    name = words[1]
    pool_flags = args.nominal is not None or args.borrowing_limit is not ... or \
        args.lending_limit is not ...
    if pool_flags and args.pool is None:
        raise UsageError("--nominal, --borrowing-limit and --lending-limit need --pool")
    if args.pool is not None and args.nominal is None:
        raise UsageError("--pool needs --nominal N")
    if args.pool is None and args.weight is None:
        raise UsageError("nothing to change: give --pool P --nominal N and/or --weight W")
    client = _client(args)
    current = None
    if args.pool is not None:
        try:
            current = client.team(name)
        except ApiError as e:
            if e.status != 404:
                raise
    body = quota_change(current, args.pool, args.nominal, args.borrowing_limit,
                        args.lending_limit, args.weight)
    team = client.set_team(name, weight=body.get("weight"), quotas=body.get("quotas"))
    if args.json:
        _print_json(team)
    else:
        print(format_quotas([team]))
        for warning in team.get("warnings") or ():
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_pools(args) -> int:
    pools = _client(args).pools()
    if args.json:
        _print_json({"pools": pools})
    else:
        print(format_pools(pools))
    return 0


def _guard(name: str, fn: Callable[[Any], int]) -> Callable[[Any], int]:
    """Errors as one line on stderr: 1 for refused requests, 2 for usage."""
    def run(args) -> int:
        try:
            return fn(args)
        except (UsageError, TokenMissing) as e:
            print(f"gpuhub {name}: {e}", file=sys.stderr)
            return 2
        except GpuHubError as e:
            print(f"gpuhub {name}: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return run


# ---- argparse ---------------------------------------------------------------------------

def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("connection")
    g.add_argument("--url", help="the service URL (default $GPUHUB_URL, else "
                                 "http://127.0.0.1:8000/services/gpuhub)")
    g.add_argument("--token", help="a JupyterHub API token (default $GPUHUB_TOKEN, else "
                                   "$JUPYTERHUB_API_TOKEN)")
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    return common


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
    p.add_argument("--notebook", metavar="NB.ipynb", help="run a notebook with papermill")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append",
                   metavar=("KEY", "VALUE"), help="notebook parameter (repeat)")
    p.add_argument("--output-notebook", help="where the executed notebook goes")


def add_parsers(sub) -> None:
    """Register the client commands into the ``gpuhub`` subparsers."""
    common = common_options()

    p = sub.add_parser("submit", parents=[common], help="submit a job",
                       usage="gpuhub submit [options] -- COMMAND... | --notebook NB.ipynb",
                       description="Submit a job and print its id. The command goes after '--': "
                                   "several words are run as an argv list without a shell, one "
                                   "quoted argument with /bin/sh -c.")
    p.add_argument("--name", help="a name for the workload")
    add_job_options(p)
    p.add_argument("-f", "--follow", action="store_true",
                   help="stream the output until the job ends; exit 0 only if it succeeded")
    from .cli_sweep import add_parsers as add_sweep, add_submit_options
    add_submit_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after '--'")
    p.set_defaults(func=_guard("submit", cmd_submit))

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
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.set_defaults(func=_guard("ls", cmd_ls))

    p = sub.add_parser("logs", parents=[common], help="print a workload's output")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    p.add_argument("--attempt", type=int,
                   help="attempt number, from 0 (default: the latest; a preempted job is "
                        "requeued as its next attempt)")
    p.add_argument("id")
    p.set_defaults(func=_guard("logs", cmd_logs))

    p = sub.add_parser("cancel", parents=[common], help="cancel workloads")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=_guard("cancel", cmd_cancel))

    p = sub.add_parser("quota", parents=[common], help="show or set team quotas",
                       usage="gpuhub quota [TEAM]\n       gpuhub quota set TEAM --pool P "
                             "--nominal N [--borrowing-limit N|none] [--lending-limit N|none] "
                             "[--weight W]",
                       description="Show the quotas of your teams (all for admins), or, as an "
                                   "admin, set one. Limits not given are kept; 'none' means "
                                   "no limit.")
    p.add_argument("words", nargs="*", metavar="TEAM | set TEAM")
    p.add_argument("--pool")
    p.add_argument("--nominal", type=int)
    p.add_argument("--borrowing-limit", type=parse_limit, default=..., metavar="N|none")
    p.add_argument("--lending-limit", type=parse_limit, default=..., metavar="N|none")
    p.add_argument("--weight", type=float)
    p.set_defaults(func=_guard("quota", cmd_quota))

    p = sub.add_parser("pools", parents=[common], help="GPU pools: capacity, use, queue")
    p.set_defaults(func=_guard("pools", cmd_pools))

    add_sweep(sub, common)
