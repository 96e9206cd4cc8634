"""Engine, sessions and migrations."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from . import audit

MIGRATIONS = os.path.join(os.path.dirname(__file__), "migrations")


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the API read while the loop writes; foreign keys are off by
    # default in SQLite.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    # WAL + NORMAL survives a crash of the process (what a SIGKILL is); only
    # a power cut can lose the last commits.
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def make_engine(url: str) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    engine = create_engine(url, future=True, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False)
                        .replace("%", "%%"))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (run at every start)."""
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


class Store:
    """The database of one service: an engine and a session factory."""

    def __init__(self, url: str, run_migrations: bool = True):
        self.url = url
        self.engine = make_engine(url)
        if run_migrations:
            migrate(self.engine)
        self.sessions = sessionmaker(self.engine, class_=audit.AuditedSession,
                                     expire_on_commit=False, future=True)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together or not at all."""
        with self.sessions() as session:
            with session.begin():
                yield session

    def session(self) -> Session:
        return self.sessions()

    def close(self) -> None:
        self.engine.dispose()
