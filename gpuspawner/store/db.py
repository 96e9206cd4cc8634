"""Engine, sessions and migrations."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from . import audit, upgrade
from .sqlite_mode import use_wal
from .statistics import PlannerStatistics

log = logging.getLogger(__name__)
T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000  # how long a SQLite writer waits for another's transaction


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the API read while the loop writes; foreign keys are off by
    # default in SQLite.
    use_wal(dbapi_conn, BUSY_TIMEOUT_MS / 1000)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    # WAL + NORMAL survives a crash of the process (what a SIGKILL is); only
    # a power cut can lose the last commits.
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.close()


def make_engine(url: str, **options) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    # A server's connection may have dropped; a SQLite file's does not (and
    # the ping would cost every request a statement).
    options.setdefault("pool_pre_ping", not url.startswith("sqlite"))
    engine = create_engine(url, future=True, **options)
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
        self._writing = threading.RLock()
        # Told how long a transaction waited for another thread's to end
        # (seconds; only waits, not a turn taken at once): the service
        # counts its event loop's, since every request waits with it.
        self.waited_for_turn: Callable[[float], None] = lambda seconds: None
        # PostgreSQL: the reads' own pool (see ``read``); SQLite has no round trips to save.
        self._reads = (None if self.engine.dialect.name == "sqlite" else
                       make_engine(url, pool_pre_ping=False, isolation_level="AUTOCOMMIT"))
        # The planner's counts kept up with what the service adds.
        self.statistics = PlannerStatistics(
            self.engine, writing=self._writing if self.engine.dialect.name == "sqlite" else None)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together or not at all.

        One at a time in this process: the service's cycle worker, its
        intake's writer and its event loop each read a row and then change
        it, and another thread's transaction must not change the row in
        between (a cancel that a cycle's admission, committed just after it,
        would undo). SQLite writes one transaction at a time anyway, and its
        reads before a transaction's first write are not part of it."""
        with self._write_turn():
            with self.sessions() as session:
                with session.begin():
                    yield session

    @contextmanager
    def _write_turn(self) -> Iterator[None]:
        if not self._writing.acquire(blocking=False):
            started = time.perf_counter()
            self._writing.acquire()
            self.waited_for_turn(time.perf_counter() - started)
        try:
            yield
        finally:
            self._writing.release()

    @contextmanager
    def adding(self) -> Iterator[Session]:
        """A transaction that only adds new rows: committed together or not
        at all, like ``transaction``, but on PostgreSQL it does not wait its
        turn. It reads nothing it then writes, so nothing another thread
        changes in between can be undone by it, and what it adds no other
        transaction can know of before it commits. The intake's batches of
        submits are written so, beside the cycle's writes. On SQLite it waits
        its turn all the same: the database writes one transaction at a time,
        and a writer that waits for it there spins on its busy timeout."""
        if self.engine.dialect.name == "sqlite":
            with self.transaction() as session:
                yield session
            return
        with self.sessions() as session:
            with session.begin():
                yield session

    def session(self) -> Session:
        return self.sessions()

    def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)``, for a read that writes nothing (a list's page).

        On PostgreSQL the connection is in autocommit and comes from a pool
        that does not ping it first: a page costs its own queries' round
        trips, without a ping, a BEGIN and a ROLLBACK around them (the Jobs
        panel's page of 50 with attempts: 1.8-2.2 ms -> 1.3-1.4 ms). Each
        query then sees the data as of its own start. A connection found
        dropped (the server restarted) is discarded, and the read tried once
        more on a new one."""
        if self._reads is None:
            with self.engine.connect() as conn:
                return fn(conn)
        try:
            with self._reads.connect() as conn:
                return fn(conn)
        except DBAPIError as e:
            if not e.connection_invalidated:
                raise
            log.warning("a read found its connection dropped; reading again on a new one")
        with self._reads.connect() as conn:
            return fn(conn)

    def rows_added(self, table: str, n: int) -> None:
        """``n`` rows were committed to ``table``: the table is analyzed again
        once it grew by a tenth (statistics.py)."""
        self.statistics.added(table, n)

    def close(self) -> None:
        self.statistics.close()
        self.engine.dispose()
        if self._reads is not None:
            self._reads.dispose()


def open_store(url: str, log: logging.Logger) -> Store:
    """The service's store, its schema this release's; a schema that cannot
    be brought there stops the start with the upgrade's own words."""
    try:
        store = Store(url, log=log.info)
    except upgrade.UpgradeError as e:
        log.critical("GPU Hub cannot start: %s", e)
        raise SystemExit(f"GPU Hub cannot start: {e}") from None
    store.statistics.catch_up("workloads")
    return store
