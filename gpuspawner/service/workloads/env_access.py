"""Who sees the values of a workload's ``env`` (API keys live there): its
owner, and admins reading that one workload (``GET /workloads/ID``), each
such read of someone else's values recorded in the audit log
(``read-env``); lists show values to their owner only. Everyone else who
may see the workload (its team-mates, the team's lead) sees the names, each
value ``REDACTED``, and ``env_redacted: true``. Logs are shared with the
team (docs/service.md, *Trust model*)."""
from __future__ import annotations

from typing import Optional

from gpuspawner.store import WorkloadRow
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.facades import Records
from gpuspawner.service.access.identity import Identity

REDACTED = "•••"


def shows(who: Optional[Identity], owner: str) -> bool:
    """Whether ``who`` sees the values of ``owner``'s env."""
    return who is not None and (who.name == owner or who.admin)


def redact(env: Optional[dict]) -> dict:
    return {name: REDACTED for name in env or {}}


def keep_redacted(new_env: Optional[dict], old_env: Optional[dict]) -> dict:
    """``new_env`` with every value sent back as ``REDACTED`` (a teammate or
    lead who saw only the names, PATCHing the whole spec) replaced by the
    value it stands for. ValueError naming the variable when there is none
    (a new name: its value must be given)."""
    old_env = old_env or {}
    out = dict(new_env or {})
    for name, value in out.items():
        if value == REDACTED:
            if name not in old_env:
                raise ValueError(name)
            out[name] = old_env[name]
    return out


def audit_read(records: Records, who: Identity, row: WorkloadRow) -> None:
    """An admin's read of another user's env values, in the audit log."""
    if not who.admin or row.user == who.name or not (row.spec or {}).get("env"):
        return
    with records.store.transaction() as s:
        journal.audit(s, records.clock(), who.name, "read-env", row.id,
                      {"owner": row.user, "names": sorted(row.spec["env"])})
