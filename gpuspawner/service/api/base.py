"""The REST API's handler base: who is asking (HubOAuth, a job's token, an invoke-only token),
JSON bodies and errors, domain errors mapped to status codes; thin handlers build on it."""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

import orjson
from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from tornado import web

from gpuspawner.hub.config import JOB_TOKEN_SCOPES
from gpuspawner.service.access import job_scope
from gpuspawner.service.access.job_tokens import PREFIX as JOB_TOKEN_PREFIX, Holder
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.workloads import queries
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError


class ServiceAccess:
    """What every handler of the service reaches: the engine and the app."""

    @property
    def engine(self):
        return self.settings["engine"]

    @property
    def cluster(self):
        """The live cluster, read-only (facades.ClusterView)."""
        return self.settings["engine"].cluster

    @property
    def store(self):
        return self.settings["engine"].store

    def teams_view(self, who=None) -> list[dict]:
        """The teams the caller (or ``who``) may see, with their quotas and use."""
        return queries.teams_view(self.cluster, self.store, who or self.identity)

    @property
    def steering(self):
        """What the admins' operations reach (workloads/operations.py)."""
        return self.settings["engine"].steering

    @property
    def facades(self):
        """What a feature room's handlers reach (service/loop/facades.py)."""
        return self.settings["engine"].facades

    @property
    def gpuhub(self):
        return self.settings["gpuhub"]


class JSONErrors(web.RequestHandler):
    """Errors as the API's JSON ``{"status", "error", "field"?}``; a 405
    says in ``Allow`` which methods the route has."""

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        body: dict[str, Any] = {"status": status_code}
        if isinstance(exc, SpecError):
            body["error"], body["field"] = str(exc), exc.field
        elif type(exc) in DOMAIN_ERRORS:
            body["error"] = str(exc)
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            body["error"] = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            body["error"] = self._reason
        if status_code == 405:
            allowed = allowed_methods(type(self))
            self.set_header("Allow", ", ".join(allowed))
            body["error"] = (f"method {self.request.method} is not allowed here; allowed: "
                             f"{', '.join(allowed) or 'none'}")
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        if status_code == 503:
            self.set_header("Retry-After", "5")
        self.finish(encode_json(body))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, SpecError):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
        elif type(e) in DOMAIN_ERRORS:
            self.send_error(DOMAIN_ERRORS[type(e)], exc_info=(type(e), e, e.__traceback__))
        else:
            super()._handle_request_exception(e)


def allowed_methods(handler: type) -> list[str]:
    """The HTTP methods a handler class implements."""
    return [m.upper() for m in ("get", "post", "put", "patch", "delete")
            if getattr(handler, m) is not getattr(web.RequestHandler, m)]


class NoRouteHandler(JSONErrors):
    """Any path under the API that no route matches (a path parameter
    outside its pattern included): a JSON 404, not tornado's HTML page."""

    def prepare(self) -> None:
        raise web.HTTPError(404, f"no such API path: {self.request.path}")


# What a token with only custom:gpuhub:invoke hears on every route but the
# endpoints (the API, the overview and the admin panel alike).
INVOKE_ONLY_REFUSAL = ("this token may only call model endpoints (custom:gpuhub:invoke); "
                       "this route needs custom:gpuhub:submit")


async def hub_user(handler) -> Optional[dict]:
    """Who the request's token or cookie is, asked of the hub (cached for
    ``token_cache_seconds``). A hub that does not answer, or fails, is 503
    (the API adds Retry-After): the hub is restarting, nothing is wrong with
    the request."""
    try:
        return await handler.hub_auth.get_user(handler, sync=False)
    except web.HTTPError as e:
        if e.status_code not in (500, 502):
            raise
        raise web.HTTPError(503, "the hub is not answering, so the token cannot be checked; "
                                 "try again in a few seconds")


class APIHandler(ServiceAccess, HubOAuthenticated, JSONErrors):
    # Whether a token with only custom:gpuhub:invoke may use the route.
    invoke_route = False

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def compute_etag(self) -> None:
        """None: no ETag. The answers are not to be stored, and tornado's
        hash of every body (50 kB for a page) was 5% of the loop's time."""
        return None

    def get_login_url(self):
        raise web.HTTPError(401, "authentication required: send 'Authorization: token <TOKEN>'")

    async def prepare(self) -> None:
        self.gpuhub.driver.request_arrived()  # the cycle's worker gives way meanwhile
        self.gpuhub.full_collections.request_started()  # and the garbage collector waits
        self._in_flight = True
        # The body as received: a Content-Length header, or none with
        # Transfer-Encoding: chunked (the HTTP server's own limit is higher,
        # so that this answers with a 413 that says so).
        size = len(self.request.body)
        if size > self.gpuhub.max_body_size:
            raise web.HTTPError(413, f"request body of {size} bytes is larger than the "
                                     f"{self.gpuhub.max_body_size} allowed")
        for name, values in self.request.query_arguments.items():
            if "\x00" in name or any(b"\x00" in v for v in values):
                raise SpecError(name, "must not contain NUL characters")
        token = self.hub_auth.get_token(self, in_cookie=False)
        if token and token.startswith(JOB_TOKEN_PREFIX):
            holder = self.job_token_holder(token)
            self._hub_auth_user_cache = {"kind": "user", "name": holder.user,
                                         "scopes": list(JOB_TOKEN_SCOPES)}
        else:
            holder = None
            model = await hub_user(self)
            try:
                self._hub_auth_user_cache = self.check_hub_user(model) if model else None
            except UserNotAllowed:
                raise web.HTTPError(403, "this token may not use the gpuhub service "
                                         "(needs access:services!service=gpuhub)")
        if self._hub_auth_user_cache is None:
            raise web.HTTPError(401, "authentication required: send 'Authorization: token <TOKEN>'")
        if self._hub_auth_user_cache.get("kind") == "user":
            groups = await self.gpuhub.hub.groups_of(self._hub_auth_user_cache)
        else:
            groups = []
        self.identity: Identity = self.gpuhub.identity(self._hub_auth_user_cache, groups)
        if self.identity.invoke_only and not self.invoke_route:
            raise web.HTTPError(403, INVOKE_ONLY_REFUSAL)
        # A token the hub made for a job (a service from before this one made them there).
        job = holder.job if holder is not None else \
            await self.gpuhub.hub.job_of_token(self._hub_auth_user_cache, token)
        if job is not None:  # a job's own token: only what job_scope.ALLOWED lets it
            self.identity = dataclasses.replace(self.identity, job=job)
            job_scope.check(self.engine.store, job, self.identity.name, self.request.method,
                            self.settings["api_routes"].get(type(self)), self.path_args)

    def job_token_holder(self, token: str) -> Holder:
        """Whom a job's token made here acts for; 401 once its attempt ended."""
        job_tokens = self.gpuhub.engine.config.job_tokens
        holder = job_tokens.holder(token) if job_tokens is not None else None
        if holder is None:
            raise web.HTTPError(401, "this job token is not valid any more: a job's token ends "
                                     "with its attempt")
        return holder

    def json_body(self) -> Any:
        return parse_json_body(self.request.body)

    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        """A whole-number query argument in [low, high]."""
        value = self.get_argument(name, None)
        if value is None:
            return default
        if not re.fullmatch(r"[0-9]{1,12}", value) or not low <= int(value) <= high:
            raise SpecError(name, f"must be a whole number from {low} to {high}, got {value!r}")
        return int(value)

    def on_finish(self) -> None:
        if getattr(self, "_in_flight", False):
            self.gpuhub.full_collections.request_ended()
            self._in_flight = False

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(encode_json(data))


def encode_json(data: Any) -> bytes:
    """A response's body. orjson encodes a Jobs panel page (50 workloads
    with their attempts, ~50 kB) in ~0.13 ms where the standard library
    takes ~1.3 ms, on the event loop that every other request waits on.
    Keys that are not strings are written as strings, as ``json.dumps``
    does; what only ``json.dumps`` writes (a lone surrogate, an integer past
    64 bits) is written by it."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(data).encode()


DOMAIN_ERRORS = {NotFound: 404, Forbidden: 403, Conflict: 409}


# Deeper than any request of this API needs; far below Python's recursion limit.
MAX_JSON_DEPTH = 64


def _no_constant(name: str):
    raise SpecError("body", f"{name} is not a JSON number")


def _not_text(value: str) -> Optional[str]:
    """What in a string from a request body no database stores (None: nothing)."""
    if "\x00" in value:
        return "NUL characters"  # PostgreSQL stores no NUL
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            # A \ud800-\udfff escape that is not half of a pair: valid JSON,
            # but not text, and no database encodes it (a 500 at the commit).
            return f"a lone surrogate (\\u{ord(value[e.start]):04x}, not half of a pair)"
    return None


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON, refusing what JSON does not have (NaN,
    Infinity, numbers too large for a float), what no database stores as
    text (NUL characters, lone surrogates) and nesting deeper than
    ``MAX_JSON_DEPTH``."""
    try:
        body = json.loads(raw or b"null", parse_constant=_no_constant)
    except RecursionError:
        raise SpecError("body", f"is nested more than {MAX_JSON_DEPTH} levels deep")
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError("body", f"is not valid JSON: {e}")
    stack = [(body, "body", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise SpecError("body", f"is nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(value, str):
            bad = _not_text(value)
            if bad is not None:
                raise SpecError(where, f"must not contain {bad}")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise SpecError(where, "must be a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = key if where == "body" else f"{where}.{key}"
                bad = _not_text(key)
                if bad is not None:
                    raise SpecError(where, f"must not have a key with {bad}")
                stack.append((item, name, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
    return body


class AdminHandler(APIHandler):
    async def prepare(self) -> None:
        await super().prepare()
        if not self.identity.admin:
            raise web.HTTPError(403, "this needs the scope custom:gpuhub:admin")


def optional(body: dict, key: str, default: Any) -> Any:
    """A field that may be left out or null (then ``default``); any other
    value is the caller's to check (``false`` is not an empty object)."""
    value = body.get(key)
    return default if value is None else value
