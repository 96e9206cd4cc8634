"""``AsyncApi`` over tornado's HTTP client: how the hub's spawner and the
Lab's server extension call the service without blocking their event loop.
A refused call raises ``ApiError`` with the service's status and message; a
service that cannot be reached, ``ApiError`` with status 0."""
from __future__ import annotations

import json
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse

from .aio import AsyncApi
from .errors import ApiError, error_of
from .request import Request


class TornadoApi(AsyncApi):
    """``api``: the API's root (``http://127.0.0.1:8002/services/gpuhub/api/v1``)."""

    def __init__(self, api: str, token: str, *, timeout: float = 30.0):
        self.api = api.rstrip("/")
        self.token = token
        self.timeout = timeout

    def http_request(self, request: Request) -> HTTPRequest:
        headers = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        if request.body is not None:
            headers["Content-Type"] = "application/json"
        return HTTPRequest(self.api + request.target, method=request.method, headers=headers,
                           body=None if request.body is None else json.dumps(request.body),
                           allow_nonstandard_methods=True, request_timeout=self.timeout,
                           connect_timeout=min(self.timeout, 10.0))

    async def _send(self, request: Request) -> Any:
        http = self.http_request(request)
        try:
            response = await AsyncHTTPClient().fetch(http)
        except HTTPClientError as e:
            if e.code == 599:
                raise ApiError(0, f"the GPU Hub service did not answer: {e}") from None
            body = e.response.body if e.response is not None else None
            raise error_of(e.code, body, f"{request.method} {http.url}", e.message) from None
        except OSError as e:
            raise ApiError(0, f"cannot reach the GPU Hub service at {self.api}: {e}") from None
        return answer_of(response)


def answer_of(response: HTTPResponse) -> Any:
    """The parsed JSON of an answer; text for text (logs, CSV); None for none."""
    if not response.body:
        return None
    text = response.body.decode("utf-8", "replace")
    if response.headers.get("Content-Type", "").startswith("application/json"):
        return json.loads(text)
    return text
