"""Engine, sessions and migrations."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from . import audit, upgrade

log = logging.getLogger(__name__)


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
    # A server's connection may have dropped; a SQLite file's does not (and
    # the ping would cost every request a statement).
    engine = create_engine(url, future=True, pool_pre_ping=not url.startswith("sqlite"))
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def migrate(engine: Engine, revision: str = "head",
            log: Optional[Callable[[str], None]] = None) -> upgrade.Plan:
    """Bring the schema to ``revision`` (run at every start): all or nothing,
    with a backup first when there is data (store/upgrade.py)."""
    return upgrade.upgrade(engine, revision, log=log or log_info)


def log_info(message: str) -> None:
    log.info("%s", message)


class Store:
    """The database of one service: an engine and a session factory."""

    def __init__(self, url: str, run_migrations: bool = True,
                 log: Optional[Callable[[str], None]] = None):
        self.url = url
        self.engine = make_engine(url)
        if run_migrations:
            try:
                migrate(self.engine, log=log)
            except BaseException:
                self.engine.dispose()
                raise
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


def open_store(url: str, log: logging.Logger) -> Store:
    """The service's store, its schema this release's; a schema that cannot
    be brought there stops the start with the upgrade's own words."""
    try:
        return Store(url, log=log.info)
    except upgrade.UpgradeError as e:
        log.critical("GPU Hub cannot start: %s", e)
        raise SystemExit(f"GPU Hub cannot start: {e}") from None
