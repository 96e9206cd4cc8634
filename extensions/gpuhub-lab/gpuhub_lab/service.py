"""An asynchronous client of the scheduler service's REST API, for the
handlers: tornado's HTTP client, so a slow service never blocks the server."""
from __future__ import annotations

import json
from typing import Any, Callable, Optional
from urllib.parse import quote, urlencode

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
        it. An error answer is not streamed: it raises ``ServiceError``."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        status = {"code": 0}
        error_body = bytearray()

        def on_header(line: str) -> None:
            if line.startswith("HTTP/"):
                status["code"] = int(line.split()[1])

        def on_body(chunk: bytes) -> None:
            if status["code"] >= 400:
                error_body.extend(chunk)  # the service's error, raised below
            else:
                on_chunk(chunk)

        request = self._request("GET", path, params, headers=headers, header_callback=on_header,
                                streaming_callback=on_body, request_timeout=timeout)
        try:
            await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            if e.response is not None and error_body:
                e.response._body = bytes(error_body)
            raise error_from(e) from None
        except OSError as e:
            if isinstance(e, ConnectionError) or status["code"] == 0:
                raise ServiceError(502, f"cannot reach the GPU Hub service at {self.api}: {e}")
            raise


def error_from(e: HTTPClientError) -> ServiceError:
    """The service's own error ({status, error, field}), or a description."""
    body = None
    if e.response is not None and e.response.body:
        try:
            body = json.loads(e.response.body)
        except ValueError:
            body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return ServiceError(e.code, body["error"], body.get("field"))
    if isinstance(body, dict) and isinstance(body.get("message"), str):  # the hub's errors
        return ServiceError(e.code, body["message"])
    if e.code == 599:
        return ServiceError(502, f"the GPU Hub service did not answer: {e}")
    return ServiceError(e.code, f"the GPU Hub service answered {e.code} {e.message}")
