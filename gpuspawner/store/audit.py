"""The audit log's hash chain.

Each entry's ``hash`` is SHA-256 over the previous entry's hash and the
entry's own content, so changing, removing or reordering any entry (even by
someone who drops the append-only triggers) breaks every hash after it;
``verify`` recomputes the chain (``gpuhub audit verify``).
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable, Optional

from sqlalchemy import event, inspect, select
from sqlalchemy.orm import Session

from .models import AuditEntry

GENESIS = "0" * 64


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
    prev = session.scalar(select(AuditEntry.hash).order_by(AuditEntry.id.desc()).limit(1))
    prev = prev or GENESIS
    for entry in new:
        entry.hash = entry_hash(prev, entry)
        prev = entry.hash


def install(sessions) -> None:
    """Chain every AuditEntry written through ``sessions`` (a sessionmaker)."""
    if not event.contains(sessions, "before_flush", _chain_new_entries):
        event.listen(sessions, "before_flush", _chain_new_entries)


def verify(entries: Iterable[AuditEntry]) -> Optional[str]:
    """None if the chain holds, else which entry breaks it and how."""
    prev = GENESIS
    for e in entries:
        if e.hash != entry_hash(prev, e):
            return (f"audit entry {e.id} ({e.action} by {e.actor} on {e.target}) does not match "
                    f"its hash: it, or an entry before it, was changed or removed")
        prev = e.hash
    return None
