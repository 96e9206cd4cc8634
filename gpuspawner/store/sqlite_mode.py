"""SQLite's write-ahead log, switched on once per database file.

The mode is kept in the file, but switching a file into it needs the
database to itself, and SQLite answers "database is locked" at once to a
connection that tries while another holds the file, without waiting the busy
timeout. Connections opened together on a new file (the service's threads on
its first start) could so fail their first statement. The migration's
connection switches the file before any other connection of the service
opens; every connection still asks, and tries again for a while if another
holds the file at that moment (a second process starting at once).
"""
from __future__ import annotations

import sqlite3
import time
from typing import Callable


def use_wal(dbapi_conn: sqlite3.Connection, wait_s: float,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> None:
    """Put the connection's file in WAL mode, waiting up to ``wait_s`` for
    other connections to let it go. A file already in it is left alone."""
    deadline = clock() + wait_s
    pause = 0.005
    while True:
        cur = dbapi_conn.cursor()
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                return
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or clock() >= deadline:
                raise
        finally:
            cur.close()
        sleep(pause)
        pause = min(pause * 2, 0.1)
