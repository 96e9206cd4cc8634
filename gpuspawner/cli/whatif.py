"""``gpuhub trace export`` and ``gpuhub simulate --from-history``: the
cluster's own history, from the scheduler service's API (``--url``,
``--token`` as for the other client commands; exporting needs an admin's
token, a preview an admin's or a team lead's).

``format_preview`` is pure (a preview in, the table out), the same table
the admin panel shows.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from .common import UsageError, connect, format_table, guard, print_json
from ..sim.trace import TraceJob, write_trace
from ..sim.whatif import ChangeError, duration, parse_setting, percent

POLL_S = 0.5


def _gpu_h(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _arrow(now: str, then: str) -> str:
    return now if now == then else f"{now} → {then}"


def _change(now: Optional[float], then: Optional[float]) -> str:
    if now is None or then is None:
        return "-"
    diff = then - now
    return "0" if abs(diff) < 0.05 else ("+" if diff > 0 else "") + duration(diff)


def format_preview(view: dict) -> str:
    """A finished preview as text: per team current → proposed, then the
    fidelity and the assumptions."""
    r = view["result"]
    settings = ", ".join(f"{k}={'none' if v is None else v}" for k, v in view["changes"].items())
    lines = [f"preview {view['id']}: {settings}",
             f"replayed {view['since']} to {view['until']} ({duration(r['horizon_s'])}, "
             f"{r['jobs']} workloads, {r['capacity_gpus']} GPUs) under the current settings "
             f"and the proposed ones", ""]
    cur, new = r["current"]["teams"], r["proposed"]["teams"]
    rows = []
    for team in sorted(new):
        c, n = cur.get(team), new[team]
        if c is None:
            continue
        rows.append([team, n["jobs"],
                     _arrow(duration(c["mean_wait_s"]), duration(n["mean_wait_s"]))
                     + (f" ±{duration(n['margin_s'])}" if n["mean_wait_s"] is not None else ""),
                     _change(c["mean_wait_s"], n["mean_wait_s"]),
                     _arrow(duration(c["p95_wait_s"]), duration(n["p95_wait_s"])),
                     _arrow(_gpu_h(c["gpu_hours"]), _gpu_h(n["gpu_hours"])),
                     _arrow(_gpu_h(c["nominal_gpu_hours"]), _gpu_h(n["nominal_gpu_hours"])),
                     _arrow(str(c["preemptions"]), str(n["preemptions"]))])
    lines.append(format_table(("TEAM", "JOBS", "MEAN WAIT", "CHANGE", "P95 WAIT", "GPU-HOURS",
                               "NOMINAL GPU-H", "PREEMPTIONS"), rows))
    lines += ["", "cluster utilisation " + _arrow(percent(r["current"]["utilisation"]),
                                                  percent(r["proposed"]["utilisation"])), ""]
    fid = r["fidelity"]
    lines.append("fidelity: the current settings replayed against what happened")
    lines.append(format_table(("TEAM", "ACTUAL MEAN WAIT", "REPLAYED", "ERROR"), [
        [team, duration(f["actual_mean_wait_s"]), duration(f["replayed_mean_wait_s"]),
         ("+" if f["error_s"] > 0 else "") + duration(f["error_s"])
         + (f" ({f['error_pct']:+.0f}%)" if f["error_pct"] is not None else "")]
        for team, f in sorted(fid["teams"].items())]))
    lines.append(f"utilisation: actual {percent(fid['actual_utilisation'])}, replayed "
                 f"{percent(fid['replayed_utilisation'])} "
                 f"({fid['utilisation_error_points']:+.1f} points)")
    lag = r["start_lag"]
    lines.append(f"± after a mean wait: the largest team error above "
                 f"({duration(fid['wait_error_s'])}), plus, since a start may come as late as "
                 f"the slowest tenth of the history's did, {duration(lag['after_submit_p90_s'])} "
                 f"for a job's own start and {duration(lag['after_exit_p90_s'])} for each start "
                 f"of other work it waited for, whose run may also have been "
                 f"{duration(r['run_jitter_s'])} longer or shorter (how much repeated work "
                 f"varied)")
    lines += ["", "assumptions:", *(f"- {a}" for a in r["assumptions"])]
    if r["rejected"]["proposed"]["count"] > r["rejected"]["current"]["count"]:
        lines.append(f"- {r['rejected']['proposed']['count']} workload(s) could never run under "
                     f"the proposed settings (for one: "
                     f"{(r['rejected']['proposed']['first'] or ['their quota'])[0]})")
    return "\n".join(lines)


def cmd_simulate_from_history(args) -> int:
    if args.trace or args.cluster or args.sweep:
        raise UsageError("--from-history replays the service's own history: it takes no TRACE, "
                         "--cluster or --sweep")
    if not args.set:
        raise UsageError("--from-history needs the change to preview: --set KEY=VALUE, e.g. "
                         "--set team.vision.default.nominal=4 (repeat for several)")
    try:
        changes = dict(parse_setting(text) for text in args.set)
    except ChangeError as e:
        raise UsageError(str(e))
    client = connect(args)
    view = client.start_preview({"since": args.from_history, "set": changes})
    tty = sys.stderr.isatty()
    try:
        while view["state"] == "running":
            if tty:
                print(f"\rreplaying {view['progress']:.0%}", end="", file=sys.stderr, flush=True)
            time.sleep(POLL_S)
            view = client.get_preview(view["id"])
    except KeyboardInterrupt:
        client.cancel_preview(view["id"])
        print(f"\npreview {view['id']} cancelled", file=sys.stderr)
        return 130
    if tty:
        print("\r", end="", file=sys.stderr)
    if args.json:
        print_json(view)
    elif view["state"] == "done":
        print(format_preview(view))
    if view["state"] != "done":
        print(f"gpuhub simulate: preview {view['id']} {view['state']}: {view.get('error') or ''}",
              file=sys.stderr)
        return 1
    return 0


def cmd_trace_export(args) -> int:
    doc = connect(args).get_history_trace(
        since=args.since, format="json", pseudonymise="true" if args.pseudonymise else "false")
    jobs = [TraceJob(**row) for row in doc["jobs"]]
    write_trace(args.output, jobs)
    cluster = args.cluster or args.output.with_suffix(".cluster.yaml")
    cluster.write_text(yaml.safe_dump(doc["cluster"], sort_keys=False))
    left = "; ".join(f"{n} that {why}" for why, n in doc["left_out"].items())
    if args.json:
        print_json({"trace": str(args.output), "cluster": str(cluster), "jobs": len(jobs),
                     "since": doc["since"], "until": doc["until"], "left_out": doc["left_out"]})
    else:
        print(f"wrote {len(jobs)} workloads submitted from {doc['since']} to {doc['until']} to "
              f"{args.output}, and the cluster file to {cluster}"
              + (f" (left out: {left})" if left else ""))
        print(f"replay it: gpuhub simulate {args.output} --cluster {cluster}")
    return 0


def add_history_options(sim: argparse.ArgumentParser) -> None:
    """``gpuhub simulate``'s options for a preview of the service's history."""
    sim.add_argument("--from-history", metavar="PERIOD",
                     help="replay the service's own history of PERIOD (14d, 36h, or a start "
                          "date) under the current settings and with --set, through its API; "
                          "prints the admin panel's preview table")
    sim.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="a setting to preview (repeat): team.TEAM.POOL.nominal=N, "
                          "team.TEAM.POOL.borrowing_limit=N|none, team.TEAM.POOL.lending_limit="
                          "N|none, team.TEAM.weight=W, policy.KNOB=V (docs/admin-panel.md)")
    sim.add_argument("--url", help="with --from-history: the service URL (default $GPUHUB_URL)")
    sim.add_argument("--token", help="with --from-history: an admin's or team lead's API token "
                                     "(default $GPUHUB_TOKEN)")


def add_trace_export_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("trace-export", parents=[common], prog="gpuhub trace export",
                       help="gpuhub trace export: the service's own history as a trace and a "
                            "cluster file (admins)",
                       description="Write the submissions of a period (jobs, notebook sessions "
                                   "and deployment replicas, with their real run times) as a "
                                   "trace `gpuhub simulate` replays, and the cluster file of the "
                                   "current pools, nodes and quotas.")
    p.add_argument("output", type=Path, metavar="OUT.csv")
    p.add_argument("--since", required=True, metavar="PERIOD",
                   help="how far back: 14d, 36h, 90m, or the start as an ISO date")
    p.add_argument("--pseudonymise", action="store_true",
                   help="rename teams, users, workloads and nodes (team-1, user-1, ...) for "
                        "sharing the trace")
    p.add_argument("--cluster", type=Path, metavar="CLUSTER.yaml",
                   help="where the cluster file goes (default: OUT.cluster.yaml)")
    p.set_defaults(func=guard("trace export", cmd_trace_export))
