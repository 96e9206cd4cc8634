"""The audit log's hash chain.

Each entry's ``hash`` is SHA-256 over the previous entry's hash and the
entry's own content, so changing, removing or reordering any entry (even by
someone who drops the append-only triggers) breaks every hash after it;
``verify`` recomputes the chain (``gpuhub audit verify``).

Entries are chained by ``AuditedSession``, the session class of every Store:
its listener is attached once, to a class that lives as long as the process.
(It used to be attached per sessionmaker behind ``event.contains``, which
SQLAlchemy answers by the ``id()`` of the sessionmaker's generated class and
remembers after that class is gone: a new Store whose class got a freed id was
told "already listening" and wrote entries with no hash, a false tamper alarm.)
Writers append one at a time: the previous hash is read under a lock held to
the end of the transaction, so two writers never chain to the same entry.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable, Optional

from sqlalchemy import event, inspect, select, text
from sqlalchemy.orm import Session

from .models import AuditEntry

GENESIS = "0" * 64
# pg_advisory_xact_lock's key for appending to the chain (any fixed bigint).
_PG_CHAIN_LOCK = 0x617564697400  # "audit\0"


def entry_hash(prev: str, entry: AuditEntry) -> str:
    content = json.dumps({"time": entry.time, "actor": entry.actor, "action": entry.action,
                          "target": entry.target or "", "detail": entry.detail or {}},
                         sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256((prev + content).encode()).hexdigest()


def _chain_new_entries(session: Session, _context, _instances) -> None:
    # In the order they were added, which is the order they get their ids.
    new = sorted((o for o in session.new if isinstance(o, AuditEntry)),
                 key=lambda o: inspect(o).insert_order)
    if not new:
        return
    _lock_chain(session)
    prev = session.scalar(select(AuditEntry.hash).order_by(AuditEntry.id.desc()).limit(1))
    prev = prev or GENESIS
    for entry in new:
        entry.hash = entry_hash(prev, entry)
        prev = entry.hash


def _lock_chain(session: Session) -> None:
    """Hold the chain's end until this transaction ends. PostgreSQL: an
    advisory lock (READ COMMITTED then sees the last committed entry). SQLite:
    the database's write lock, taken by a write that changes no row (Python's
    sqlite3 runs a SELECT before the first write outside the transaction, so
    without it two writers can read the same previous hash)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_CHAIN_LOCK})
    elif dialect == "sqlite":
        session.execute(text("DELETE FROM audit_log WHERE 0"))


class AuditedSession(Session):
    """A Session that chains the AuditEntry rows it writes (Store uses it)."""


event.listen(AuditedSession, "before_flush", _chain_new_entries)


def verify(entries: Iterable[AuditEntry]) -> Optional[str]:
    """None if the chain holds, else which entry breaks it and how."""
    prev = GENESIS
    for e in entries:
        if e.hash != entry_hash(prev, e):
            return (f"audit entry {e.id} ({e.action} by {e.actor} on {e.target}) does not match "
                    f"its hash: it, or an entry before it, was changed or removed")
        prev = e.hash
    return None
