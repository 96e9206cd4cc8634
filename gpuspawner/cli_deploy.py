"""``gpuhub deploy`` and ``gpuhub deployments``: model deployments from a
terminal, through the REST API (docs/serving.md)."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .cli_sweep import parse_after_arg
from .cli_client import UsageError, _client, _guard, _print_json, common_options, format_table


def format_deployments(deps: Sequence[dict]) -> str:
    rows = []
    for d in deps:
        for r in d["revisions"]:
            weight = d["traffic"].get(str(r["number"]), d["traffic"].get(r["number"], 0))
            role = (r["state"] if r.get("state", "ready") != "ready"
                    else "stable" if r["number"] == d["stable_revision"]
                    else "canary" if r["number"] == d.get("canary_revision") else "")
            rows.append([f"{d['team']}/{d['name']}", r["number"], f"{weight}%", role,
                         f"{r['ready_replicas']}/{len(r['replicas'])}", r["rps"],
                         "-" if r["p50_ms"] is None else r["p50_ms"],
                         "-" if r["p99_ms"] is None else r["p99_ms"],
                         f"{r['error_rate']:.1%}", r["model_dir"]])
    if not rows:
        return "No deployments."
    table = format_table(["DEPLOYMENT", "REV", "TRAFFIC", "", "READY", "REQ/S", "P50 MS", "P99 MS",
                       "ERRORS", "MODEL"], rows)
    notes = [f"{d['team']}/{d['name']}: {d['message']}" for d in deps if d.get("message")]
    return table + ("\n" + "\n".join(notes) if notes else "")


def cmd_deploy(args) -> int:
    spec = {"name": args.name, "model_dir": args.model_dir, "runtime": args.runtime}
    for key in ("team", "pool", "gpus", "gpu_share", "gpu_memory", "min_replicas",
                "max_replicas", "predictor",
                "canary_percent", "scale_to_zero_after", "target_in_flight", "after"):
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    d = _client(args).deploy(spec)
    if args.json:
        _print_json(d)
    else:
        print(format_deployments([d]))
        print(f"endpoint: {d['endpoint']}")
    return 0


def cmd_deployments(args) -> int:
    client = _client(args)
    if args.action and not args.deployment:
        raise UsageError("name the deployment: gpuhub deployments TEAM/NAME ACTION")
    if args.deployment:
        team, _, name = args.deployment.partition("/")
        if not name:
            raise UsageError("a deployment is TEAM/NAME, e.g. vision/iris")
        if args.action == "delete":
            d = client.delete_deployment(team, name)
        elif args.action == "traffic":
            if not args.traffic:
                raise UsageError("traffic needs REV=PERCENT pairs, e.g. 1=80 2=20")
            split = dict(pair.split("=", 1) for pair in args.traffic)
            d = client.deployment_action(team, name, "traffic",
                                         {"traffic": {k: int(v) for k, v in split.items()}})
        elif args.action == "scale":
            body = {k: v for k, v in (("min_replicas", args.min), ("max_replicas", args.max),
                                      ("scale_to_zero_after", args.scale_to_zero_after))
                    if v is not None}
            d = client.deployment_action(team, name, "scale", body)
        elif args.action:
            d = client.deployment_action(team, name, args.action)
        else:
            d = client.deployment(team, name)
        deps = [d] if "revisions" in d else []
    else:
        deps = client.deployments()
    if args.json:
        _print_json(deps if not args.deployment else (deps[0] if deps else {}))
    elif args.action == "delete":
        print(f"deleted {args.deployment}")
    else:
        print(format_deployments(deps))
    return 0


def add_parsers(sub) -> None:
    common = common_options()
    p = sub.add_parser("deploy", parents=[common], help="deploy a model directory",
                       description="Deploy MODEL_DIR (relative to your workspace) as NAME, or a "
                                   "new revision of NAME; --canary sends only that share of the "
                                   "traffic to it.")
    p.add_argument("name")
    p.add_argument("model_dir")
    p.add_argument("--runtime", default="sklearn", choices=["sklearn", "predictor"])
    p.add_argument("--predictor", help="for --runtime predictor: FILE.py:Class in MODEL_DIR")
    p.add_argument("--team")
    p.add_argument("--pool")
    p.add_argument("--gpus", type=int, help="GPUs per replica (default 0)")
    p.add_argument("--gpu-share", metavar="FRACTION",
                   help="each replica's part of one GPU, e.g. 1/4 (a pool that shares its GPUs)")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="GPU memory each replica's share needs, e.g. 20GiB")
    p.add_argument("--min-replicas", type=int)
    p.add_argument("--max-replicas", type=int)
    p.add_argument("--target-in-flight", type=float,
                   help="requests in flight per replica the autoscaler aims at")
    p.add_argument("--scale-to-zero-after", type=float, help="seconds idle (CPU only)")
    p.add_argument("--canary", dest="canary_percent", type=int, metavar="PERCENT")
    p.add_argument("--after", action="append", type=parse_after_arg, metavar="ID[:ok|any|failed]",
                   help="roll out only once a job or sweep succeeded (ok, the default), failed, "
                        "or ended (any); MODEL_DIR is checked then; repeatable")
    p.set_defaults(func=_guard("deploy", cmd_deploy))

    d = sub.add_parser("deployments", parents=[common], help="list deployments, or act on one",
                       description="Without arguments, every deployment you can see. With "
                                   "TEAM/NAME: that one, or an ACTION on it.")
    d.add_argument("deployment", nargs="?", metavar="TEAM/NAME")
    d.add_argument("action", nargs="?",
                   choices=["promote", "rollback", "traffic", "scale", "delete"])
    d.add_argument("traffic", nargs="*", metavar="REV=PERCENT", help="for traffic")
    d.add_argument("--min", type=int, help="for scale: min replicas")
    d.add_argument("--max", type=int, help="for scale: max replicas")
    d.add_argument("--scale-to-zero-after", type=float, metavar="SECONDS",
                   help="for scale with --min 0 (CPU only): idle seconds before the last replica "
                        "stops")
    d.set_defaults(func=_guard("deployments", cmd_deployments))


def main(argv=None) -> int:  # pragma: no cover - for python -m
    parser = argparse.ArgumentParser(prog="gpuhub")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
