"""A small HTTP client of the GPU Hub REST API (``/services/gpuhub/api/v1``).

    client = GpuHubClient.from_env()            # --url/--token, else the environment
    w = client.submit({"command": ["python", "train.py"], "gpus_per_node": 2})
    for text in client.follow_logs(w["id"]):
        print(text, end="")

Where to connect: the ``url`` given, else ``$GPUHUB_URL``, else the embedded
hub's ``http://127.0.0.1:8000/services/gpuhub``. A hub URL without a path
(``http://host:8000``) gets ``/services/gpuhub`` appended. The token: the one
given, else ``$GPUHUB_TOKEN``, else ``$JUPYTERHUB_API_TOKEN`` (which the hub
sets inside notebook servers).

Every failed request raises ``ApiError(status, message, field)`` carrying
the server's own message; a missing token raises ``TokenMissing``.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional
from urllib.parse import quote, urlsplit

import requests

DEFAULT_URL = "http://127.0.0.1:8000/services/gpuhub"
SERVICE_PREFIX = "/services/gpuhub"
API_PATH = "/api/v1"
TERMINAL_STATES = ("succeeded", "failed", "cancelled")
# Attempt states the log stream ends with before the attempt has run.
NOT_STARTED = ("queued", "waiting", "none")


class GpuHubError(Exception):
    """Anything that stops a client call; ``str()`` is the message to show."""


class TokenMissing(GpuHubError):
    """No token in the arguments or the environment."""


class ApiError(GpuHubError):
    """The server refused a request (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def __str__(self) -> str:
        if self.field and not self.message.startswith(self.field):
            return f"{self.field}: {self.message}"
        return self.message


# ---- configuration (pure) ------------------------------------------------------

def normalize_url(url: str) -> str:
    """The service's base URL (``…/services/gpuhub``) from what a user typed:
    a service URL, an API URL (``…/api/v1``) or a bare hub URL."""
    url = url.strip().rstrip("/")
    if url.endswith(API_PATH):
        url = url[: -len(API_PATH)].rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.path.rstrip("/") in ("", "/hub"):
        url = f"{parts.scheme}://{parts.netloc}{SERVICE_PREFIX}"
    return url


def hub_url_of(url: str) -> str:
    """The hub's own base URL (for ``/hub/api``) from a service or hub URL."""
    base = normalize_url(url)
    return base.split("/services/", 1)[0]


def resolve_url(flag: Optional[str], env: Mapping[str, str] = os.environ) -> str:
    return normalize_url(flag or env.get("GPUHUB_URL") or DEFAULT_URL)


def resolve_token(flag: Optional[str], env: Mapping[str, str] = os.environ) -> str:
    token = flag or env.get("GPUHUB_TOKEN") or env.get("JUPYTERHUB_API_TOKEN")
    if not token:
        raise TokenMissing(
            "no API token: pass --token TOKEN or set GPUHUB_TOKEN (inside a notebook server "
            "JUPYTERHUB_API_TOKEN is used); create a token at <hub>/hub/token")
    return token


# ---- server-sent events (pure) -------------------------------------------------

@dataclass
class SSEEvent:
    event: str = "message"
    data: str = ""
    id: Optional[str] = None


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Lines (without their ending) from byte chunks split anywhere, as the
    SSE format defines them: ending in CRLF, LF or CR; UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    buf = ""
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not text:
            continue
        scan = max(len(buf) - 1, 0)  # what came before has no line end (but a last CR)
        buf += text
        start = 0
        while True:
            m = _EOL.search(buf, max(start, scan))
            if m is None:
                break
            if m.group() == "\r" and m.end() == len(buf):
                break  # a CR at the end of a chunk may be the first half of a CRLF
            yield buf[start:m.start()]
            start = m.end()
        buf = buf[start:]
    buf += decoder.decode(b"", final=True)
    if buf:
        lines = _EOL.split(buf)
        if lines and lines[-1] == "":
            lines.pop()
        yield from lines  # what is left of a stream that was cut


_EOL = re.compile(r"\r\n|\r|\n")


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Events from SSE lines: ``event:``, ``data:`` (joined with newlines),
    ``id:``; comments and unknown fields are skipped. An event is dispatched
    at a blank line only, so one cut off mid-way is never yielded."""
    event, data, eid, has_data = "", [], None, False
    for line in lines:
        if line == "":
            if has_data:
                yield SSEEvent(event or "message", "\n".join(data), eid)
            event, data, has_data = "", [], False
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
            has_data = True
        elif name == "id" and "\x00" not in value:
            eid = value


# ---- the client ---------------------------------------------------------------------

class GpuHubClient:
    """The REST API, one method per endpoint. ``url`` is the service's base
    (``http://host:8000/services/gpuhub``); ``token`` a JupyterHub API token."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 session: Optional[requests.Session] = None):
        if not token:
            raise TokenMissing("no API token given")
        self.url = normalize_url(url)
        self.api = self.url + API_PATH
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"token {token}"
        self.session.headers.setdefault("User-Agent", "gpuhub-client")
        # The state of the attempt the last follow_logs() saw end.
        self.last_attempt_state: Optional[str] = None

    @classmethod
    def from_env(cls, url: Optional[str] = None, token: Optional[str] = None,
                 env: Mapping[str, str] = os.environ, **kw) -> "GpuHubClient":
        return cls(resolve_url(url, env), resolve_token(token, env), **kw)

    def close(self) -> None:
        self.session.close()

    # ---- plumbing -----------------------------------------------------------
    def _request(self, method: str, path: str, *, expect_json: bool = True,
                 **kw) -> requests.Response:
        kw.setdefault("timeout", self.timeout)
        url = self.api + path
        try:
            r = self.session.request(method, url, **kw)
        except requests.RequestException as e:
            raise ApiError(0, f"cannot reach {url}: {e}") from e
        if r.status_code >= 400:
            raise error_from_response(r)
        return r

    def _json(self, method: str, path: str, **kw) -> Any:
        r = self._request(method, path, **kw)
        try:
            return r.json()
        except ValueError:
            raise ApiError(r.status_code, f"{r.request.method} {r.url} answered with something "
                                          f"that is not JSON (is the URL a GPU Hub service?)")

    # ---- endpoints ----------------------------------------------------------------
    def me(self) -> dict:
        return self._json("GET", "/me")

    def list_workloads(self, *, state: Iterable[str] = (), team: Optional[str] = None,
                       user: Optional[str] = None, kind: Optional[str] = None,
                       pool: Optional[str] = None, project: Optional[str] = None,
                       limit: Optional[int] = None, detail: bool = False) -> list[dict]:
        """``detail``: with each workload's attempts and queue position."""
        params: list[tuple[str, Any]] = [("state", s) for s in state]
        if detail:
            params.append(("detail", 1))
        for key, value in (("team", team), ("user", user), ("kind", kind), ("pool", pool),
                           ("project", project), ("limit", limit)):
            if value is not None:
                params.append((key, value))
        return self._json("GET", "/workloads", params=params)["workloads"]

    def submit(self, spec: dict) -> dict:
        return self._json("POST", "/workloads", json=spec)

    def workload(self, wid: str) -> dict:
        return self._json("GET", f"/workloads/{_seg(wid)}")

    def submit_sweep(self, body: dict) -> dict:
        """``POST /sweeps``: {template, grid | tasks, max_running?, metric?, after?}."""
        return self._json("POST", "/sweeps", json=body)

    def sweeps(self, *, state: Iterable[str] = (), team: Optional[str] = None) -> list[dict]:
        params: list[tuple[str, Any]] = [("state", s) for s in state]
        if team is not None:
            params.append(("team", team))
        return self._json("GET", "/sweeps", params=params)["sweeps"]

    def sweep(self, sid: str) -> dict:
        return self._json("GET", f"/sweeps/{_seg(sid)}")

    def sweep_action(self, sid: str, action: str) -> dict:
        """``cancel`` or ``retry``."""
        return self._json("POST", f"/sweeps/{_seg(sid)}/{action}")

    def cancel(self, wid: str) -> dict:
        return self._json("DELETE", f"/workloads/{_seg(wid)}")

    def events(self, wid: str) -> list[dict]:
        return self._json("GET", f"/workloads/{_seg(wid)}/events")["events"]

    def logs(self, wid: str, attempt: Optional[int] = None) -> str:
        params = {} if attempt is None else {"attempt": attempt}
        r = self._request("GET", f"/workloads/{_seg(wid)}/logs", params=params)
        r.encoding = "utf-8"
        return r.text

    def pools(self) -> list[dict]:
        return self._json("GET", "/pools")["pools"]

    def teams(self) -> list[dict]:
        return self._json("GET", "/teams")["teams"]

    def team(self, name: str) -> dict:
        return self._json("GET", f"/teams/{_seg(name)}")

    def set_team(self, name: str, *, weight: Optional[float] = None,
                 quotas: Optional[dict] = None) -> dict:
        body: dict[str, Any] = {}
        if weight is not None:
            body["weight"] = weight
        if quotas is not None:
            body["quotas"] = quotas
        return self._json("PUT", f"/teams/{_seg(name)}", json=body)

    def usage(self, *, start: Optional[float] = None, end: Optional[float] = None,
              group_by: Optional[str] = None) -> dict:
        params = {k: v for k, v in (("from", start), ("to", end), ("group_by", group_by))
                  if v is not None}
        return self._json("GET", "/usage", params=params)

    # ---- history and what-if previews ----------------------------------------------------
    def history_trace(self, since: str, *, pseudonymise: bool = False) -> dict:
        """The period's submissions as trace rows, with the cluster file."""
        return self._json("GET", "/history/trace", params={
            "since": since, "format": "json", "pseudonymise": str(pseudonymise).lower()})

    def start_preview(self, since: str, changes: dict) -> dict:
        return self._json("POST", "/whatif", json={"since": since, "set": changes})

    def preview(self, pid: str) -> dict:
        return self._json("GET", f"/whatif/{_seg(pid)}")

    def preview_action(self, pid: str, action: str) -> dict:
        """``cancel`` or ``apply``."""
        return self._json("POST", f"/whatif/{_seg(pid)}/{_seg(action)}")

    # ---- deployments ------------------------------------------------------------------
    def deploy(self, spec: dict) -> dict:
        """A new deployment, or a new revision of one (``canary_percent``)."""
        return self._json("POST", "/deployments", json=spec)

    def deployments(self) -> list[dict]:
        return self._json("GET", "/deployments")["deployments"]

    def deployment(self, team: str, name: str) -> dict:
        return self._json("GET", f"/deployments/{_seg(team)}/{_seg(name)}")

    def deployment_action(self, team: str, name: str, action: str,
                          body: Optional[dict] = None) -> dict:
        """``promote``, ``rollback``, ``traffic`` ({"traffic": {...}}) or ``scale``."""
        return self._json("POST", f"/deployments/{_seg(team)}/{_seg(name)}/{_seg(action)}",
                          json=body or {})

    def delete_deployment(self, team: str, name: str) -> dict:
        return self._json("DELETE", f"/deployments/{_seg(team)}/{_seg(name)}")

    # ---- schedules ------------------------------------------------------------------
    def create_schedule(self, body: dict) -> dict:
        return self._json("POST", "/schedules", json=body)

    def schedules(self, team: Optional[str] = None) -> list[dict]:
        params = {} if team is None else {"team": team}
        return self._json("GET", "/schedules", params=params)["schedules"]

    def schedule(self, sid: str) -> dict:
        return self._json("GET", f"/schedules/{_seg(sid)}")

    def edit_schedule(self, sid: str, changes: dict) -> dict:
        return self._json("PATCH", f"/schedules/{_seg(sid)}", json=changes)

    def schedule_action(self, sid: str, action: str) -> dict:
        """``pause``, ``resume`` (the schedule) or ``run`` (the workload it made)."""
        return self._json("POST", f"/schedules/{_seg(sid)}/{_seg(action)}")

    def delete_schedule(self, sid: str) -> None:
        self._request("DELETE", f"/schedules/{_seg(sid)}", expect_json=False)

    # ---- following logs ---------------------------------------------------------------
    def follow_logs(self, wid: str, attempt: Optional[int] = None, *,
                    poll_interval: float = 1.0, max_retries: int = 8,
                    read_timeout: float = 60.0,
                    notify: Optional[Callable[[str], None]] = None) -> Iterator[str]:
        """Text chunks of the output as the job writes it, until it ends.

        Follows ``attempt`` (default: the latest, moving on to the next one
        when an attempt is preempted or lost and the workload requeued).
        While the attempt waits in the queue it polls every
        ``poll_interval`` seconds. A stream that drops before its ``end``
        event is resumed where it stopped (``Last-Event-ID``); after
        ``max_retries`` failures in a row without progress it gives up with
        an ``ApiError``. ``notify`` gets one-line notes (waiting, next attempt).
        The state the followed attempt ended in is left in
        ``self.last_attempt_state``.
        """
        explicit = attempt is not None
        if attempt is None:
            attempt = int(self.workload(wid).get("attempt") or 0)
        offset = 0
        failures = 0
        last_note = None
        self.last_attempt_state = None
        path = f"/workloads/{_seg(wid)}/logs"
        while True:
            end_state: Optional[str] = None
            connected_at = time.monotonic()
            progressed = False
            try:
                headers = {"Accept": "text/event-stream"}
                if offset:
                    headers["Last-Event-ID"] = str(offset)
                r = self._request("GET", path, params={"attempt": attempt, "follow": "true"},
                                  headers=headers, stream=True,
                                  timeout=(min(self.timeout, 10.0), read_timeout))
                with r:
                    for ev in iter_sse(iter_lines(r.iter_content(chunk_size=None))):
                        if ev.event == "log":
                            if ev.id and ev.id.isdigit():
                                offset = int(ev.id)
                            text = _event_json(ev).get("text", "")
                            if text:
                                progressed = True
                                failures = 0
                                yield text
                        elif ev.event == "end":
                            end_state = _event_json(ev).get("attempt_state") or "none"
                            break
            except ApiError as e:
                if e.status != 0:
                    raise
                failure = e
            except requests.RequestException as e:  # dropped mid-stream, read timeout
                failure = ApiError(0, f"log stream of {wid} broke: {e}")
            else:
                failure = None
            if end_state is None:
                # The stream ended (or broke) before its end event: resume it.
                if progressed or time.monotonic() - connected_at > 5.0:
                    failures = 0
                else:
                    failures += 1
                if failures > max_retries:
                    raise failure or ApiError(0, f"log stream of {wid} keeps closing early")
                time.sleep(min(0.25 * 2 ** failures, 5.0) if failures else 0.1)
                continue
            if end_state in NOT_STARTED:
                w = self.workload(wid)
                if w["state"] in TERMINAL_STATES and int(w.get("attempt") or 0) <= attempt:
                    self.last_attempt_state = w["state"]
                    return
                if not explicit and int(w.get("attempt") or 0) > attempt:
                    attempt, offset = int(w["attempt"]), 0
                    continue
                note = f"{wid} is {w['state']}: {w.get('reason') or 'waiting'}"
                if notify and note != last_note and w["state"] in ("queued", "waiting"):
                    notify(note)
                last_note = note
                time.sleep(poll_interval)
                continue
            self.last_attempt_state = end_state
            if explicit:
                return
            w = self.workload(wid)
            if int(w.get("attempt") or 0) > attempt and w["state"] not in TERMINAL_STATES:
                if notify:
                    notify(f"attempt {attempt} of {wid} ended ({end_state}); "
                           f"following attempt {w['attempt']}")
                attempt, offset = int(w["attempt"]), 0
                continue
            return

    def wait(self, wid: str, states: Iterable[str] = TERMINAL_STATES, *,
             timeout: float = 30.0, interval: float = 0.2) -> dict:
        """Poll the workload until it is in one of ``states`` (bounded)."""
        states = tuple(states)
        deadline = time.monotonic() + timeout
        while True:
            w = self.workload(wid)
            if w["state"] in states or time.monotonic() > deadline:
                return w
            time.sleep(interval)


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _event_json(ev: SSEEvent) -> dict:
    try:
        data = json.loads(ev.data)
    except ValueError:
        return {"text": ev.data}
    return data if isinstance(data, dict) else {}


def error_from_response(r: requests.Response) -> ApiError:
    """The server's error as an ``ApiError``: its JSON {status, error, field}
    when there is one, else a description of the response."""
    try:
        body = r.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return ApiError(r.status_code, body["error"], body.get("field"))
    if isinstance(body, dict) and isinstance(body.get("message"), str):  # JupyterHub's errors
        return ApiError(r.status_code, body["message"])
    hint = ""
    if r.status_code in (404, 502, 503):
        hint = " (is the URL right, and is the gpuhub service running?)"
    return ApiError(r.status_code, f"HTTP {r.status_code} {r.reason or ''} from "
                                   f"{r.request.method} {r.url}{hint}".replace("  ", " "))
