"""Schema upgrades that lose nothing.

Every start brings the database to this release's schema. What makes that
safe with jobs running (docs/service.md, "Upgrading"):

- All pending migrations run in one transaction, one step at a time: a
  failure anywhere rolls the database back to the revision the start found,
  and ``MigrationFailed`` names the migration, the cause and the way back.
- SQLite: pysqlite opens no transaction for DDL (each ALTER, CREATE and DROP
  commits on its own, which is how a failed upgrade once left one
  migration's columns behind a version table that did not list it), so the
  migrations run on a connection of their own whose transaction is begun
  explicitly (``BEGIN IMMEDIATE``; SQLAlchemy's recipe for transactional DDL
  on pysqlite). Foreign keys are off on it, as SQLite's recipe for table
  rebuilds says (batch mode copies a table, drops it and renames the copy;
  with foreign keys on, the drop fails on rows that point at the table),
  and ``PRAGMA foreign_key_check`` must find nothing new before the commit.
- PostgreSQL's DDL is transactional: one transaction as well.
- Before migrating a database that has data, SQLite's file is copied with
  the backup API (consistent while others read it) next to it; a
  PostgreSQL database is the operator's to dump (``pg_dump``), as the log
  says.
"""
from __future__ import annotations

import ast
import os
import sqlite3
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from .sqlite_mode import use_wal

MIGRATIONS = os.path.join(os.path.dirname(__file__), "migrations")
# How long the migration waits for another writer (a service still running)
# before it gives up, in milliseconds.
LOCK_WAIT_MS = 30_000
LOCK_KEY = 0x67707568  # "gpuh": PostgreSQL's advisory lock for upgrades


class UpgradeError(RuntimeError):
    """The schema cannot be brought to this release's; nothing was changed."""


class MigrationFailed(UpgradeError):
    """A migration failed and the whole upgrade was rolled back."""

    def __init__(self, step: "Step", start: Optional[str], cause: BaseException,
                 backup: Optional[str], dialect: str):
        self.step, self.start, self.cause, self.backup = step, start, cause, backup
        where = f"revision {start}" if start else "an empty database"
        way_back = ("the previous release starts on it as it is" if start else
                    "nothing to go back to")
        if backup:
            way_back += f"; a copy taken before the upgrade is {backup}"
        elif dialect == "postgresql":
            way_back += "; restore your pg_dump from before the upgrade if you need to"
        super().__init__(
            f"migration {step.name} ({step.title}) failed: {type(cause).__name__}: "
            f"{_first_line(cause)}. Nothing was changed: the database is still at {where}, "
            f"and this release will not start on it. Way back: {way_back}. Way forward: fix "
            f"the cause (`gpuhub upgrade --check` repeats the migration on a copy) and start "
            f"again.")


class NewerDatabase(UpgradeError):
    """The database was migrated by a newer release than this one."""


@dataclass(frozen=True)
class Step:
    """One migration: its revision and the file it is in."""
    revision: str
    name: str       # the file's stem, e.g. 0012_gpu_shares
    title: str      # the first paragraph of its docstring


@dataclass
class Plan:
    """Where a database stands against this release's migrations."""
    current: Optional[str]          # None: no schema yet
    head: str
    pending: list[Step] = field(default_factory=list)
    has_data: bool = False          # a schema with rows in it (worth a backup)

    @property
    def fresh(self) -> bool:
        return self.current is None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _config(engine: Engine, script_location: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", script_location)
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False)
                        .replace("%", "%%"))
    return cfg


def steps(script_location: str = MIGRATIONS) -> list[Step]:
    """Every migration, oldest first."""
    script = ScriptDirectory(script_location)
    out = []
    for rev in reversed(list(script.walk_revisions())):
        name = os.path.splitext(os.path.basename(rev.path))[0]
        out.append(Step(rev.revision, name, _title(rev.path)))
    return out


def _title(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    first = doc.strip().split("\n\n")[0]  # the first paragraph, without the Revision ID
    return " ".join(first.split())


def current_revision(conn: Connection) -> Optional[str]:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _has_data(conn: Connection) -> bool:
    for table in inspect(conn).get_table_names():
        if table != "alembic_version" and conn.execute(
                text(f'SELECT 1 FROM "{table}" LIMIT 1')).first() is not None:
            return True
    return False


def plan(engine: Engine, target: str = "head", script_location: str = MIGRATIONS) -> Plan:
    """What an upgrade to ``target`` would run; ``NewerDatabase`` when the
    database is at a revision this release does not know."""
    with engine.connect() as conn:
        return _plan(conn, target, script_location)


def _plan(conn: Connection, target: str, script_location: str) -> Plan:
    all_steps = steps(script_location)
    revisions = [s.revision for s in all_steps]
    head = revisions[-1] if target == "head" else target
    current = current_revision(conn)
    if current is not None and current not in revisions:
        raise NewerDatabase(
            f"the database is at schema revision {current}, which this release does not know "
            f"(its newest is {revisions[-1]}): a newer release upgraded it. Start that release, "
            f"or restore the copy taken before that upgrade (docs/service.md, 'Upgrading').")
    start = revisions.index(current) + 1 if current else 0
    pending = all_steps[start:revisions.index(head) + 1]
    return Plan(current, head, pending, has_data=current is not None and _has_data(conn))


def sqlite_path(engine: Engine) -> Optional[str]:
    """The file of a file-backed SQLite database, else None."""
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    return None if not database or database == ":memory:" else os.path.abspath(database)


def backup_sqlite(engine: Engine, revision: Optional[str], now: Callable[[], float] = time.time,
                  directory: Optional[str] = None) -> str:
    """A consistent copy of the SQLite file (the backup API reads it page by
    page under its own locks), private to the service, named after the
    revision it holds and the time: ``gpuhub.sqlite.backup-0011-20261203T120501Z``."""
    path = sqlite_path(engine)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now()))
    dest = os.path.join(directory or os.path.dirname(path),
                        f"{os.path.basename(path)}.backup-{revision or 'empty'}-{stamp}")
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    src, dst = sqlite3.connect(path), sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    return dest


@contextmanager
def _migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection whose transaction covers DDL too (see the module doc)."""
    if sqlite_path(engine) is None:
        with engine.connect() as conn:
            yield conn
        return
    own = create_engine(engine.url, poolclass=NullPool)

    @event.listens_for(own, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # no implicit BEGIN/COMMIT around statements
        # Before any other connection of the service opens (sqlite_mode.py);
        # not possible inside the transaction.
        use_wal(dbapi_conn, LOCK_WAIT_MS / 1000)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction: set first
        cur.execute(f"PRAGMA busy_timeout={LOCK_WAIT_MS}")
        cur.close()

    @event.listens_for(own, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock for the whole upgrade

    try:
        with own.connect() as conn:
            yield conn
    finally:
        own.dispose()


def _fk_violations(conn: Connection) -> set[tuple]:
    if conn.dialect.name != "sqlite":
        return set()  # PostgreSQL checks every foreign key as the rows change
    return {tuple(r) for r in conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()}


def _apply(conn: Connection, engine: Engine, pending: list[Step], start: Optional[str],
           script_location: str, backup: Optional[str]) -> None:
    """Run ``pending`` on ``conn`` inside its transaction; raise
    MigrationFailed (the caller's transaction then rolls back)."""
    cfg = _config(engine, script_location)
    cfg.attributes["connection"] = conn
    before = _fk_violations(conn)
    for step in pending:
        try:
            command.upgrade(cfg, step.revision)
        except Exception as e:
            raise MigrationFailed(step, start, e, backup, engine.dialect.name) from e
    broken = sorted(_fk_violations(conn) - before)
    if broken:
        table, rowid, parent, _ = broken[0]
        cause = RuntimeError(f"{len(broken)} row(s) point at rows that are gone, e.g. row "
                             f"{rowid} of {table} -> {parent}")
        raise MigrationFailed(pending[-1], start, cause, backup, engine.dialect.name)


def upgrade(engine: Engine, target: str = "head", *, script_location: str = MIGRATIONS,
            backup: bool = True, log: Callable[[str], None] = lambda _msg: None) -> Plan:
    """Bring the schema to ``target``, all or nothing, with a backup first
    when there is data to lose. Returns the plan that was carried out."""
    with _migration_connection(engine) as conn:
        with conn.begin():
            if engine.dialect.name == "postgresql":
                # Two services starting at once: the second waits, then finds nothing to do
                # (SQLite's BEGIN IMMEDIATE does the same).
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            todo = _plan(conn, target, script_location)
            if not todo.pending:
                return todo
            copy = None
            if backup and todo.has_data:
                if sqlite_path(engine):
                    copy = backup_sqlite(engine, todo.current)
                    log(f"database copied to {copy} before migrating (backup API)")
                elif engine.dialect.name == "postgresql":
                    log("PostgreSQL: take a pg_dump before upgrading (docs/service.md, "
                        "'Upgrading'); the migrations run in one transaction")
            names = ", ".join(s.name for s in todo.pending)
            log(f"migrating the database from {todo.current or 'empty'} to {todo.head}: {names}")
            _apply(conn, engine, todo.pending, todo.current, script_location, copy)
    return todo


def dry_run(engine: Engine, script_location: str = MIGRATIONS) -> tuple[Plan, float]:
    """Run the pending migrations without keeping them: on a copy of an
    SQLite file, in a transaction rolled back on PostgreSQL. Returns the plan
    and the seconds they took; raises MigrationFailed as a real run would."""
    path = sqlite_path(engine)
    if path is None:
        with _migration_connection(engine) as conn:
            tx = conn.begin()
            try:
                todo = _plan(conn, "head", script_location)
                started = time.monotonic()
                _apply(conn, engine, todo.pending, todo.current, script_location, None)
                return todo, time.monotonic() - started
            finally:
                tx.rollback()
    with tempfile.TemporaryDirectory(prefix="gpuhub-upgrade-check-") as scratch:
        copy = backup_sqlite(engine, None, directory=scratch)
        probe = create_engine(f"sqlite:///{copy}", poolclass=NullPool)
        try:
            started = time.monotonic()
            todo = upgrade(probe, script_location=script_location, backup=False)
            return todo, time.monotonic() - started
        finally:
            probe.dispose()
