"""List once, then watch: what the backend knows of one kind of object
(Jobs, Deployments, Pods, Nodes), kept current by the API server's watch
events instead of a list per interval.

The pure part: ``Cache`` (the objects and the resourceVersion they are
current at), ``apply_event`` (ADDED/MODIFIED/DELETED/BOOKMARK/ERROR onto a
cache) and ``backoff_delay`` (capped exponential with jitter). No I/O:
table-tested. ``Reflector`` is the thin loop around them: it lists, then
watches from the list's resourceVersion, relists on 410 Gone and
reconnects with backoff, through two API calls it is given
(``KubeApi.list_kind`` and ``KubeApi.watch``).
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, Optional

log = logging.getLogger("gpuhub.kubernetes")

Key = tuple[str, str]   # (namespace, name); namespace "" for nodes

# What applying an event did.
APPLIED = "applied"      # the cache changed
STALE = "stale"          # an object at a version the cache already has: not applied again
BOOKMARK = "bookmark"    # only the resourceVersion moved on
GONE = "gone"            # 410: the version is compacted away, relist
ERROR = "error"          # any other error event: reconnect (with backoff)


class Gone(Exception):
    """The API server no longer has the resourceVersion asked for (HTTP 410)."""


def key_of(obj: dict) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]


def version_of(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def _not_newer(version: str, than: str) -> bool:
    """Whether ``version`` is at most ``than``. resourceVersions are opaque
    strings; etcd's (and the stand-in's) are integers, and only those are
    compared: anything else counts as newer."""
    return version.isdigit() and than.isdigit() and int(version) <= int(than)


@dataclass
class Cache:
    """One kind's objects as the API server last told them, and the
    resourceVersion to watch from ("" until listed, and after a 410)."""
    objects: dict[Key, dict] = field(default_factory=dict)
    resource_version: str = ""

    def replace(self, items: list[dict], resource_version: str) -> dict[Key, Optional[dict]]:
        """The cache becomes a list's answer; returns what changed (key ->
        the new object, None where one went away), as a relist after a gap
        must tell of the deletions it missed."""
        new = {key_of(o): o for o in items}
        changed: dict[Key, Optional[dict]] = {k: None for k in self.objects if k not in new}
        for k, o in new.items():
            old = self.objects.get(k)
            if old is None or version_of(old) != version_of(o) or not version_of(o):
                changed[k] = o
        self.objects, self.resource_version = new, resource_version
        return changed


def apply_event(cache: Cache, event: dict) -> tuple[str, Optional[Key]]:
    """Apply one watch event to ``cache``: (what it did, the key it changed).
    The cache's resourceVersion follows every event that carries one, so a
    reconnect resumes after the last event applied (none lost, none twice)."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        code = obj.get("code")
        return (GONE if code == 410 else ERROR), None
    version = version_of(obj)
    if kind == "BOOKMARK":
        if version:
            cache.resource_version = version
        return BOOKMARK, None
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        return ERROR, None
    key = key_of(obj)
    if version and _not_newer(version, cache.resource_version):
        return STALE, key
    old = cache.objects.get(key)
    if version:
        cache.resource_version = version
    if kind == "DELETED":
        if old is None:
            return STALE, key
        del cache.objects[key]
    else:
        cache.objects[key] = obj
    return APPLIED, key


def backoff_delay(failures: int, base: float, cap: float,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before the next try after ``failures`` failures in a
    row (0: none, go at once): ``base * 2**(failures-1)`` capped at ``cap``,
    of which a random half is taken off ("equal jitter": never zero, and
    many services losing one API server do not come back in step)."""
    if failures <= 0:
        return 0.0
    ceiling = min(cap, base * 2 ** min(failures - 1, 62))
    return ceiling / 2 + ceiling / 2 * rand()


async def json_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict]:
    """The JSON objects of a watch stream (one a line), however its bytes
    are cut into chunks."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)


# ---- the loop --------------------------------------------------------------------------------

ListCall = Callable[[str], Awaitable[tuple[list[dict], str]]]
WatchCall = Callable[[str, str], AsyncIterator[dict]]
OnChange = Callable[[str, Key, Optional[dict]], None]


class Reflector:
    """Keeps ``cache`` (one ``kind``) current: list, watch from the list's
    resourceVersion, apply events, advance on bookmarks; relist on 410
    (an ERROR event with code 410, or ``Gone`` on connect); after a
    disconnect or an error, watch again from the last version after
    ``backoff_delay``. The failure count goes back to 0 once an event gets
    through (a list alone does not: a watch must work too); a 410 before any
    event of a fresh list counts as a failure (so a server that says nothing
    else is not listed in a loop). ``on_change(kind, key, obj or None)`` hears of
    every change; ``on_synced(kind)`` of every completed list."""

    def __init__(self, kind: str, list_call: ListCall, watch_call: WatchCall,
                 on_change: OnChange, on_synced: Callable[[str], None] = lambda kind: None,
                 cache: Optional[Cache] = None,
                 backoff_base: float = 0.5, backoff_cap: float = 30.0,
                 sleep: Callable[[float], Awaitable] = asyncio.sleep,
                 rand: Callable[[], float] = random.random):
        self.kind = kind
        self.cache = cache if cache is not None else Cache()
        self._list, self._watch = list_call, watch_call
        self._on_change, self._on_synced = on_change, on_synced
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self._sleep, self._rand = sleep, rand
        self.failures = 0
        self._fresh = False   # no event since the last list
        # What happened, for tests and the benchmark: lists, watches, relists.
        self.counts = {"lists": 0, "watches": 0, "gone": 0, "failures": 0}

    async def run(self) -> None:
        while True:
            await self.step()

    async def step(self) -> None:
        """One list (if the cache needs one) and one watch, until the watch ends."""
        if self.failures:
            await self._sleep(backoff_delay(self.failures, self.backoff_base, self.backoff_cap,
                                            self._rand))
        try:
            if not self.cache.resource_version:
                await self._relist()
            await self._watch_once()
        except asyncio.CancelledError:
            raise
        except Gone:
            self._gone()
        except Exception as e:
            self.failures += 1
            self.counts["failures"] += 1
            log.warning("watching %s failed (%s: %s); again in a while (failure %d)",
                        self.kind, type(e).__name__, e, self.failures)

    def _gone(self) -> None:
        self.counts["gone"] += 1
        if self._fresh:   # 410 right after a list: a broken server, not history; back off
            self.failures += 1
        log.info("%s: resourceVersion %s is gone (410); listing again", self.kind,
                 self.cache.resource_version)
        self.cache.resource_version = ""

    async def _relist(self) -> None:
        items, version = await self._list(self.kind)
        self.counts["lists"] += 1
        self._fresh = True
        for key, obj in self.cache.replace(items, version).items():
            self._on_change(self.kind, key, obj)
        self._on_synced(self.kind)

    async def _watch_once(self) -> None:
        self.counts["watches"] += 1
        async for event in self._watch(self.kind, self.cache.resource_version):
            what, key = apply_event(self.cache, event)
            if what == GONE:
                self._gone()
                return
            if what == ERROR:
                raise RuntimeError(f"watch error event: {event.get('object')}")
            self.failures, self._fresh = 0, False
            if what == APPLIED:
                self._on_change(self.kind, key, self.cache.objects.get(key))
        # The server ended the watch (its timeout): again from the same version, at once.
