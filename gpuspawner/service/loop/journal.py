"""The two logs every change writes in its transaction: the workload's
events (what happened to it, for its user) and the audit log (who did
what, hash-chained, for admins)."""
from __future__ import annotations

from typing import Optional

from sqlalchemy.orm import Session

from gpuspawner.store import AuditEntry, EventRow


def event(s: Session, wid: str, type_: str, now: float, message: str,
          attempt: Optional[int] = None, data: Optional[dict] = None) -> None:
    s.add(EventRow(workload_id=wid, type=type_, time=now, attempt=attempt, message=message,
                   data=data or {}))


def audit(s: Session, now: float, actor: str, action: str, target: str, detail: dict) -> None:
    s.add(AuditEntry(time=now, actor=actor, action=action, target=target, detail=detail))
