"""The hub's REST API, as the service calls it with its own token: a
user's groups (teams are hub groups) and whether the hub makes them an
admin, a group's members, making groups and changing their members, and a
user's servers. The one place the service talks to the hub."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Optional
from urllib.parse import quote

from jupyterhub.services.auth import HubOAuth
from tornado import httpclient, web

from gpuspawner.service.access.identity import JobRef
from gpuspawner.service.access.job_scope import job_of_note

log = logging.getLogger("gpuhub.hub_api")


class HubApi:
    def __init__(self, group_cache_seconds: float):
        self.group_cache_seconds = group_cache_seconds
        self._groups: dict[str, tuple[float, list[str]]] = {}
        self._admins: dict[str, bool] = {}
        # (token's SHA-256, or its hub id when the token is not at hand) ->
        # the job it was made for. Not the id alone: the hub may give a
        # deleted token's id to the next token it makes.
        self._token_jobs: dict[tuple[str, str], Optional[JobRef]] = {}

    async def call(self, method: str, path: str, body: Any = None) -> dict:
        """One request; raises HTTPClientError with the hub's answer."""
        auth = HubOAuth.instance()
        req = httpclient.HTTPRequest(f"{auth.api_url}{path}", method=method,
                                     headers={"Authorization": f"token {auth.api_token}"},
                                     body=None if body is None else json.dumps(body),
                                     allow_nonstandard_methods=True)
        resp = await httpclient.AsyncHTTPClient().fetch(req)
        return json.loads(resp.body) if resp.body else {}

    async def groups_of(self, model: dict) -> list[str]:
        """The user's groups, asked of the hub with the service's own token
        (the caller's token may not be allowed to read them), cached for
        ``group_cache_seconds``."""
        name = model["name"]
        cached = self._groups.get(name)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            user = await self.call("GET", f"/users/{quote(name)}")
            groups = user.get("groups") or []
            self._admins[name] = bool(user.get("admin"))
        except (httpclient.HTTPClientError, OSError) as e:
            log.warning("could not read groups of %s from the hub: %s", name, e)
            groups = model.get("groups") or []
        self._groups[name] = (time.monotonic() + self.group_cache_seconds, groups)
        return groups

    async def job_of_token(self, model: dict, token: Optional[str] = None) -> Optional[JobRef]:
        """The job attempt the request's token was made for (its note, as
        JobTokens wrote it), or None for any other token: asked of the hub
        once per token (a note never changes). Not knowing is a 503, never
        a token with its user's every right. ``token``: the request's token,
        whose hash keys the answer (a token id may be given again once its
        token is deleted, a job's token when its attempt ends)."""
        token_id = model.get("token_id")
        if not token_id or model.get("kind") != "user":
            return None
        key = ("sha256", hashlib.sha256(token.encode()).hexdigest()) if token else ("id", token_id)
        if key not in self._token_jobs:
            try:
                found = await self.call(
                    "GET", f"/users/{quote(model['name'])}/tokens/{quote(token_id)}")
            except (httpclient.HTTPClientError, OSError) as e:
                log.warning("could not read token %s of %s from the hub: %s", token_id,
                            model["name"], e)
                raise web.HTTPError(503, "the hub did not say what this token is for; "
                                         "try again in a few seconds")
            if len(self._token_jobs) > 10000:  # bounded: forget, ask again
                self._token_jobs.clear()
            self._token_jobs[key] = job_of_note(found.get("note"))
        return self._token_jobs[key]

    def forget_groups(self, user: str) -> None:
        """After a membership change: ask the hub again next time."""
        self._groups.pop(user, None)

    def is_admin(self, name: str) -> bool:
        """Whether the hub said (when asked for the user's groups) that this
        user is one of its admins."""
        return self._admins.get(name, False)

    async def group_members(self, group: str, strict: bool = False) -> Optional[list[str]]:
        """Who is in a hub group (a team's members): [] if the hub does not
        say, or None with ``strict`` (where not knowing must change nothing)."""
        try:
            found = await self.call("GET", f"/groups/{quote(group)}")
        except (httpclient.HTTPClientError, OSError) as e:
            if not (isinstance(e, httpclient.HTTPClientError) and e.code == 404):
                log.warning("could not read group %s from the hub: %s", group, e)
            return None if strict else []
        return sorted(found.get("users") or [])

    async def servers_of(self, user: str) -> Optional[dict]:
        """The user's servers by name ({} for a user the hub does not have),
        or None when the hub does not answer."""
        try:
            return (await self.call("GET", f"/users/{quote(user)}")).get("servers") or {}
        except httpclient.HTTPClientError as e:
            return {} if e.code == 404 else None
        except OSError:
            return None
