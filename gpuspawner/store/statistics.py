"""The planner's statistics of the tables a queue grows, on both databases.

PostgreSQL plans each query from what ``ANALYZE`` last counted of a table.
Autovacuum counts again once a table grew by a tenth, when it runs: it may
be off (it is on this project's test machines), or a minute behind a burst
of submits. Planned from stale counts, the Jobs panel's query (one user's
jobs) read an index of every queued job: with 100,000 queued, 5.1 ms a page
against 2.1 ms once analyzed (``EXPLAIN ANALYZE``: a bitmap of 100,060
``kind = 'job'`` entries, against none). So the service counts what it adds
and analyzes a table itself on the same rule, in a thread of its own (an
``ANALYZE`` of 100,000 rows is ~100 ms of the server's, and it blocks no
reader or writer).

SQLite keeps no counts until ``ANALYZE`` writes them (``sqlite_stat1``), and
without them it plans from its indexes' shapes: an admin's Jobs panel page
(``kind = 'job'``, no sweep, newest first) read every job through
``ix_workloads_kind_state`` and sorted them, 55 ms with 100,000 queued,
against 0.5 ms from the list's index once counted. So SQLite's table is
analyzed on the same rule (~60 ms for 100,000 rows, a write: it takes the
store's writing turn), and the pool's connections, which read the counts
only when they open, are replaced.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)

# Analyzed again once this share of the rows last counted was added...
GROWTH = 0.1
# ...and at least this many (autovacuum's own floor is 50: a few hundred
# rows more never turn a plan).
MIN_ADDED = 500


def due(added: int, counted: float, min_added: int = MIN_ADDED) -> bool:
    """Whether ``added`` rows since the planner counted ``counted`` call for
    counting again."""
    return added >= max(min_added, GROWTH * counted)


class PlannerStatistics:
    """What was added to each table since it was last analyzed, on one
    database; ``added`` analyzes a table when it is ``due``. ``writing``: the
    store's lock that SQLite's writers take turns by (ANALYZE writes there)."""

    def __init__(self, engine: Engine, min_added: int = MIN_ADDED,
                 writing: Optional[threading.RLock] = None):
        self.engine = engine
        self.min_added = min_added
        self.sqlite = engine.dialect.name == "sqlite"
        # (rows changed since the last count, rows counted), and the count an
        # ANALYZE just made, as this database keeps them
        self._changed, self._counted_now = ((_changed_sqlite, _counted_sqlite) if self.sqlite
                                            else (_changed_postgresql, _counted_postgresql))
        self._writing = writing
        self._lock = threading.Lock()
        self._added: dict[str, int] = {}
        self._counted: dict[str, float] = {}
        self._running: set[str] = set()
        self._thread: Optional[ThreadPoolExecutor] = None
        self.analyzed = 0  # how many times a table was analyzed (tests, metrics)

    def added(self, table: str, n: int) -> None:
        """``n`` rows were committed to ``table`` (any thread)."""
        with self._lock:
            self._added[table] = self._added.get(table, 0) + n
            if table in self._running or not due(self._added[table],
                                                  self._counted.get(table, 0.0), self.min_added):
                return
            self._added[table] = 0
            self._start(self._analyze, table)

    def catch_up(self, table: str) -> None:
        """At start: analyze ``table`` now if what the server counts as
        changed since its last analysis is due (a restart behind a burst,
        autovacuum off), in the thread."""
        with self._lock:
            if table not in self._running:
                self._start(self._catch_up, table)

    def _start(self, fn, table: str) -> None:
        self._running.add(table)
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-analyze")
        self._thread.submit(fn, table)

    def _catch_up(self, table: str) -> None:
        try:
            with self.engine.connect() as conn:
                changed, counted = self._changed(conn, table)
            if due(changed, max(counted, 0.0), self.min_added):
                self._analyze(table)
                return
            with self._lock:
                self._counted[table] = max(counted, 0.0)
        except Exception:
            log.warning("reading the statistics of %s failed", table, exc_info=True)
        with self._lock:
            self._running.discard(table)

    def _analyze(self, table: str) -> None:
        try:
            with self._writing or contextlib.nullcontext():
                with self.engine.connect() as conn:
                    conn.execute(text(f'ANALYZE "{table}"'))
                    counted = self._counted_now(conn, table)
                    conn.commit()
            if self.sqlite and self.engine.url.database not in (None, "", ":memory:"):
                # A SQLite connection reads the counts when it opens: the
                # pooled ones would plan from none (those in use are let go
                # when given back). An in-memory database lives in its one
                # connection, and is left as it is.
                self.engine.dispose()
            with self._lock:
                self._counted[table] = float(counted or 0.0)
                self.analyzed += 1
        except Exception:  # the planner keeps its older counts; the next batch tries again
            log.warning("analyzing %s failed", table, exc_info=True)
        finally:
            with self._lock:
                self._running.discard(table)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None


def _changed_postgresql(conn, table: str) -> tuple[float, float]:
    """(rows changed since the last analysis, rows it counted), as the server keeps them."""
    changed, counted = conn.execute(text(
        "SELECT s.n_mod_since_analyze, c.reltuples FROM pg_stat_user_tables s "
        "JOIN pg_class c ON c.oid = s.relid WHERE s.relname = :t"), {"t": table}).one()
    return changed, counted


def _counted_postgresql(conn, table: str) -> float:
    return float(conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = :t"),
                              {"t": table}).scalar() or 0.0)


def _counted_sqlite(conn, table: str) -> float:
    """The rows the last ANALYZE counted (an index's first figure: its
    entries; the largest is the whole table's), 0 where none was made."""
    try:
        counted = conn.execute(text("SELECT max(CAST(stat AS INTEGER)) FROM sqlite_stat1 "
                                    "WHERE tbl = :t"), {"t": table}).scalar()
    except OperationalError:  # no ANALYZE ever ran: no sqlite_stat1
        return 0.0
    return float(counted or 0)


def _changed_sqlite(conn, table: str) -> tuple[float, float]:
    """SQLite counts no changes: the difference between the rows there now
    and those last counted."""
    counted = _counted_sqlite(conn, table)
    rows = conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar()
    return abs(rows - counted), counted
