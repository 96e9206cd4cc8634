"""The ``gpuhub`` command line."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

from ..scheduler.policy import POLICIES, get_policy


def _fmt_s(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def cmd_sweep(args) -> int:
    from ..sim.sweep import SweepError, format_table, judge, load_sweep, run_sweep, tally

    try:
        sweep = load_sweep(args.sweep)
        if args.policy:
            sweep.policies = list(dict.fromkeys([*args.policy, sweep.baseline, sweep.candidate]))
    except (SweepError, OSError) as e:
        print(f"gpuhub simulate: {e}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows = run_sweep(sweep, check=args.check, progress=None if args.json else progress)
    missed = judge(rows, sweep)
    by_policy = tally(rows, sweep)
    # Issue 19's goals restated for these traces (sim.sweep.RESTATED_GOALS):
    # reported beside the issue's, the exit status stays with the issue's.
    restated = judge(rows, sweep, restated=True)
    restated_by_policy = tally(rows, sweep, restated=True)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        print(json.dumps({"goals_missed": missed, "baseline": sweep.baseline,
                          "candidate": sweep.candidate, "goals_missed_by_policy": by_policy,
                          "restated_goals_missed": restated,
                          "restated_goals_missed_by_policy": restated_by_policy}))
    else:
        print(format_table(rows, sweep.baseline))
        print()
        if sweep.verdict == "issue32":
            from ..sim.verdict import goal_table
            print(f"issue 32's goals, {sweep.candidate} against {sweep.baseline}:")
            print(goal_table(rows, sweep.baseline, sweep.candidate))
            print()
        for line in missed:
            print(f"goal missed: {line}")
        for name, counts in by_policy.items():
            parts = ", ".join(f"{goal} {n}" for goal, n in sorted(counts.items()))
            print(f"as the candidate, {name} misses {sum(counts.values())}"
                  + (f" ({parts})" if parts else ""))
        for name, counts in restated_by_policy.items():
            parts = ", ".join(f"{goal} {n}" for goal, n in sorted(counts.items()))
            print(f"restated goals: as the candidate, {name} misses {sum(counts.values())}"
                  + (f" ({parts})" if parts else ""))
        print(f"{len(missed)} goal(s) missed by {sweep.candidate} against {sweep.baseline}"
              if missed else f"every goal met by {sweep.candidate} against {sweep.baseline}")
    return 1 if missed else 0


def cmd_simulate(args) -> int:
    from ..sim.cluster import ClusterError, load_cluster
    from ..sim.plot import plot_usage
    from ..sim.estimates import StartEstimates
    from ..sim.simulate import SimulationError, simulate
    from ..sim.trace import TraceError, read_trace

    other = _simulate_otherwise(args)
    if other is not None:
        return other
    try:
        trace = read_trace(args.trace)
        cluster = load_cluster(args.cluster)
        policies = [get_policy(name) for name in args.policy]
    except (TraceError, ClusterError, ValueError, OSError) as e:
        print(f"gpuhub simulate: {e}", file=sys.stderr)
        return 2
    results = []
    for policy in policies:
        estimates = StartEstimates(policy) if args.estimates else None
        try:
            result = simulate(trace, cluster, policy, restart_cost_s=args.restart_cost,
                              check=args.check, estimates=estimates,
                              sharing=not args.no_sharing)
        except SimulationError as e:
            print(f"gpuhub simulate: {e}", file=sys.stderr)
            return 2
        if estimates is not None:
            result.metrics["start_estimates"] = estimates.summary()
        results.append(result)
        _report(args, result, policy.name if len(policies) > 1 else None)
    if args.plot:
        plot_usage(args.plot, {r.policy: r.timeline for r in results}, cluster.total_gpus)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 1 if any(r.problems for r in results) else 0


def _simulate_otherwise(args) -> Optional[int]:
    """The exit status of a simulate that is not a replay of one trace: a
    preview of the service's history, a sweep, or a usage error."""
    if args.from_history or args.set:
        from .common import guard
        from .whatif import cmd_simulate_from_history
        if not args.from_history:
            print("gpuhub simulate: --set goes with --from-history PERIOD (a preview of the "
                  "service's own history)", file=sys.stderr)
            return 2
        return guard("simulate", cmd_simulate_from_history)(args)
    if args.sweep:
        if args.trace or args.cluster or args.records or args.plot:
            print("gpuhub simulate: --sweep generates its own traces and clusters; it takes no "
                  "TRACE, --cluster, --records or --plot", file=sys.stderr)
            return 2
        return cmd_sweep(args)
    if args.trace is None or args.cluster is None:
        print("gpuhub simulate: needs TRACE.csv and --cluster CLUSTER.yaml (or --sweep SWEEP.yaml)",
              file=sys.stderr)
        return 2
    return None


def _report(args, result, policy: Optional[str]) -> None:
    """One policy's replay: its records file (``policy``: one of several,
    named in the file's name), its metrics, the invariants it broke."""
    from ..sim.estimates import format_estimates
    from ..sim.metrics import write_records
    if args.records:
        path = args.records
        if policy:
            path = path.with_name(f"{path.stem}-{policy}{path.suffix}")
        write_records(path, result.records)
    if args.json:
        print(json.dumps(result.metrics, sort_keys=True))
    else:
        _print_metrics(result.metrics)
        if "start_estimates" in result.metrics:
            print(format_estimates(result.metrics["start_estimates"]))
    for problem in result.problems[:20]:
        print(f"  invariant broken: {problem}", file=sys.stderr)


def _print_metrics(m: dict) -> None:
    print(f"policy {m['policy']}: {m['finished']}/{m['jobs']} jobs finished "
          f"({m['rejected']} rejected, {m['timed_out']} hit their time limit)")
    if "avg_jct_s" in m:
        print(f"  JCT        avg {_fmt_s(m['avg_jct_s'])}  p50 {_fmt_s(m['p50_jct_s'])}  "
              f"p99 {_fmt_s(m['p99_jct_s'])}")
        print(f"  queueing   avg {_fmt_s(m['avg_queue_s'])}  p50 {_fmt_s(m['p50_queue_s'])}  "
              f"p99 {_fmt_s(m['p99_queue_s'])}")
        print(f"  makespan {_fmt_s(m['makespan_s'])}  utilisation while backlogged "
              f"{m['utilization_backlog']:.1%}  Jain fairness {m['jain_fairness']:.3f}")
        worst = ", ".join(f"{t} {v:.1f}" for t, v in m["max_slowdown_per_team"].items())
        print(f"  max slowdown per team: {worst}")
    print(f"  preemptions {m['preemptions']}  quota violations {m['quota_violations']}  "
          f"cycles {m['cycles']}  wall {m['wall_s']:.1f} s")
    if "notebook_gpu_hours" in m:
        print(f"  GPU shares {'on' if m['sharing'] else 'off (each share asks a whole GPU)'}: "
              f"notebooks held {m['notebook_gpu_hours']:.0f} GPU-h, peak "
              f"{m['notebook_peak_gpus']} GPUs; stranded in shared GPUs while whole-GPU work "
              f"waited {m['stranded_gpu_hours']:.0f} GPU-h")
        if "whole_job_p50_wait_s" in m:
            print(f"  whole-GPU jobs wait p50 {_fmt_s(m['whole_job_p50_wait_s'])}  "
                  f"p99 {_fmt_s(m['whole_job_p99_wait_s'])}")
        if "notebook_p50_start_s" in m:
            print(f"  notebooks start after p50 {_fmt_s(m['notebook_p50_start_s'])}  "
                  f"p99 {_fmt_s(m['notebook_p99_start_s'])}")
    for key, what in (("sweep_makespan_s", "sweep"), ("pipeline_makespan_s", "pipeline")):
        for name, seconds in m.get(key, {}).items():
            print(f"  {what} {name}: makespan {_fmt_s(seconds)}")


def cmd_trace(args) -> int:
    from ..sim.trace import PHILLY_TEAMS, generate_notebook_trace, generate_philly_trace, write_trace

    if args.kind == "notebook-heavy":
        jobs = generate_notebook_trace(args.jobs, args.notebooks, seed=args.seed,
                                       capacity_gpus=args.capacity, load=args.load,
                                       teams=args.teams or PHILLY_TEAMS)
    else:
        if args.notebooks:
            print("gpuhub trace: --notebooks goes with --kind notebook-heavy", file=sys.stderr)
            return 2
        jobs = generate_philly_trace(args.jobs, seed=args.seed, capacity_gpus=args.capacity,
                                     load=args.load, teams=args.teams or PHILLY_TEAMS)
    write_trace(args.output, jobs)
    print(f"wrote {len(jobs)} jobs to {args.output}")
    return 0


def cmd_audit_verify(args) -> int:
    from sqlalchemy import func, select

    from ..store import AuditEntry, Store
    from ..store.audit import verify
    url = args.db_url or f"sqlite:///{args.data_dir}/gpuhub.sqlite"
    store = Store(url, run_migrations=False)
    try:
        with store.session() as s:
            count = s.scalar(select(func.count()).select_from(AuditEntry))
            problem = verify(s.scalars(select(AuditEntry).order_by(AuditEntry.id))
                             .yield_per(1000))
    finally:
        store.close()
    if problem:
        print(f"gpuhub audit verify: {problem}", file=sys.stderr)
        return 1
    print(f"audit log: {count} entries, hash chain intact")
    return 0


def cmd_kube_manifests(args) -> int:
    """The cluster objects that follow from the quotas: team namespaces
    with their NetworkPolicies and Kueue queues, as YAML for kubectl apply."""
    from dataclasses import replace

    import yaml
    from sqlalchemy import func, select
    from traitlets.config import Config, PyFileConfigLoader

    from ..backends.kubernetes.config import KubernetesJobs
    from ..backends.kubernetes.manifests import kueue_queues, team_namespace, team_space
    from gpuspawner.service.loop.rebuild import load_teams
    from ..store import NodeRow, Store, TeamRow
    config = Config()
    if args.config:
        path = os.path.abspath(args.config)
        config = PyFileConfigLoader(os.path.basename(path), os.path.dirname(path)).load_config()
    settings = KubernetesJobs(config=config).settings()
    settings = replace(settings, team_namespaces=settings.team_namespaces or args.namespaces,
                       kueue=settings.kueue or args.kueue)
    url = args.db_url or f"sqlite:///{args.data_dir}/gpuhub.sqlite"
    store = Store(url, run_migrations=False)
    try:
        with store.session() as s:
            teams = load_teams(s)
            # a quota an admin set (bytes) wins over the configuration's
            own = {n: str(q) for n, q in s.execute(select(TeamRow.name, TeamRow.storage_quota))
                   if q is not None}
            capacity = dict(s.execute(select(NodeRow.pool, func.sum(NodeRow.gpus))
                                      .group_by(NodeRow.pool)).all())
    finally:
        store.close()
    objects = []
    if settings.team_namespaces:
        for team in sorted(teams, key=lambda t: t.name):
            objects += team_namespace(team, settings)
    if settings.kueue:
        objects += kueue_queues(teams, capacity, settings)
    sizes = config.get("GpuHubService", {}).get("team_storage_quotas", {})
    for team in sorted(teams, key=lambda t: t.name):
        claim = team_space(team, settings,
                           own.get(team.name) or sizes.get(team.name, sizes.get("*")))
        objects += [claim] if claim else []
    print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return 0


def cmd_bench(args) -> int:
    if args.target == "api":
        from ..bench.api import cmd_bench_api
        return cmd_bench_api(args)
    if args.target == "serving":
        from ..serving.bench import cmd_bench_serving
        return cmd_bench_serving(args)
    if args.target == "kube":
        from ..bench.kube import format_rows as kube_rows, run_bench as kube_bench
        rows = kube_bench(args.kube_pods, args.kube_seconds, args.kube_changes,
                          progress=lambda text: args.json or print(text, file=sys.stderr))
        print("\n".join(json.dumps(r, sort_keys=True) for r in rows) if args.json
              else kube_rows(rows))
        return 0
    if args.target == "sweeps":
        from ..bench.sweeps import format_rows as sweep_rows, run_bench as sweep_bench
        rows = sweep_bench(args.sweep_tasks, args.sweeps_db_url)
        print("\n".join(json.dumps(r, sort_keys=True) for r in rows) if args.json
              else sweep_rows(rows))
        return 0
    if args.target == "storage":
        from ..bench.storage import format_rows as storage_rows, run_bench as storage_bench
        rows = storage_bench(args.storage_files)
        print("\n".join(json.dumps(r, sort_keys=True) for r in rows) if args.json
              else storage_rows(rows))
        return 0
    if args.target == "culler":
        from ..culler.bench import format_rows as culler_rows, run_bench as culler_bench
        rows = culler_bench()
        print("\n".join(json.dumps(r, sort_keys=True) for r in rows) if args.json
              else culler_rows(rows))
        return 0
    from ..sim.bench import format_rows, run_bench

    def progress(row):
        if not args.json:
            print(f"  measured {row['pending']} pending "
                  f"({'with' if row['explain'] else 'without'} reasons)", file=sys.stderr)

    rows = run_bench(tuple(args.sizes), cycles=args.cycles, seed=args.seed, progress=progress)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        print("gpuhub cycle on 1,000 nodes × 8 GPUs, 50 teams; baseline: fifo in the same run")
        print(format_rows(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuhub", description="GPU Hub command line")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    _add_trace(sub)
    _add_bench(sub)
    _add_audit(sub)
    _add_kube_manifests(sub)
    from ..hub.up import add_parser as add_up
    add_up(sub)
    from .upgrade import add_parser as add_upgrade
    add_upgrade(sub)
    from .jobs import add_parsers as add_client
    add_client(sub)
    from .deploy import add_parsers as add_deploy
    add_deploy(sub)
    from .schedule import add_parsers as add_schedule
    add_schedule(sub)
    from .dataset import add_parsers as add_dataset
    add_dataset(sub)
    return parser


def _add_simulate(sub) -> None:
    sim = sub.add_parser("simulate", help="replay a job trace through the scheduler")
    sim.add_argument("trace", type=Path, nargs="?",
                     help="TRACE.csv (job_id,team,user,submit_time_s,num_gpus,"
                          "duration_s[,time_limit_s,gpu_type,priority,num_nodes,kind,gpu_share])")
    sim.add_argument("--cluster", type=Path, help="CLUSTER.yaml (pools and teams)")
    sim.add_argument("--sweep", type=Path,
                     help="SWEEP.yaml: generate its traces, replay every policy, print one table; "
                          "exit status 1 when a goal is missed (docs/simulator.md)")
    sim.add_argument("--records", type=Path,
                     help="write one CSV row per job (job_id,team,gpus,submit_s,first_start_s,"
                          "finish_s,run_s,preemptions); with several policies, one file each, "
                          "named FILE-POLICY.csv")
    sim.add_argument("--policy", action="append", choices=sorted(POLICIES),
                     help="policy to run; repeat to compare several (default: all)")
    sim.add_argument("--json", action="store_true", help="one JSON object per policy")
    sim.add_argument("--plot", type=Path, help="write a PNG of GPUs in use per team")
    sim.add_argument("--restart-cost", type=float, default=60.0,
                     help="seconds a preempted job loses when it restarts (default 60)")
    sim.add_argument("--estimates", action="store_true",
                     help="measure start estimates: the one shown at submit (and every hour "
                          "of waiting) against the real start, per job size")
    sim.add_argument("--check", action="store_true",
                     help="check the scheduler's invariants after every cycle (slow)")
    sim.add_argument("--no-sharing", action="store_true",
                     help="replay every GPU share (gpu_share) as a request for a whole GPU, "
                          "to compare with sharing")
    from .whatif import add_history_options
    add_history_options(sim)
    sim.set_defaults(func=cmd_simulate)


def _add_trace(sub) -> None:
    trace = sub.add_parser("trace", help="generate a Philly-like synthetic trace (`gpuhub trace "
                                         "export`: the service's own history as a trace)")
    trace.add_argument("output", type=Path)
    trace.add_argument("--jobs", type=int, default=15000)
    trace.add_argument("--capacity", type=int, default=2000, help="GPUs the load is relative to")
    trace.add_argument("--load", type=float, default=1.3,
                       help="offered load of the batch jobs (default 1.3)")
    trace.add_argument("--seed", type=int, default=0)
    trace.add_argument("--teams", type=int, help="number of teams (default: 8 named teams)")
    trace.add_argument("--kind", choices=["philly", "notebook-heavy"], default="philly",
                       help="philly: batch jobs only (default); notebook-heavy: the batch jobs "
                            "plus --notebooks notebook servers asking 1/4 or 1/2 of a GPU")
    trace.add_argument("--notebooks", type=int, default=0,
                       help="notebook servers in a notebook-heavy trace")
    trace.set_defaults(func=cmd_trace)
    from .common import common_options
    from .whatif import add_trace_export_parser
    add_trace_export_parser(sub, common_options())


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks: scheduling cycle against fifo (default), "
                                         "the REST API through the proxy (api), the Kubernetes "
                                         "backend's API calls, list vs watch (kube), a big sweep's "
                                         "cost to the service (sweeps), measuring a team "
                                         "space (storage)")
    bench.add_argument("target", nargs="?",
                       choices=["scheduler", "api", "culler", "serving", "kube", "sweeps",
                                "storage"],
                       default="scheduler",
                       help="what to measure (default: scheduler)")
    bench.add_argument("--json", action="store_true", help="one JSON object per measurement")
    bench.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000],
                       help="pending workloads to measure at")
    bench.add_argument("--cycles", type=int, default=30)
    bench.add_argument("--seed", type=int, default=0)
    from ..bench.api import add_arguments as add_bench_api
    add_bench_api(bench)
    bench.add_argument("--serving-concurrency", type=int, nargs="+", default=[1, 16, 64],
                       help="bench serving: client threads per row (default 1 16 64)")
    bench.add_argument("--model-ms", type=float, default=0.0,
                       help="bench serving: serve a predictor that takes this many ms per "
                            "batch instead of the iris classifier (default 0: iris)")
    bench.add_argument("--storage-files", type=int, default=100_000,
                       help="bench storage: files in the team space measured (default 100000)")
    bench.add_argument("--sweep-tasks", type=int, default=2000,
                       help="bench sweeps: tasks in the sweep (default 2000)")
    bench.add_argument("--sweeps-db-url",
                       help="bench sweeps: the database (default a scratch SQLite file), e.g. "
                            "postgresql+psycopg://postgres@127.0.0.1:5432/bench")
    bench.add_argument("--kube-pods", type=int, default=1000,
                       help="bench kube: GPU Hub pods (and Jobs) on the stand-in API server "
                            "(default 1000)")
    bench.add_argument("--kube-seconds", type=float, default=60.0,
                       help="bench kube: seconds measured per mode, listing and watching "
                            "(default 60)")
    bench.add_argument("--kube-changes", type=float, default=60.0,
                       help="bench kube: pod status changes a minute (default 60)")
    bench.set_defaults(func=cmd_bench)


def _add_audit(sub) -> None:
    audit = sub.add_parser("audit", help="the scheduler service's audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    check = audit_sub.add_parser("verify", help="recompute the audit log's hash chain; exit 1 "
                                                "if an entry was changed, removed or reordered")
    check.add_argument("--db-url", default=os.environ.get("GPUHUB_DB_URL", ""),
                       help="the service's database (default: SQLite in --data-dir)")
    check.add_argument("--data-dir", default=os.environ.get("GPUHUB_DATA_DIR", "gpuhub-data"))
    check.set_defaults(func=cmd_audit_verify)


def _add_kube_manifests(sub) -> None:
    kube = sub.add_parser("kube-manifests", help="print the team namespaces (with their "
                          "NetworkPolicies) and Kueue queues that follow from the quotas")
    kube.add_argument("--config", help="the service's gpuhub_config.py (its c.KubernetesJobs)")
    kube.add_argument("--namespaces", action="store_true",
                      help="print team namespaces even if KubernetesJobs.team_namespaces is off")
    kube.add_argument("--kueue", action="store_true",
                      help="print Kueue queues even if KubernetesJobs.kueue is off")
    kube.add_argument("--db-url", default=os.environ.get("GPUHUB_DB_URL", ""),
                      help="the service's database (default: SQLite in --data-dir)")
    kube.add_argument("--data-dir", default=os.environ.get("GPUHUB_DATA_DIR", "gpuhub-data"))
    kube.set_defaults(func=cmd_kube_manifests)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["trace", "export"]:  # a subcommand of trace, which takes a path itself
        argv = ["trace-export", *argv[2:]]
    args = build_parser().parse_args(argv)
    if getattr(args, "policy", "unset") is None and not getattr(args, "sweep", None):
        args.policy = ["fifo", "fifo-plain", "backfill", "quota-fifo", "gpuhub"]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
