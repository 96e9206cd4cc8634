"""Whether a schedule's owner may still fire it, as the hub says now (issue
33 item 9): asked once per schedule loop for the owners of due schedules
(``refresh``, async: the hub's API), then read by ``Schedules.fire_due``
(synchronously) through ``refused`` and ``leads``.

An owner may fire a schedule of team T while the hub has them and they are
in T's group (for the default team: in no other team's group). Not knowing
(the hub does not answer) is not a refusal: the firing goes ahead, as before.

A team's leads are the users (and members of groups) holding the role
``gpuhub-lead-<team>`` (what ``gpuhub up``'s leads make; ``hub/config.py``
``lead_roles``): JupyterHub's API names a user's roles but not a role's
scopes, so leads by a role of another name are not found (the owner is
still told, and the pause is audited).
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Iterable, Optional
from urllib.parse import quote

from tornado import httpclient

from gpuspawner.service.access.identity import team_of_group

log = logging.getLogger("gpuhub.membership")
LEAD_ROLE = "gpuhub-lead-{team}"
PAGE = 200


def why_refused(user: str, team: str, groups: Optional[list[str]], prefix: str,
                default_team: str) -> Optional[str]:
    """Why ``user`` (with hub ``groups``; None: the hub has no such user)
    may no longer submit as ``team``; None when they may."""
    if groups is None:
        return f"{user} is no longer a user of the hub"
    teams = {t for t in (team_of_group(g, prefix) for g in groups) if t}
    if team in teams:
        return None
    if team == default_team:
        others = sorted(teams)
        return (None if not others else
                f"{user} is no longer in team {team} (now in team {', '.join(others)})")
    return f"{user} is no longer in team {team}"


class HubMembership:
    def __init__(self, call: Callable[[str, str], Awaitable[Any]], prefix: str,
                 default_team: str):
        """``call(method, path)``: the hub's API with the service's token
        (``HubApi.call``)."""
        self.call = call
        self.prefix = prefix
        self.default_team = default_team
        self._refused: dict[tuple[str, str], str] = {}
        self._leads: dict[str, list[str]] = {}

    def refused(self, user: str, team: str) -> Optional[str]:
        return self._refused.get((user, team))

    def leads(self, team: str) -> list[str]:
        return self._leads.get(team, [])

    async def refresh(self, owners: Iterable[tuple[str, str]]) -> None:
        """Ask the hub about each (user, team); the leads of teams refused."""
        refused: dict[tuple[str, str], str] = {}
        for user, team in sorted(set(owners)):
            try:
                groups = (await self.call("GET", f"/users/{quote(user)}")).get("groups") or []
            except httpclient.HTTPClientError as e:
                if e.code != 404:
                    log.warning("could not read %s from the hub: %s", user, e)
                    continue
                groups = None
            except Exception as e:  # not knowing is no refusal: the firing goes ahead
                log.warning("could not read %s from the hub: %s", user, e)
                continue
            why = why_refused(user, team, groups, self.prefix, self.default_team)
            if why:
                refused[(user, team)] = why
        self._refused = refused
        self._leads = {team: await self._leads_of(team) for team in {t for _, t in refused}}

    async def _leads_of(self, team: str) -> list[str]:
        role = LEAD_ROLE.format(team=team)
        try:
            users = await self._all("/users")
            groups = await self._all("/groups")
        except Exception as e:  # the owner is still told
            log.warning("could not read the leads of team %s from the hub: %s", team, e)
            return []
        out = {u["name"] for u in users if role in (u.get("roles") or [])}
        for g in groups:
            if role in (g.get("roles") or []):
                out |= set(g.get("users") or [])
        return sorted(out)

    async def _all(self, path: str) -> list[dict]:
        out: list[dict] = []
        while True:
            page = await self.call("GET", f"{path}?offset={len(out)}&limit={PAGE}")
            items = page.get("items", []) if isinstance(page, dict) else page
            out += items
            if len(items) < PAGE:
                return out
