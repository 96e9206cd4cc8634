"""``gpuhub up``: start the embedded single-machine GPU Hub.

JupyterHub (with hub_config/jupyterhub_config.py), its proxy and the
scheduler service as a hub-managed service, all on this host. At the first
start it creates the first admin with a random password (and, with
``--demo``, two demo teams with users) and prints how to log in. An existing
database is upgraded to this release's schema first (a backup, then all or
nothing): one that cannot be stops the start before anything runs.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys

from ..cli.upgrade import before_start

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUB_CONFIG = os.path.join(ROOT, "hub_config", "jupyterhub_config.py")

DEMO_TEAMS = {
    "vision": {"users": ["alice", "bob"], "lead": "alice",
               "quotas": {"nominal": 2, "borrowing_limit": 2}},
    "nlp": {"users": ["carol", "dave"], "lead": "carol",
            "quotas": {"nominal": 2, "borrowing_limit": 2}},
}


def _password() -> str:
    return secrets.token_urlsafe(12)


def _add_demo(spec: dict, admin: str, pool: str) -> dict[str, str]:
    """Add the demo teams, their users and leads to ``spec`` (what is there
    already stays as it is); returns the users it created, with passwords."""
    created = {}
    for team, t in DEMO_TEAMS.items():
        members = spec["groups"].setdefault(f"team-{team}", [])
        for user in t["users"]:
            if user not in spec["users"]:
                spec["users"][user] = created[user] = _password()
            if user not in members:
                members.append(user)
        spec["teams"].setdefault(team, {"quotas": {pool: t["quotas"]}})
        leads = spec.setdefault("leads", {}).setdefault(team, [])
        if t["lead"] not in leads:
            leads.append(t["lead"])
    if admin not in spec["groups"]["team-vision"]:
        spec["groups"]["team-vision"].append(admin)
    return created


def _write(path: str, spec: dict) -> None:
    """The file, readable by its owner only, replaced in one step."""
    tmp = path + ".new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f, indent=2)
    os.replace(tmp, path)


def initial_users(data_dir: str, admin: str, demo: bool, pool: str) -> tuple[dict, dict]:
    """The first users, teams and passwords: created at the first start and
    reused after it. ``demo`` adds the demo teams, at the first start or to
    an existing data directory (idempotent: what is there stays).
    Returns the spec and the users created now, with their passwords."""
    path = os.path.join(data_dir, "initial-users.json")
    if os.path.exists(path):
        with open(path) as f:
            spec = json.load(f)
        before = json.dumps(spec, sort_keys=True)
        spec.setdefault("groups", {})
        spec.setdefault("teams", {})
        created = _add_demo(spec, admin, pool) if demo else {}
        if json.dumps(spec, sort_keys=True) != before:
            _write(path, spec)
        return spec, created
    password = _password()
    spec = {"admins": [admin], "users": {admin: password}, "groups": {}, "teams": {}}
    created = {admin: password}
    if demo:
        created.update(_add_demo(spec, admin, pool))
    _write(path, spec)
    return spec, created


def banner(spec: dict, created: dict, url: str, path: str) -> str:
    """What ``gpuhub up`` prints: where the hub is and who can log in."""
    lines = [f"GPU Hub: {url}/hub/"]
    if created:
        lines.append(f"Created these users (passwords shown once; also in {path}, readable "
                     f"by you only):")
    others = [name for name in spec["users"] if name not in created]
    if others:
        lines.append(f"Users from an earlier start ({', '.join(others)}) are in {path}.")
    for name, password in created.items():
        if name in spec["admins"]:
            role = "admin"
        else:
            role = ", ".join([g for g, members in spec["groups"].items() if name in members]
                             + [f"lead of {t}" for t, leads in spec.get("leads", {}).items()
                                if name in leads])
        lines.append(f"  {name:10s} {password:20s} {role}")
    if not spec["teams"]:
        lines.append("Users in no other team are in the team 'default', which guarantees the GPUs "
                     "no other team owns: all of them until an admin makes teams (GPU admin → "
                     "Teams & quotas).")
    lines.append("New users sign up at /hub/signup; an admin approves them at /hub/authorize.")
    return "\n".join(lines)


def up(args) -> int:
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    proxy = os.path.join(ROOT, "node_modules", ".bin", "configurable-http-proxy")
    if not os.path.exists(proxy) and not shutil.which("configurable-http-proxy"):
        print("gpuhub up: configurable-http-proxy is not installed; run `make run` (it runs "
              "`npm install` in the project) or `npm install configurable-http-proxy`",
              file=sys.stderr)
        return 2
    if not os.environ.get("GPUHUB_CONFIG"):  # a config of one's own may name another database
        failed = before_start(data_dir, args.db_url)
        if failed:
            print(f"gpuhub up: the database cannot be upgraded, so nothing was started: {failed}",
                  file=sys.stderr)
            return 1
    spec, created = initial_users(data_dir, args.admin, args.demo, args.demo_pool)
    print(banner(spec, created, f"http://{args.ip}:{args.port}",
                 os.path.join(data_dir, "initial-users.json")))
    sys.stdout.flush()
    env = dict(os.environ, GPUHUB_DATA_DIR=data_dir, GPUHUB_PORT=str(args.port),
               GPUHUB_IP=args.ip)
    if args.db_url:
        env["GPUHUB_DB_URL"] = args.db_url
    if args.gpu_sharing:  # hub_config/gpuhub_config.py reads it
        env["GPUHUB_GPU_SHARING"] = ",".join(args.gpu_sharing)
    # JupyterHub, with a shutdown that releases the notebooks' GPUs (app.py).
    argv = [sys.executable, "-m", "gpuspawner.hub.app", "-f", HUB_CONFIG]
    os.chdir(data_dir)
    os.execve(sys.executable, argv, env)
    return 0  # not reached


def add_parser(sub) -> None:
    p = sub.add_parser("up", help="start the embedded single-machine GPU Hub")
    p.add_argument("--data-dir", default=os.environ.get("GPUHUB_DATA_DIR",
                                                        os.path.join(ROOT, "gpuhub-data")),
                   help="where state lives (default: gpuhub-data in the project)")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000,
                   help="public port; the hub, service and proxy API use the next three")
    p.add_argument("--admin", default="admin", help="name of the first admin")
    p.add_argument("--demo", action="store_true",
                   help="also create teams vision and nlp with two users each (at the first "
                        "start, or added to an existing data directory)")
    p.add_argument("--demo-pool", default="default", help="pool of the demo teams' quotas")
    p.add_argument("--db-url", default="", help="scheduler database (default SQLite in data dir)")
    p.add_argument("--gpu-sharing", metavar="POOL=N", type=sharing_arg, action="append",
                   default=[], help="let notebooks and jobs share each GPU of POOL in N slots "
                   "(2, 4, 8 or 16), e.g. default=4; repeat for more pools (docs/gpus.md, "
                   "'Sharing a GPU'). Sets GpuHubService.gpu_sharing unless GPUHUB_CONFIG "
                   "names a config of one's own")
    p.set_defaults(func=up)


SHARE_UNITS = (2, 4, 8, 16)


def sharing_arg(text: str) -> str:
    """``--gpu-sharing POOL=N`` checked (the pool is the service's to check)."""
    pool, _, units = text.partition("=")
    if not pool or not units.isdigit() or int(units) not in SHARE_UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: POOL=N with N one of {', '.join(map(str, SHARE_UNITS))} (e.g. default=4)")
    return f"{pool}={int(units)}"
