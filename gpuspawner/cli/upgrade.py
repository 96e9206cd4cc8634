"""``gpuhub upgrade``: bring the service's database to this release's
schema now (with a backup first), or, with ``--check``, say beforehand what
an upgrade will change and whether anything stops it, by running the
migrations on a copy (docs/service.md, "Upgrading")."""
from __future__ import annotations

import os
import sys
from typing import Optional

from sqlalchemy import inspect, text

from ..store.db import make_engine
from ..store.upgrade import UpgradeError, dry_run, plan, sqlite_path, upgrade

RUNNING_NOTE = ("running work is adopted by the new release: its processes keep the "
                "environment and account they started with until they end")


def default_db_url(data_dir: str, db_url: str = "") -> str:
    """The service's database as the embedded hub configures it."""
    return db_url or os.environ.get("GPUHUB_DB_URL") or \
        f"sqlite:///{os.path.abspath(data_dir)}/gpuhub.sqlite"


def running_service(data_dir: str) -> Optional[int]:
    """The pid of a scheduler service that still runs on ``data_dir`` (its
    ``service.pid``, the process still that service), else None."""
    try:
        with open(os.path.join(data_dir, "service.pid")) as f:
            pid = int(f.read().strip() or 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ")
    except (OSError, ValueError):
        return None
    return pid if b"gpuspawner.service" in command else None


def live_work(engine) -> list[str]:
    """Lines on the work in the database, by state and kind (columns every
    schema has)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("workloads"):
            return []
        rows = conn.execute(text("SELECT state, kind, count(*) FROM workloads "
                                 "WHERE state IN ('running', 'queued', 'held', 'waiting') "
                                 "GROUP BY state, kind ORDER BY state, kind")).all()
    by_state: dict[str, list[str]] = {}
    for state, kind, n in rows:
        by_state.setdefault(state, []).append(f"{kind} {n}")
    return [f"{state}: {', '.join(kinds)}" for state, kinds in by_state.items()]


def check(url: str, data_dir: str) -> int:
    engine = make_engine(url)
    try:
        try:
            todo = plan(engine)
        except UpgradeError as e:
            print(f"gpuhub upgrade: {e}", file=sys.stderr)
            return 1
        print(f"database: {engine.url.render_as_string(hide_password=True)}")
        if not todo.pending:
            print(f"schema: {todo.current}, this release's; nothing to migrate")
            return 0
        print(f"schema: {todo.current or 'empty'} -> {todo.head} "
              f"({len(todo.pending)} migration(s))")
        for step in todo.pending:
            print(f"  {step.name:32s} {step.title}")
        work = live_work(engine)
        for line in work:
            print(f"live work: {line}")
        if any(line.startswith("running") for line in work):
            print(f"  {RUNNING_NOTE}")
        if sqlite_path(engine):
            print(f"backup: the start copies the database to "
                  f"{sqlite_path(engine)}.backup-{todo.current}-<time> before migrating")
        elif todo.has_data:
            print("backup: take one before the upgrade: pg_dump -Fc -f gpuhub-before-upgrade.dump "
                  "<database>")
        try:
            _, seconds = dry_run(engine)
        except UpgradeError as e:
            print(f"dry run: FAILED: {e}")
            return 1
        where = "on a copy" if sqlite_path(engine) else "in a transaction, rolled back"
        print(f"dry run: the migrations ran {where} in {seconds:.2f} s: OK")
        pid = running_service(data_dir)
        if pid:
            print(f"blocks: the scheduler service (pid {pid}) still runs on {data_dir}: stop the "
                  f"hub first (Ctrl-C or SIGTERM to gpuhub up; jobs run on)")
            return 1
        print("nothing blocks the upgrade")
        return 0
    finally:
        engine.dispose()


def run(url: str, data_dir: str) -> int:
    pid = running_service(data_dir)
    if pid:
        print(f"gpuhub upgrade: the scheduler service (pid {pid}) still runs on {data_dir}; "
              f"stop the hub first", file=sys.stderr)
        return 1
    engine = make_engine(url)
    try:
        todo = upgrade(engine, log=print)
    except UpgradeError as e:
        print(f"gpuhub upgrade: {e}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if todo.pending:
        print(f"database at {todo.head}, this release's schema")
    else:
        print(f"database already at {todo.head}; nothing to migrate")
    return 0


def before_start(data_dir: str, db_url: str = "") -> Optional[str]:
    """What ``gpuhub up`` does before it starts anything: an existing
    database is upgraded here, so that a failed upgrade stops the start
    with its reason and leaves no hub or proxy behind. Returns the error."""
    engine = make_engine(default_db_url(data_dir, db_url))
    try:
        todo = plan(engine)
        if todo.fresh or not todo.pending:
            return None  # a new database is made by the service itself
        pid = running_service(data_dir)
        if pid:
            return f"the scheduler service (pid {pid}) of a running hub uses {data_dir}; stop it first"
        upgrade(engine, log=print)
        return None
    except UpgradeError as e:
        return str(e)
    finally:
        engine.dispose()


def cmd_upgrade(args) -> int:
    url = default_db_url(args.data_dir, args.db_url)
    data_dir = os.path.abspath(args.data_dir)
    return check(url, data_dir) if args.check else run(url, data_dir)


def add_parser(sub) -> None:
    p = sub.add_parser("upgrade", help="bring the service's database to this release's schema "
                                       "(a backup first); --check says what would change")
    p.add_argument("--check", action="store_true",
                   help="change nothing: list the pending migrations and the live work, and run "
                        "the migrations on a copy (SQLite) or in a rolled-back transaction "
                        "(PostgreSQL); exit 1 if they would fail")
    p.add_argument("--db-url", default="",
                   help="the service's database (default: $GPUHUB_DB_URL, else SQLite in "
                        "--data-dir)")
    p.add_argument("--data-dir", default=os.environ.get("GPUHUB_DATA_DIR", "gpuhub-data"))
    p.set_defaults(func=cmd_upgrade)
