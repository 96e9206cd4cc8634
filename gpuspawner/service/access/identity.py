"""Who is asking, and what JupyterHub's scopes let them do.

Scopes (defined as JupyterHub custom scopes by the hub config):
- ``custom:gpuhub:submit``: submit work and act on one's own workloads;
- ``custom:gpuhub:team-admin`` (``!group=team-x`` to limit it to one team):
  act on every workload of the team;
- ``custom:gpuhub:admin``: everything, including quotas;
- ``custom:gpuhub:invoke``: call the model endpoints of one's teams. A token
  with only this one of them (made for an external client) can do nothing
  else: no listing, logs, usage or cancelling.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

SUBMIT = "custom:gpuhub:submit"
TEAM_ADMIN = "custom:gpuhub:team-admin"
ADMIN = "custom:gpuhub:admin"
INVOKE = "custom:gpuhub:invoke"


@dataclass(frozen=True)
class JobRef:
    """The attempt a job's own token was made for (job_scope.py)."""
    workload: str
    attempt: int


@dataclass(frozen=True)
class Identity:
    name: str
    teams: frozenset[str] = frozenset()
    can_submit: bool = False
    admin: bool = False
    # Teams whose every workload this user may act on.
    leads: frozenset[str] = frozenset()
    scopes: frozenset[str] = field(default_factory=frozenset)
    # Set when the token is a job's own (GPUHUB_TOKEN): job_scope.ALLOWED holds it.
    job: Optional[JobRef] = None

    @property
    def invoke_only(self) -> bool:
        """The token may call endpoints and nothing else."""
        return INVOKE in self.scopes and not any(
            s.partition("!")[0] in (SUBMIT, TEAM_ADMIN, ADMIN) for s in self.scopes)

    def sees_team(self, team: str) -> bool:
        return self.admin or team in self.teams or team in self.leads

    def acts_on(self, owner: str, team: str) -> bool:
        return self.admin or team in self.leads or (owner == self.name and team in self.teams)


def team_of_group(group: str, prefix: str) -> str | None:
    if prefix and not group.startswith(prefix):
        return None
    return group[len(prefix):] or None


def identity_from_model(model: dict, groups: list[str], prefix: str) -> Identity:
    """Build an Identity from a JupyterHub user model and the user's groups."""
    scopes = frozenset(model.get("scopes") or ())
    teams = frozenset(t for t in (team_of_group(g, prefix) for g in groups) if t)
    leads = set()
    for scope in scopes:
        base, _, filt = scope.partition("!")
        if base != TEAM_ADMIN:
            continue
        if not filt:
            leads |= teams
        elif filt.startswith("group="):
            team = team_of_group(filt[len("group="):], prefix)
            if team:
                leads.add(team)
    return Identity(name=model["name"], teams=teams, can_submit=SUBMIT in scopes or ADMIN in scopes,
                    admin=ADMIN in scopes, leads=frozenset(leads), scopes=scopes)
