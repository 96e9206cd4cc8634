"""A team's storage quota: the one an admin set (the API's ``PUT /teams/NAME``
``storage_quota``, the admin panel's Teams page), kept on the team's row, or
else the configuration's (``GpuHubService.team_storage_quotas``, ``"*"`` for
every team not named). Read from the database at each use: a change holds
from the next submit and the next look at the team, without a restart."""
from __future__ import annotations

import re
from typing import Optional

from gpuspawner.isolation.gpu_rules import LimitError, parse_memory
from gpuspawner.isolation.resources import human_memory
from gpuspawner.service.errors import Forbidden
from gpuspawner.service.loop import journal
from gpuspawner.store import Store, TeamRow
from gpuspawner.vocab.specs import SpecError

# What removes the quota an admin set (the configuration's applies again).
REMOVE = ("", "0", "none")
# The sizes the API takes, as its schema says them (openapi.yaml's
# TeamChange.storage_quota): no more, so that what the schema refuses is refused.
SIZE = re.compile(r"[0-9]+(\.[0-9]+)? *[KkMmGgTt]?(i?[Bb]?)?")


def parse_storage_quota(value, field: str = "storage_quota") -> Optional[int]:
    """Bytes from ``"200G"``, ``"1.5T"`` or a number of bytes; None from
    ``0``, ``"0"``, ``"none"``, ``""`` or null (the team's own quota removed)."""
    if value is None or (isinstance(value, str) and value in REMOVE) or (
            value == 0 and not isinstance(value, bool)):
        return None
    try:
        if isinstance(value, str) and not SIZE.fullmatch(value):
            raise LimitError(value)
        return parse_memory(value, field)
    except LimitError:
        raise SpecError(field, f"{value!r} is not a size like 200G or 1.5T (0 or none: "
                               f"remove the team's own quota, the configuration's applies)"
                        ) from None


class StorageQuotas:
    def __init__(self, store: Store, configured: dict[str, int]):
        self.store = store
        self.configured = configured  # team (or "*") -> bytes, from the configuration
        # The teams' own quotas as last read: every submit asks, only ``set`` changes them.
        self._own: dict[str, Optional[int]] = {}

    def default(self, team: str) -> Optional[int]:
        """The configuration's quota of ``team`` (None: none)."""
        return self.configured.get(team, self.configured.get("*"))

    def own(self, team: str) -> Optional[int]:
        """The quota an admin set for ``team`` (None: none set)."""
        if team not in self._own:
            with self.store.session() as s:
                row = s.get(TeamRow, team)
                self._own[team] = row.storage_quota if row else None
        return self._own[team]

    def of(self, team: str) -> Optional[int]:
        """The quota that holds for ``team``: its own, else the configuration's."""
        own = self.own(team)
        return own if own is not None else self.default(team)

    @staticmethod
    def check(steering, who, team: str) -> None:
        """Raise if ``who`` may not set ``team``'s storage quota (before any
        other change of the same request is made)."""
        if not who.admin:
            raise Forbidden("changing storage quotas needs the scope custom:gpuhub:admin")
        if team == steering.teams.default_team:
            raise SpecError("team", f"team {team} is the default team: it has no team space "
                                    f"to hold to a quota", status=409)

    def set(self, steering, who, team: str, size: Optional[int]) -> Optional[int]:
        """Set (None: remove) ``team``'s own storage quota, audited with its
        before and after; returns the quota that holds from now."""
        self.check(steering, who, team)
        now = steering.records.clock()
        with steering.records.store.transaction() as s:
            row = steering.teams.ensure(team, now, s)
            before, row.storage_quota = row.storage_quota, size
            journal.audit(s, now, who.name, "set-storage-quota", team,
                          {"before": before, "after": size, "default": self.default(team)})
        self._own[team] = size
        return self.of(team)


def saved(team: str, quota: Optional[int], own: bool, view: Optional[dict]) -> str:
    """What an admin reads after setting ``team``'s quota: the quota that
    holds, whose it is, and how much of it the team uses (``view``: its
    space's last measurement, teams/spaces.py)."""
    if quota is None:
        return f"team {team}: no storage quota (none of its own, none configured)"
    whose = "its own" if own else "the configuration's"
    text = f"team {team}: storage quota {human_memory(quota)} ({whose})"
    if view and view.get("measured_at") is not None:
        used = view["used_bytes"]
        text += f"; {human_memory(used)} used, {100 * used / quota:.0f} %"
        if used >= quota:
            text += ": its new jobs are refused until files are removed"
    return text
