"""The server extension's client of the scheduler service: the generated
client (``gpuspawner.client``) over tornado's HTTP client for calls, httpx
for log streams, so a slow service never blocks the server. Every error is
the client's ``ApiError`` (status 0: the service could not be reached)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

import httpx

from gpuspawner.client.errors import ApiError, error_of
from gpuspawner.client.request import API_PATH, Request
from gpuspawner.client.tornado_api import TornadoApi


class ServiceClient(TornadoApi):
    """``url``: the service's base (``…/services/gpuhub``)."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0):
        super().__init__(url + API_PATH, token, timeout=timeout)
        self.url = url

    async def _send(self, request: Request) -> Any:
        if not self.token:
            raise ApiError(503, "this server has no token for the GPU Hub service "
                                "(JUPYTERHUB_API_TOKEN is not set)")
        return await super()._send(request)

    async def stream(self, request: Request, on_chunk: Callable[[bytes], None],
                     last_event_id: Optional[str] = None, timeout: float = 3600.0) -> None:
        """A server-sent event stream, chunk by chunk, as the service sends
        it, for at most ``timeout`` seconds. An error answer is not streamed:
        it raises ``ApiError``. Cancelling the call closes the connection
        to the service at once: a quiet stream (a queued attempt) is not held
        open for a browser that went away. (httpx, not tornado's client:
        a tornado fetch cannot be cancelled, and every open stream would
        hold one of its ten connections.)"""
        headers = {"Authorization": f"token {self.token}", "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        started = False
        url = self.api + request.path

        async def follow() -> None:
            nonlocal started
            limits = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0), read=None)
            async with httpx.AsyncClient(timeout=limits) as client:
                async with client.stream(request.method, url, params=list(request.params),
                                         headers=headers) as response:
                    if response.status_code >= 400:
                        raise error_of(response.status_code, await response.aread(),
                                       f"{request.method} {url}", response.reason_phrase)
                    async for chunk in response.aiter_bytes():
                        started = True
                        on_chunk(chunk)

        try:
            await asyncio.wait_for(follow(), timeout)
        except asyncio.TimeoutError:
            return  # long enough: the browser's EventSource asks again from its last event
        except httpx.TransportError as e:
            if not started:
                raise ApiError(0, f"cannot reach the GPU Hub service at {self.api}: {e}")
            # the service went away mid-stream: the stream ends, the browser asks again
