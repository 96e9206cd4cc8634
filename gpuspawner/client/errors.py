"""The one error of a call to the service: ``ApiError(status, message,
field)``, with the service's own message (its JSON ``{status, error,
field}``), or a description of what answered. Pure."""
from __future__ import annotations

import json
from typing import Optional


class GpuHubError(Exception):
    """Anything that stops a client call; ``str()`` is the message to show."""


class TokenMissing(GpuHubError):
    """No token in the arguments or the environment."""


class ApiError(GpuHubError):
    """The service refused a request (its status and message), or could not
    be reached (status 0)."""

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def __str__(self) -> str:
        if self.field and not self.message.startswith(self.field):
            return f"{self.field}: {self.message}"
        return self.message


def error_of(status: int, body: Optional[bytes], where: str, reason: str = "") -> ApiError:
    """The answer ``status`` with ``body`` from ``where`` (``GET http://…``)
    as an ``ApiError``: the service's message when the body has one (or
    JupyterHub's, from the proxy), else a description of the answer."""
    data = None
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return ApiError(status, data["error"], data.get("field"))
    if isinstance(data, dict) and isinstance(data.get("message"), str):  # JupyterHub's errors
        return ApiError(status, data["message"])
    hint = ""
    if status in (404, 502, 503):
        hint = " (is the URL right, and is the gpuhub service running?)"
    return ApiError(status, " ".join(f"HTTP {status} {reason} from {where}{hint}".split()))
