"""The hub pages' banner: a user's active notices from the scheduler service
(the culler's warnings), as JupyterHub's ``announcement`` template variable.

JupyterHub calls template variables synchronously on its event loop for every
page. A blocking call to the service from there could deadlock: the service
checks the caller's token with the hub, which cannot answer while it waits
(the page then came without its banner, CI's culler test saw it). So the
page reads a snapshot in memory, and a task on the hub's loop refreshes the
snapshot of everyone's active notices every ``refresh_seconds``, with the
non-blocking client.
"""
from __future__ import annotations

import asyncio
import html
import logging
from typing import Optional

from ..client.aio import AsyncApi
from ..client.errors import ApiError
from ..client.tornado_api import TornadoApi

log = logging.getLogger(__name__)


class NoticeBanner:
    """``banner(user)``: the HTML of the user's notices, from the last
    snapshot. The first call (the first page) starts the refreshing task."""

    def __init__(self, api_url: str, token: str, refresh_seconds: float = 2.0,
                 timeout: float = 10.0, client: Optional[AsyncApi] = None):
        self.client = client or TornadoApi(api_url, token, timeout=timeout)
        self.refresh_seconds = refresh_seconds
        self.messages: dict[str, list[str]] = {}
        self._task: Optional[asyncio.Task] = None

    def __call__(self, user) -> str:
        self.start()
        if user is None:
            return ""
        return "<br>".join(html.escape(m) for m in self.messages.get(user.name, ()))

    def start(self) -> None:
        """Start refreshing on the running loop (once; again if it ended)."""
        if self._task is not None and not self._task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on a loop (a tool rendering a template): the snapshot as it is
        self._task = loop.create_task(self._refresh_forever())

    async def refresh(self) -> None:
        """Take a new snapshot; when the service does not answer, no banner
        (rather than a stale warning about a server that was culled)."""
        try:
            answer = await self.client.list_notices()
        except ApiError as e:
            log.debug("no notices for the banner: %s", e)
            self.messages = {}
            return
        messages: dict[str, list[str]] = {}
        for notice in answer.get("notices", []):
            messages.setdefault(notice["user"], []).append(notice["message"])
        self.messages = messages

    async def _refresh_forever(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_seconds)
