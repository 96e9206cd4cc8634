"""Pods' logs into the attempt's log file (what ``gpuhub logs`` and
``gpuhub logs -f`` read): followed live while a pod runs and someone
follows the attempt's log (one API stream per pod, so only then), and when
the attempt ends whatever the follows did not bring (all of it for a pod
never followed, the rest after a broken or stopped follow). The bytes
already in the file are counted per pod, so nothing is written twice."""
from __future__ import annotations

import asyncio
import logging
import os

from .api import error_text

log = logging.getLogger("gpuhub.kubernetes")
Key = tuple[str, str]


def append(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


class PodLogs:
    """``on_done()`` is called when a follow ends (the backend then reports
    the attempt's end, which it held while its log was still coming)."""

    def __init__(self, api, finish_wait: float = 2.0, on_done=lambda: None):
        self.api = api
        self.finish_wait = finish_wait   # how long an ended pod's follow may take to drain
        self.on_done = on_done
        self._written: dict[Key, int] = {}
        self._following: dict[Key, asyncio.Task] = {}

    def following(self, namespace: str, pods: list[str]) -> bool:
        """Whether the log of any of these pods is still being followed."""
        return any((namespace, pod) in self._following for pod in pods)

    def follow(self, namespace: str, pod: str, path: str) -> None:
        """Start following a running pod's log into ``path`` (once at a time)."""
        key = (namespace, pod)
        if key not in self._following:
            self._following[key] = asyncio.get_event_loop().create_task(
                self._follow(key, path))

    async def _follow(self, key: Key, path: str) -> None:
        skip = self._written.get(key, 0)   # a follow again: what the file has is sent again
        try:
            async for chunk in self.api.follow_log(key[1], key[0]):
                cut = min(skip, len(chunk))
                chunk, skip = chunk[cut:], skip - cut
                if chunk:
                    append(path, chunk)
                    self._written[key] = self._written.get(key, 0) + len(chunk)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("following the log of pod %s/%s broke: %s", *key, error_text(e))
        finally:
            self._following.pop(key, None)
            self.on_done()

    def stop(self, namespace: str, pods: list[str]) -> None:
        """Stop following these pods (nobody reads along any more)."""
        for pod in pods:
            task = self._following.get((namespace, pod))
            if task is not None:
                task.cancel()

    async def collect(self, namespace: str, pods: list[str], path: str) -> None:
        """The pods ended: the rest of their logs into ``path``, then forget them."""
        for pod in sorted(pods):
            key = (namespace, pod)
            task = self._following.get(key)
            if task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(task), self.finish_wait)
                except (asyncio.TimeoutError, Exception):
                    task.cancel()
            try:
                data = (await self.api.pod_log(pod, namespace)).encode("utf-8", "replace")
            except Exception as e:
                data = f"[gpuhub: no log of pod {pod}: {error_text(e)}]\n".encode()
                self._written.pop(key, None)
            rest = data[self._written.pop(key, 0):]
            if rest and path:
                append(path, rest)

    async def close(self) -> None:
        for task in list(self._following.values()):
            task.cancel()
        await asyncio.gather(*self._following.values(), return_exceptions=True)
