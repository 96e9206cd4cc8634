"""Every team's space kept as the hub's groups say (isolation/team_spaces.py
does the filesystem): at the service's start and every ``interval`` seconds
the members of each team's hub group (``team-<name>``) are read, and a team
whose members changed gets its space's way in, its Unix group and its
members' ``~/teams`` links set to them. A team the hub cannot answer for
keeps what it had: not knowing never takes anyone's access away.

Every ``measure_interval`` seconds each space is measured (in a thread,
isolation/space_usage.py) and the measurement kept in the database
(teams/storage.py). Against the team's storage quota count its space and
its datasets outside it: the team's view shows both, from 90 % with a
warning, and at 100 % the team's new work is refused.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Awaitable, Callable, Optional

from gpuspawner.isolation import space_usage
from gpuspawner.isolation.accounts import Accounts
from gpuspawner.isolation.team_spaces import SpaceError, TeamSpaces
from gpuspawner.service.teams.storage import SPACE, StorageLedger

log = logging.getLogger(__name__)


class SpaceSync:
    def __init__(self, spaces: TeamSpaces, accounts: Accounts,
                 members_of: Callable[[str], Awaitable[Optional[list[str]]]],
                 teams: Callable[[], list[str]], ledger: StorageLedger,
                 quota_of: Callable[[str], Optional[int]] = lambda team: None):
        self.spaces, self.accounts = spaces, accounts
        self.members_of = members_of      # team -> its hub group's members, None: unknown
        self.teams = teams                # the teams the service knows
        self.quota_of = quota_of          # team -> its storage quota in bytes, None: none
        self.ledger = ledger              # where measurements are kept
        self.applied: dict[str, tuple[str, ...]] = {}

    def team_dir(self, team: str) -> Optional[str]:
        """The space of ``team`` once it is made (for a workload's GPUHUB_TEAM_DIR)."""
        return self.spaces.path(team) if team in self.applied else None

    async def sync_once(self) -> dict[str, tuple[str, ...]]:
        """Read every team's members; apply what changed. Returns the teams changed."""
        known = {}
        for team in self.teams():
            users = await self.members_of(team)
            if users is not None:
                known[team] = tuple(sorted(users))
        changed = {t: m for t, m in known.items() if self.applied.get(t) != m}
        if changed:
            await asyncio.to_thread(self._apply, changed)
        return changed

    def _apply(self, changed: dict[str, tuple[str, ...]]) -> None:
        before = dict(self.applied)
        for team, users in changed.items():
            try:
                self.spaces.sync(team, [self.accounts.ensure(u) for u in users])
            except (SpaceError, OSError) as e:
                log.error("team %s: its space could not be kept: %s", team, e)
                continue
            gone = set(before.get(team, ())) - set(users)
            self.applied[team] = users
            log.info("team %s: its space lets in %s%s", team, ", ".join(users) or "no one",
                     f" (no longer {', '.join(sorted(gone))})" if gone else "")
        # whose links change: everyone who joined or left a changed team
        touched = {u for t in changed for u in (*changed[t], *before.get(t, ()))}
        for user in sorted(touched):
            teams = [t for t, members in self.applied.items() if user in members]
            try:
                self.spaces.link_homes(teams, self.accounts.ensure(user))
            except OSError as e:  # a home the user rearranged: their links, their business
                log.warning("%s: ~/teams links not made: %s", user, e)

    # ---- storage -------------------------------------------------------------
    def measure_all(self) -> None:
        """Measure every space made so far (blocking: run it in a thread)."""
        for team in list(self.applied):
            usage = space_usage.measure(self.spaces.path(team))
            self.ledger.record(SPACE, team, team, usage)
            if usage.seconds > 10:
                log.warning("team %s: measuring its space (%d files) took %.0f s", team,
                            usage.files, usage.seconds)

    def _used(self, team: str):
        """(the space's last measurement or None, what the team's datasets
        outside it hold): together they count against its quota."""
        return self.ledger.latest_of(SPACE, team), self.ledger.datasets_bytes(team)

    def storage_view(self, team: str) -> Optional[dict]:
        """What the team's view shows of its space (None: it has none yet)."""
        if team not in self.applied:
            return None
        usage, datasets = self._used(team)
        quota = self.quota_of(team)
        space = usage.bytes if usage else 0
        return {"path": self.spaces.path(team), "used_bytes": space + datasets,
                "space_bytes": space, "datasets_bytes": datasets, "quota_bytes": quota,
                "files": usage.files if usage else None,
                "measured_at": usage.measured_at if usage else None,
                "state": space_usage.state(space + datasets, quota)}

    def refusal(self, team: str) -> Optional[str]:
        """Why the team's new work is refused (its storage is full), or None."""
        quota = self.quota_of(team)
        if not quota:
            return None
        usage, datasets = self._used(team)
        used = (usage.bytes if usage else 0) + datasets
        if (usage or datasets) and space_usage.state(used, quota) == space_usage.FULL:
            return space_usage.refusal(team, used, quota, datasets)
        return None

    async def run(self, interval: float, measure_interval: float = 300.0) -> None:
        next_measure = 0.0
        loop = asyncio.get_running_loop()
        while interval > 0:
            try:
                await self.sync_once()
                if measure_interval > 0 and loop.time() >= next_measure:
                    await asyncio.to_thread(self.measure_all)
                    next_measure = loop.time() + measure_interval
            except Exception:
                log.exception("team spaces: sync failed")
            await asyncio.sleep(interval)


def space_root(data_dir: str) -> str:
    return os.path.join(data_dir, "teams")
