"""``gpuhub deploy`` and ``gpuhub deployments``: model deployments from a
terminal, through the REST API (docs/serving.md)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Optional, Sequence

from .sweep import parse_after_arg
from .common import UsageError, common_options, connect, format_table, guard, print_json


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


# --wait's exit codes: the newest revision failed, or was not ready in time.
FAILED_RC, TIMEOUT_RC = 1, 3


def rollout(d: dict) -> tuple[Optional[bool], str]:
    """Where the newest revision of deployment ``d`` stands: (True: ready,
    False: failed, None: not yet; a line saying so). Ready is state ready with
    a ready replica (none needed if it may scale to zero)."""
    who = f"{d['team']}/{d['name']}"
    if not d.get("revisions"):
        return None, f"{who}: no revision yet"
    r = max(d["revisions"], key=lambda r: r["number"])
    head = f"{who} revision {r['number']}"
    state = r.get("state", "ready")
    if state == "failed":
        return False, f"{head} failed: {r.get('reason') or 'no reason given'}"
    if state == "cancelled":
        return False, f"{head} was {r.get('reason') or 'cancelled'}"
    if state == "waiting":
        return None, f"{head} is {r.get('reason') or 'waiting'}"
    replicas = f"{r['ready_replicas']}/{len(r['replicas'])} replicas ready"
    if r["ready_replicas"] >= 1 or d.get("min_replicas") == 0:
        weight = d["traffic"].get(str(r["number"]), d["traffic"].get(r["number"], 0))
        return True, f"{head} is ready: {replicas}, {weight}% of the traffic"
    return None, f"{head} is rolling out: {replicas}"


def wait_rollout(fetch: Callable[[], dict], timeout: float, interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr,
                                                                 flush=True)
                 ) -> tuple[int, dict]:
    """Poll ``fetch`` (the deployment's view) until its newest revision is
    ready or failed, saying each change: (exit code, the last view)."""
    deadline, last = clock() + timeout, None
    while True:
        d = fetch()
        done, line = rollout(d)
        if line != last:
            say(line)
            last = line
        if done is not None:
            return (0 if done else FAILED_RC), d
        if clock() >= deadline:
            say(f"gave up waiting after {timeout:g} s: {line}")
            return TIMEOUT_RC, d
        sleep(interval)


def find_deployment(client, text: str) -> tuple[str, str]:
    """TEAM/NAME as given, or NAME alone: the one deployment of that name the caller sees."""
    team, slash, name = text.partition("/")
    if slash:
        if not (team and name):
            raise UsageError("a deployment is TEAM/NAME (or NAME), e.g. vision/iris")
        return team, name
    listed = client.list_deployments()["deployments"]
    teams = sorted(d["team"] for d in listed if d["name"] == text)
    if len(teams) == 1:
        return teams[0], text
    if not teams:
        raise UsageError(f"no deployment named {text!r} that you can see")
    raise UsageError(f"deployments of {text!r} in teams {', '.join(teams)}: say TEAM/{text}")


def _wait_and_show(args, client, d: dict) -> int:
    rc, d = wait_rollout(lambda: client.get_deployment(d["team"], d["name"]), args.timeout)
    if args.json:
        print_json(d)
    else:
        print(format_deployments([d]))
    return rc


def cmd_deploy(args) -> int:
    spec = {"name": args.name, "model_dir": args.model_dir, "runtime": args.runtime}
    for key in ("team", "pool", "gpus", "gpu_share", "gpu_memory", "min_replicas",
                "max_replicas", "predictor",
                "canary_percent", "scale_to_zero_after", "target_in_flight", "after"):
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    client = connect(args)
    d = client.deploy(spec)
    if args.wait:
        print(f"endpoint: {d['endpoint']}", file=sys.stderr)
        return _wait_and_show(args, client, d)
    if args.json:
        print_json(d)
    else:
        print(format_deployments([d]))
        print(f"endpoint: {d['endpoint']}")
    return 0


def cmd_deployments(args) -> int:
    client = connect(args)
    if (args.action or args.wait) and not args.deployment:
        raise UsageError("name the deployment: gpuhub deployments TEAM/NAME "
                         + ("--wait" if args.wait else "ACTION"))
    if args.wait and args.action:
        raise UsageError("--wait waits for a rollout: give no ACTION with it")
    if args.deployment:
        team, name = find_deployment(client, args.deployment)
        if args.wait:
            return _wait_and_show(args, client, {"team": team, "name": name})
        if args.action == "delete":
            d = client.delete_deployment(team, name)
        elif args.action == "traffic":
            if not args.traffic:
                raise UsageError("traffic needs REV=PERCENT pairs, e.g. 1=80 2=20")
            split = dict(pair.split("=", 1) for pair in args.traffic)
            d = client.set_deployment_traffic(team, name,
                                              {"traffic": {k: int(v) for k, v in split.items()}})
        elif args.action == "cancel":
            d = client.cancel_revision(team, name, waiting_revision(
                client.get_deployment(team, name), args.traffic))
        elif args.action == "scale":
            body = {k: v for k, v in (("min_replicas", args.min), ("max_replicas", args.max),
                                      ("scale_to_zero_after", args.scale_to_zero_after))
                    if v is not None}
            d = client.scale_deployment(team, name, body)
        elif args.action:
            act = {"promote": client.promote_deployment, "rollback": client.rollback_deployment}
            d = act[args.action](team, name)
        else:
            d = client.get_deployment(team, name)
        deps = [d] if "revisions" in d else []
    else:
        deps = client.list_deployments()["deployments"]
    if args.json:
        print_json(deps if not args.deployment else (deps[0] if deps else {}))
    elif args.action == "delete":
        print(f"deleted {args.deployment}")
    else:
        print(format_deployments(deps))
    return 0


def waiting_revision(d: dict, given: Sequence[str]) -> int:
    """The revision ``cancel`` cancels: the one given, else the one waiting."""
    if len(given) > 1 or (given and not given[0].isdigit()):
        raise UsageError("cancel takes one revision number, e.g. gpuhub deployments NAME cancel 2")
    if given:
        return int(given[0])
    waiting = [r["number"] for r in d["revisions"] if r.get("state") == "waiting"]
    if len(waiting) == 1:
        return waiting[0]
    who = f"{d['team']}/{d['name']}"
    if not waiting:
        raise UsageError(f"{who} has no waiting revision to cancel")
    raise UsageError(f"{who} has waiting revisions {', '.join(map(str, waiting))}: say which, "
                     f"e.g. gpuhub deployments {d['name']} cancel {waiting[-1]}")


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
    add_wait_options(p)
    p.set_defaults(func=guard("deploy", cmd_deploy))

    d = sub.add_parser("deployments", parents=[common], help="list deployments, or act on one",
                       description="Without arguments, every deployment you can see. With "
                                   "TEAM/NAME (or NAME, if one team has it): that one, an "
                                   "ACTION on it, or with --wait, its rollout followed. "
                                   "cancel [REV]: a waiting revision (--after) never rolls out; "
                                   "the deployment serves on as it does.")
    d.add_argument("deployment", nargs="?", metavar="[TEAM/]NAME")
    d.add_argument("action", nargs="?",
                   choices=["promote", "rollback", "traffic", "scale", "cancel", "delete"])
    d.add_argument("traffic", nargs="*", metavar="REV=PERCENT",
                   help="for traffic; for cancel, the revision (default: the waiting one)")
    d.add_argument("--min", type=int, help="for scale: min replicas")
    d.add_argument("--max", type=int, help="for scale: max replicas")
    d.add_argument("--scale-to-zero-after", type=float, metavar="SECONDS",
                   help="for scale with --min 0 (CPU only): idle seconds before the last replica "
                        "stops")
    add_wait_options(d)
    d.set_defaults(func=guard("deployments", cmd_deployments))


def add_wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true",
                   help="wait until the newest revision is ready (a replica serves it) or "
                        "failed, printing each change on stderr; exit 0 when ready, "
                        f"{FAILED_RC} when it failed, {TIMEOUT_RC} when --timeout passed")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="with --wait: how long (default 1800)")


def main(argv=None) -> int:  # pragma: no cover - for python -m
    parser = argparse.ArgumentParser(prog="gpuhub")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
