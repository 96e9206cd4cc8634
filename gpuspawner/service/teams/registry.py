"""Teams as the service keeps them: a team row and its quotas, made on first
use (a hub group ``team-<name>`` is enough), the default team that owns
whatever no other team does, and which team a request is for."""
from __future__ import annotations

from typing import Callable, Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuspawner.scheduler.model import Quota
from gpuspawner.store import QuotaRow, Store, TeamRow
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.rebuild import to_team
from gpuspawner.vocab.specs import SpecError


class TeamBook:
    def __init__(self, store: Store, prefix: str, default_quota: Quota, default_team: str,
                 notebook_gpu_limits: dict, change: Callable, pool_sizes: Callable):
        """``change(fn)``: ``fn(scheduler)`` applied to the core (the engine's
        ``change``); ``pool_sizes()``: pool -> GPUs of its nodes."""
        self.store = store
        self.prefix = prefix
        self.default_quota = default_quota
        self.default_team = default_team
        self.notebook_gpu_limits = notebook_gpu_limits
        self.change = change
        self.pool_sizes = pool_sizes

    def team_for(self, who: Identity, asked: Optional[str]) -> str:
        if asked:
            if asked not in who.teams and not who.admin:
                raise SpecError("team", f"you are not a member of team {asked!r} (JupyterHub "
                                        f"group {self.prefix}{asked})", status=403)
            return asked
        if len(who.teams) == 1:
            return next(iter(who.teams))
        if not who.teams:
            raise SpecError("team", f"you are in no team: ask an admin to add you to a "
                                    f"JupyterHub group named {self.prefix}<team>", status=403)
        raise SpecError("team", f"you are in teams {', '.join(sorted(who.teams))}: say which one")

    def ensure(self, name: str, now: float, s: Optional[Session] = None) -> TeamRow:
        """The team's row, made (with the default quota in every pool) if new."""
        if s is None:
            with self.store.transaction() as s:
                return self.ensure(name, now, s)
        team = s.get(TeamRow, name)
        if team is None:
            team = TeamRow(name=name, group=self.prefix + name, weight=1.0, created_at=now)
            s.add(team)
            s.flush()
            q = self.default_quota
            rows = [QuotaRow(team=name, pool=pool, nominal=q.nominal,
                             borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit,
                             cpus=q.cpus, memory=q.memory)
                    for pool in sorted(self.pool_sizes())]
            s.add_all(rows)
            s.flush()
            core_team = to_team(team, rows)
            self.change(lambda sched: sched.set_team(core_team))
        return team

    def refresh_default(self, s: Session) -> None:
        """The default team guarantees, in each pool, the GPUs no other team
        does: all of them on a first start, less as teams get quotas."""
        name = self.default_team
        team = s.get(TeamRow, name) if name else None
        if team is None:
            return
        owned: dict[str, int] = {}
        for q in s.scalars(select(QuotaRow).where(QuotaRow.team != name)):
            owned[q.pool] = owned.get(q.pool, 0) + q.nominal
        for pool, size in self.pool_sizes().items():
            row = s.get(QuotaRow, (name, pool)) or QuotaRow(team=name, pool=pool)
            row.nominal = max(0, size - owned.get(pool, 0))
            row.borrowing_limit = row.lending_limit = None
            s.add(row)
        s.flush()
        core_team = to_team(team, quota_rows(s, name))
        self.change(lambda sched: sched.set_team(core_team))

    def names(self) -> list[str]:
        """Every team the service knows, by name."""
        with self.store.session() as s:
            return sorted(s.scalars(select(TeamRow.name)))

    def notebook_gpu_limit(self, team: str, pool: str) -> Optional[int]:
        """Most GPUs one notebook server of ``team`` may hold in ``pool``."""
        limits = self.notebook_gpu_limits
        for t in (team, "*"):
            for p in (pool, "*"):
                if p in limits.get(t, {}):
                    return limits[t][p]
        return None


def quota_rows(s: Session, team: str) -> list[QuotaRow]:
    return list(s.scalars(select(QuotaRow).where(QuotaRow.team == team)))
