"""An asynchronous client of the scheduler service's REST API, for the
handlers: tornado's HTTP client for calls, httpx for log streams, so a slow
service never blocks the server."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Optional
from urllib.parse import quote, urlencode

import httpx
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from gpuspawner.client import API_PATH


class ServiceError(Exception):
    """The service refused a request (its own status and message), or could
    not be reached (502)."""

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def seg(value: str) -> str:
    return quote(str(value), safe="")


class ServiceClient:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0):
        self.url = url
        self.api = url + API_PATH
        self.token = token
        self.timeout = timeout

    def _request(self, method: str, path: str, params=(), body: Any = None,
                 **kw) -> HTTPRequest:
        url = self.api + path + (f"?{urlencode(list(params))}" if params else "")
        headers = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        headers.update(kw.pop("headers", {}))
        if body is not None:
            headers["Content-Type"] = "application/json"
        return HTTPRequest(url, method=method, headers=headers,
                           body=None if body is None else json.dumps(body),
                           request_timeout=kw.pop("request_timeout", self.timeout),
                           connect_timeout=min(self.timeout, 10.0), **kw)

    async def call(self, method: str, path: str, params=(), body: Any = None) -> Any:
        """JSON of the answer; ``ServiceError`` with the service's message."""
        if not self.token:
            raise ServiceError(503, "this server has no token for the GPU Hub service "
                                    "(JUPYTERHUB_API_TOKEN is not set)")
        request = self._request(method, path, params, body)
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            raise error_from(e) from None
        except OSError as e:
            raise ServiceError(502, f"cannot reach the GPU Hub service at {self.api}: {e}")
        text = response.body.decode("utf-8", "replace")
        if response.headers.get("Content-Type", "").startswith("application/json"):
            return json.loads(text)
        return text

    async def stream(self, path: str, params, on_chunk: Callable[[bytes], None],
                     last_event_id: Optional[str] = None, timeout: float = 3600.0) -> None:
        """A server-sent event stream, chunk by chunk, as the service sends
        it, for at most ``timeout`` seconds. An error answer is not streamed:
        it raises ``ServiceError``. Cancelling the call closes the connection
        to the service at once: a quiet stream (a queued attempt) is not held
        open for a browser that went away. (httpx, not tornado's client:
        a tornado fetch cannot be cancelled, and every open stream would
        hold one of its ten connections.)"""
        headers = {"Authorization": f"token {self.token}", "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        started = False

        async def follow() -> None:
            nonlocal started
            limits = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0), read=None)
            async with httpx.AsyncClient(timeout=limits) as client:
                async with client.stream("GET", self.api + path, params=list(params),
                                         headers=headers) as response:
                    if response.status_code >= 400:
                        raise error_of(response.status_code, response.reason_phrase,
                                       await response.aread())
                    async for chunk in response.aiter_bytes():
                        started = True
                        on_chunk(chunk)

        try:
            await asyncio.wait_for(follow(), timeout)
        except asyncio.TimeoutError:
            return  # long enough: the browser's EventSource asks again from its last event
        except httpx.TransportError as e:
            if not started:
                raise ServiceError(502, f"cannot reach the GPU Hub service at {self.api}: {e}")
            # the service went away mid-stream: the stream ends, the browser asks again


def error_of(code: int, reason: str, body: Optional[bytes]) -> ServiceError:
    """The service's own error ({status, error, field}), or a description."""
    data = None
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return ServiceError(code, data["error"], data.get("field"))
    if isinstance(data, dict) and isinstance(data.get("message"), str):  # the hub's errors
        return ServiceError(code, data["message"])
    return ServiceError(code, f"the GPU Hub service answered {code} {reason}")


def error_from(e: HTTPClientError) -> ServiceError:
    if e.code == 599:
        return ServiceError(502, f"the GPU Hub service did not answer: {e}")
    return error_of(e.code, e.message, e.response.body if e.response is not None else None)
