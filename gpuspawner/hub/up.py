"""``gpuhub up``: start the embedded single-machine GPU Hub.

JupyterHub (with hub_config/jupyterhub_config.py), its proxy and the
scheduler service as a hub-managed service, all on this host. At the first
start it creates the first admin with a random password (and, with
``--demo``, two demo teams with users) and prints how to log in.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys

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


def initial_users(data_dir: str, admin: str, demo: bool, pool: str) -> tuple[dict, bool]:
    """The first users, teams and passwords; created once, then reused."""
    path = os.path.join(data_dir, "initial-users.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f), False
    spec = {"admins": [admin], "users": {admin: _password()}, "groups": {}, "teams": {}}
    if demo:
        for team, t in DEMO_TEAMS.items():
            spec["groups"][f"team-{team}"] = t["users"]
            spec["teams"][team] = {"quotas": {pool: t["quotas"]}}
            spec.setdefault("leads", {})[team] = [t["lead"]]
            for user in t["users"]:
                spec["users"][user] = _password()
        spec["groups"]["team-vision"].append(admin)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f, indent=2)
    return spec, True


def up(args) -> int:
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    proxy = os.path.join(ROOT, "node_modules", ".bin", "configurable-http-proxy")
    if not os.path.exists(proxy) and not shutil.which("configurable-http-proxy"):
        print("gpuhub up: configurable-http-proxy is not installed; run `make run` (it runs "
              "`npm install` in the project) or `npm install configurable-http-proxy`",
              file=sys.stderr)
        return 2
    spec, created = initial_users(data_dir, args.admin, args.demo, args.demo_pool)
    url = f"http://{args.ip}:{args.port}"
    print(f"GPU Hub: {url}/hub/")
    if created:
        print("Created these users (passwords shown once; also in "
              f"{os.path.join(data_dir, 'initial-users.json')}, readable by you only):")
    else:
        print(f"Users from the first start are in {os.path.join(data_dir, 'initial-users.json')}.")
    for name, password in spec["users"].items():
        role = "admin" if name in spec["admins"] else ", ".join(
            [g for g, members in spec["groups"].items() if name in members]
            + [f"lead of {t}" for t, leads in spec.get("leads", {}).items() if name in leads])
        print(f"  {name:10s} {password if created else '(see file)':20s} {role}")
    print("New users sign up at /hub/signup; an admin approves them at /hub/authorize.")
    sys.stdout.flush()
    env = dict(os.environ, GPUHUB_DATA_DIR=data_dir, GPUHUB_PORT=str(args.port),
               GPUHUB_IP=args.ip)
    if args.db_url:
        env["GPUHUB_DB_URL"] = args.db_url
    argv = [sys.executable, "-m", "jupyterhub", "-f", HUB_CONFIG]
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
                   help="at first start also create teams vision and nlp with two users each")
    p.add_argument("--demo-pool", default="default", help="pool of the demo teams' quotas")
    p.add_argument("--db-url", default="", help="scheduler database (default SQLite in data dir)")
    p.set_defaults(func=up)
