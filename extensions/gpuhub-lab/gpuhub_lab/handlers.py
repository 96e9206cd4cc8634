"""Thin handlers under /gpuhub/: authenticate, validate, forward to the
scheduler service with the server's token, map errors to status codes.
The service's own error messages (and the field at fault) pass through."""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Optional

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.iostream import StreamClosedError

from gpuspawner.client.errors import ApiError
from gpuspawner.client.operations import Unsent

from . import deployspec, jobspec, outputs
from .service import ServiceClient

SCOPES = ("mine", "team")
# The Jobs panel's first page, and the most it lists (the service's own page limit).
JOBS_PAGE, JOBS_MAX = 50, 500


class GpuHubHandler(APIHandler):
    @property
    def service(self) -> ServiceClient:
        return self.settings["gpuhub_service"]

    @property
    def root_dir(self) -> str:
        return self.settings["gpuhub_root_dir"]

    @property
    def service_root(self) -> str:
        return self.settings["gpuhub_service_root"]

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs) -> None:
        """Errors as JSON: the form's or the service's message, the field at
        fault, and the status the service gave (not a 500)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        body: dict[str, Any] = {}
        if isinstance(exc, (ApiError, jobspec.FormError)):
            status_code = error_status(exc)
            self.set_status(status_code)
            body["error"] = exc.message
            if exc.field:
                body["field"] = exc.field
        elif isinstance(exc, tornado.web.HTTPError) and exc.log_message:
            body["error"] = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            body["error"] = self._reason
        body["status"] = status_code
        body["message"] = body["error"]  # what JupyterLab's ServerConnection shows
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def log_exception(self, typ, value, tb) -> None:
        # A refused form or a service's 4xx is an answer, not a server fault.
        if isinstance(value, (ApiError, jobspec.FormError)):
            self.log.info("gpuhub_lab: %s %s: %d %s", self.request.method, self.request.path,
                          error_status(value), value)
        else:
            super().log_exception(typ, value, tb)

    def json_body(self) -> Any:
        try:
            return json.loads(self.request.body or b"null")
        except ValueError as e:
            raise jobspec.FormError("body", f"is not valid JSON: {e}")

    def describe(self, workload: dict) -> dict:
        """The workload with its paths in this server's files, and ``model_path``:
        where a succeeded job wrote a model that can be deployed (else None)."""
        out = jobspec.describe(workload, self.service_root)
        out["model_path"] = deployspec.model_path_of(out, self.root_dir)
        return out

    async def me(self) -> dict:
        cache = self.settings.setdefault("gpuhub_me", {})
        if "me" not in cache:
            cache["me"] = await self.service.get_me()
        return cache["me"]


class PassThroughHandler(GpuHubHandler):
    """GET of a service endpoint as it is (/me, /teams, /pools, /notices, /datasets):
    ``operation`` names the client's method."""

    def initialize(self, operation: str) -> None:
        self.operation = operation

    @tornado.web.authenticated
    async def get(self):
        self.write_json(await getattr(self.service, self.operation)())


class WorkloadsHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self):
        scope = self.get_argument("scope", "mine")
        if scope not in SCOPES:
            raise jobspec.FormError("scope", f"must be one of {', '.join(SCOPES)}")
        # detail=1: attempts, queue position and output notebook in the same call;
        # a sweep's tasks are not listed one by one (GET sweeps has them, by sweep)
        user = (await self.me())["name"] if scope == "mine" else None
        # cursor: the next page (an earlier answer's next_cursor), read as the
        # service's list pages: by what it returns, whatever was submitted since
        page = await self.service.list_workloads(kind="job", sweep_id=["none"],
                                                 limit=self.limit(), detail=1, user=user,
                                                 cursor=self.get_argument("cursor", None))
        self.write_json({"workloads": [self.describe(w) for w in page["workloads"]],
                         "next_cursor": page.get("next_cursor")})

    def limit(self) -> int:
        """How many jobs (newest first): what the panel shows, which grows by
        a page at each "Show more", so a poll's cost follows what is shown
        (200 detailed rows took the service 0.9 s with 10,000 queued)."""
        text = self.get_argument("limit", str(JOBS_PAGE))
        if not text.isdigit() or not 1 <= int(text) <= JOBS_MAX:
            raise jobspec.FormError("limit", f"must be a whole number from 1 to {JOBS_MAX}")
        return int(text)

    @tornado.web.authenticated
    async def post(self):
        form = self.json_body()
        spec, make_dirs = jobspec.build_spec(form, self.root_dir, self.service_root)
        for folder in make_dirs:
            os.makedirs(os.path.join(self.root_dir, folder), exist_ok=True)
        created = await self.service.submit_workload(spec)
        self.log.info("gpuhub_lab: submitted %s (%s)", created.get("id"), form.get("path"))
        self.write_json(self.describe(created), status=201)


class WorkloadHandler(GpuHubHandler):
    @tornado.web.authenticated
    async def get(self, wid: str):
        w = await self.service.get_workload(wid)
        self.write_json(self.describe(w))

    @tornado.web.authenticated
    async def delete(self, wid: str):
        w = await self.service.cancel_workload(wid)
        self.write_json(self.describe(w), status=202)


class LogsHandler(GpuHubHandler):
    """The log of an attempt: plain text, or (``follow=true``) the service's
    server-sent event stream, passed on as it arrives. A browser that goes
    away (a closed tab) closes the request to the service at once, quietly."""

    _client_gone = False
    _upstream: "Optional[asyncio.Future]" = None

    @tornado.web.authenticated
    async def get(self, wid: str):
        attempt = self.get_argument("attempt", None)
        if attempt is not None and not attempt.isdigit():
            raise jobspec.FormError("attempt", "must be an attempt number (0, 1, …)")
        attempt = None if attempt is None else int(attempt)
        if self.get_argument("follow", "false").lower() not in ("1", "true", "yes"):
            text = await self.service.get_workload_logs(wid, attempt=attempt)
            self.finish(text, set_content_type="text/plain; charset=UTF-8")
            return
        started = False

        def forward(chunk: bytes) -> None:
            nonlocal started
            if not started:
                self.set_header("Content-Type", "text/event-stream")
                self.set_header("Cache-Control", "no-cache")
                self.set_header("X-Accel-Buffering", "no")
                started = True
            self.write(chunk)
            self.flush().add_done_callback(_retrieved)  # a write to a closed tab: nothing to say

        if self._client_gone:
            return
        request = Unsent().get_workload_logs(wid, attempt=attempt, follow=True)
        self._upstream = asyncio.ensure_future(self.service.stream(
            request, forward, self.request.headers.get("Last-Event-ID")))
        try:
            await self._upstream
        except asyncio.CancelledError:
            if self._client_gone:  # cancelled by on_connection_close
                return
            raise
        if not self._client_gone:
            self.finish(set_content_type="text/event-stream")

    def on_connection_close(self) -> None:
        self._client_gone = True
        if self._upstream is not None:
            self._upstream.cancel()  # closes the connection to the service


def _retrieved(future: "asyncio.Future") -> None:
    if not future.cancelled():
        future.exception()


class OutputsHandler(GpuHubHandler):
    """The job's output directory (and executed notebook) as a zip file."""

    @tornado.web.authenticated
    async def get(self, wid: str):
        w = jobspec.describe(await self.service.get_workload(wid), self.service_root)
        paths = [p for p in (w.get("output_dir_path"), w.get("output_path")) if p]
        if not paths:
            raise tornado.web.HTTPError(404, "this job has no outputs in this server's files")
        try:
            archive = await asyncio.to_thread(outputs.zip_paths, self.root_dir, paths)
        except outputs.OutputsTooLarge as e:
            raise tornado.web.HTTPError(413, str(e))
        self.set_header("Content-Type", "application/zip")
        self.set_header("Content-Disposition",
                        f'attachment; filename="{jobspec.default_name(w["name"])}-outputs.zip"')
        try:
            with archive:
                while chunk := archive.read(1 << 20):
                    self.write(chunk)
                    await self.flush()
        except StreamClosedError:
            return
        self.finish(set_content_type="application/zip")


class ParametersHandler(GpuHubHandler):
    """The parameters cell of a notebook (papermill's inspection), to fill the form."""

    @tornado.web.authenticated
    async def get(self):
        path = jobspec.relative_path(self.root_dir, self.get_argument("path", ""), "path",
                                     must_exist="file")
        if not path.endswith(jobspec.NOTEBOOK):
            self.write_json({"parameters": []})
            return
        found = await asyncio.to_thread(outputs.notebook_parameters,
                                        os.path.join(self.root_dir, path))
        self.write_json({"parameters": found})


def error_status(exc: Exception) -> int:
    if isinstance(exc, ApiError):  # status 0: the service could not be reached
        return exc.status if 400 <= exc.status < 600 else 502
    return 400


def routes(base: str) -> list:
    """The workloads' routes under ``base`` (``routes.py`` adds the others)."""
    wid = r"(?P<wid>[^/]+)"
    return [
        (url_path_join(base, "me"), PassThroughHandler, {"operation": "get_me"}),
        (url_path_join(base, "teams"), PassThroughHandler, {"operation": "list_teams"}),
        (url_path_join(base, "pools"), PassThroughHandler, {"operation": "list_pools"}),
        (url_path_join(base, "notices"), PassThroughHandler, {"operation": "list_notices"}),
        (url_path_join(base, "datasets"), PassThroughHandler, {"operation": "list_datasets"}),
        (url_path_join(base, "workloads"), WorkloadsHandler),
        (url_path_join(base, "workloads", wid), WorkloadHandler),
        (url_path_join(base, "workloads", wid, "logs"), LogsHandler),
        (url_path_join(base, "workloads", wid, "outputs"), OutputsHandler),
        (url_path_join(base, "parameters"), ParametersHandler),
    ]
