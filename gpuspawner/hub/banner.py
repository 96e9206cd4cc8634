"""The hub pages' banner: a user's active notices from the scheduler service
(the culler's warnings), as JupyterHub's ``announcement`` template variable.

JupyterHub calls template variables synchronously for every page, so the
lookup is short (a loopback call with a 1 s timeout) and cached per user.
"""
from __future__ import annotations

import html
import json
import time
import urllib.parse
import urllib.request
from typing import Callable


def notice_banner(api_url: str, token: str, cache_seconds: float = 10.0,
                  timeout: float = 1.0) -> Callable:
    cache: dict[str, tuple[float, str]] = {}

    def banner(user) -> str:
        if user is None:
            return ""
        hit = cache.get(user.name)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        url = f"{api_url.rstrip('/')}/notices?user={urllib.parse.quote(user.name)}"
        req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                notices = json.load(resp).get("notices", [])
        except (OSError, ValueError):
            notices = []  # the service is down: no banner rather than no page
        text = "<br>".join(html.escape(n["message"]) for n in notices)
        cache[user.name] = (time.monotonic() + cache_seconds, text)
        return text

    return banner
