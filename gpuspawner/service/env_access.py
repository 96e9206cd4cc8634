"""Who sees the values of a workload's ``env`` (API keys live there): its
owner, and admins, each read by an admin of someone else's values recorded
in the audit log (``read-env``). Everyone else who may see the workload (its
team-mates, the team's lead) sees the names, each value ``REDACTED``, and
``env_redacted: true``. Logs are shared with the team (docs/service.md,
*Trust model*)."""
from __future__ import annotations

from typing import Iterable, Optional

from ..store import WorkloadRow
from . import journal
from .identity import Identity

REDACTED = "•••"


def shows(who: Optional[Identity], owner: str) -> bool:
    """Whether ``who`` sees the values of ``owner``'s env."""
    return who is not None and (who.name == owner or who.admin)


def redact(env: Optional[dict]) -> dict:
    return {name: REDACTED for name in env or {}}


def audit_reads(engine, who: Identity, rows: Iterable[WorkloadRow]) -> None:
    """One audit entry for an admin's read of other users' env values (a
    listing makes one entry naming every workload it showed)."""
    if not who.admin:
        return
    read = sorted({(r.id, r.user) for r in rows
                   if r.user != who.name and (r.spec or {}).get("env")})
    if not read:
        return
    with engine.store.transaction() as s:
        journal.audit(s, engine.clock(), who.name, "read-env",
                      read[0][0] if len(read) == 1 else f"{len(read)} workloads",
                      {"workloads": [wid for wid, _ in read],
                       "owners": sorted({user for _, user in read})})
