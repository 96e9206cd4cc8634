"""A small HTTP client of the GPU Hub REST API (``/services/gpuhub/api/v1``).

    client = GpuHubClient.from_env()            # --url/--token, else the environment
    w = client.submit_workload({"command": ["python", "train.py"], "gpus_per_node": 2})
    for text in client.follow_logs(w["id"]):
        print(text, end="")

The methods of the API (one per ``operationId`` of the service's OpenAPI
document, ``submit_workload``, ``list_workloads``, ``get_sweep``, …) are
generated (``operations.py``, ``aio.py``, ``schemas.py``, by
scripts/gen_client.py); this module adds the connection (requests),
following a log stream and waiting for a state.

Where to connect: the ``url`` given, else ``$GPUHUB_URL``, else the embedded
hub's ``http://127.0.0.1:8000/services/gpuhub``. A hub URL without a path
(``http://host:8000``) gets ``/services/gpuhub`` appended. The token: the one
given, else ``$GPUHUB_TOKEN``, else ``$JUPYTERHUB_API_TOKEN`` (which the hub
sets inside notebook servers).

Every failed request raises ``ApiError(status, message, field)`` carrying
the server's own message (``errors.py``); a missing token raises
``TokenMissing``.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional
from urllib.parse import urlsplit

import requests

from .errors import ApiError, GpuHubError, TokenMissing, error_of
from .operations import Api, Unsent
from .request import API_PATH, Request
from .schemas import Workload
from .sse import SSEEvent, iter_lines, iter_sse

__all__ = ["API_PATH", "DEFAULT_URL", "SERVICE_PREFIX", "TERMINAL_STATES", "ApiError",
           "GpuHubClient", "GpuHubError", "SSEEvent", "TokenMissing", "hub_url_of", "iter_lines",
           "iter_sse", "normalize_url", "resolve_token", "resolve_url"]

DEFAULT_URL = "http://127.0.0.1:8000/services/gpuhub"
SERVICE_PREFIX = "/services/gpuhub"
TERMINAL_STATES = ("succeeded", "failed", "cancelled")
# Attempt states the log stream ends with before the attempt has run.
NOT_STARTED = ("queued", "waiting", "none")


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


# ---- the client ---------------------------------------------------------------------

class GpuHubClient(Api):
    """The REST API over requests: the generated methods of ``Api`` (one per
    operation), following a log and waiting for a state. ``url`` is the
    service's base (``http://host:8000/services/gpuhub``); ``token`` a
    JupyterHub API token."""

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

    def __enter__(self) -> "GpuHubClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the transport ------------------------------------------------------------
    def _send(self, request: Request) -> Any:
        return answer_of(self._http(request))

    def _http(self, request: Request, **kw) -> requests.Response:
        kw.setdefault("timeout", self.timeout)
        url = self.api + request.path
        try:
            r = self.session.request(request.method, url, params=list(request.params),
                                     json=request.body, **kw)
        except requests.RequestException as e:
            raise ApiError(0, f"cannot reach {url}: {e}") from e
        if r.status_code >= 400:
            raise error_of(r.status_code, r.content, f"{r.request.method} {r.url}",
                           r.reason or "")
        return r

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
            attempt = int(self.get_workload(wid).get("attempt") or 0)
        self.last_attempt_state = None
        offset, failures, notes = 0, 0, _Notes(notify, poll_interval)
        while True:
            one = _Pass(offset)
            yield from self._read_pass(wid, attempt, one, read_timeout)
            offset = one.offset
            if one.end_state is None:
                # The stream ended (or broke) before its end event: resume it.
                failures = 0 if one.progressed or one.seconds > 5.0 else failures + 1
                if failures > max_retries:
                    raise one.failure or ApiError(0, f"log stream of {wid} keeps closing early")
                time.sleep(min(0.25 * 2 ** failures, 5.0) if failures else 0.1)
                continue
            following = self._after_end(wid, attempt, one.end_state, explicit, notes)
            if following is None:
                return
            if following != attempt:
                attempt, offset = following, 0

    def _read_pass(self, wid: str, attempt: int, one: "_Pass",
                   read_timeout: float) -> Iterator[str]:
        """One connection to the log stream, from ``one.offset``: the text as
        it comes; how the connection ended is left in ``one``."""
        started = time.monotonic()
        headers = {"Accept": "text/event-stream"}
        if one.offset:
            headers["Last-Event-ID"] = str(one.offset)
        try:
            r = self._http(Unsent().get_workload_logs(wid, attempt=attempt, follow=True),
                           headers=headers, stream=True,
                           timeout=(min(self.timeout, 10.0), read_timeout))
            with r:
                for ev in iter_sse(iter_lines(r.iter_content(chunk_size=None))):
                    if ev.event == "log":
                        if ev.id and ev.id.isdigit():
                            one.offset = int(ev.id)
                        text = _event_json(ev).get("text", "")
                        if text:
                            one.progressed = True
                            yield text
                    elif ev.event == "end":
                        one.end_state = _event_json(ev).get("attempt_state") or "none"
                        break
        except ApiError as e:
            if e.status != 0:
                raise
            one.failure = e
        except requests.RequestException as e:  # dropped mid-stream, read timeout
            one.failure = ApiError(0, f"log stream of {wid} broke: {e}")
        one.seconds = time.monotonic() - started

    def _after_end(self, wid: str, attempt: int, end_state: str, explicit: bool,
                   notes: "_Notes") -> Optional[int]:
        """After a stream's end event: the attempt to follow next (the same
        one, after a pause, while it waits to start), or None: done."""
        if end_state in NOT_STARTED:
            w = self.get_workload(wid)
            latest = int(w.get("attempt") or 0)
            if w["state"] in TERMINAL_STATES and latest <= attempt:
                self.last_attempt_state = w["state"]
                return None
            if not explicit and latest > attempt:
                return latest
            notes.waiting(f"{wid} is {w['state']}: {w.get('reason') or 'waiting'}", w["state"])
            time.sleep(notes.poll_interval)
            return attempt
        self.last_attempt_state = end_state
        if explicit:
            return None
        w = self.get_workload(wid)
        if int(w.get("attempt") or 0) > attempt and w["state"] not in TERMINAL_STATES:
            notes.say(f"attempt {attempt} of {wid} ended ({end_state}); "
                      f"following attempt {w['attempt']}")
            return int(w["attempt"])
        return None

    def wait(self, wid: str, states: Iterable[str] = TERMINAL_STATES, *,
             timeout: float = 30.0, interval: float = 0.2) -> Workload:
        """Poll the workload until it is in one of ``states`` (bounded)."""
        states = tuple(states)
        deadline = time.monotonic() + timeout
        while True:
            w = self.get_workload(wid)
            if w["state"] in states or time.monotonic() > deadline:
                return w
            time.sleep(interval)


@dataclass
class _Pass:
    """How one connection to a log stream went."""
    offset: int  # the byte offset reached (the last event's id)
    progressed: bool = False  # some text came
    end_state: Optional[str] = None  # the end event's attempt state; None: cut short
    failure: Optional[ApiError] = None
    seconds: float = 0.0


class _Notes:
    """One-line notes of a follow: a waiting note once until it changes."""

    def __init__(self, notify: Optional[Callable[[str], None]], poll_interval: float):
        self.notify, self.poll_interval, self.last = notify, poll_interval, None

    def say(self, text: str) -> None:
        if self.notify:
            self.notify(text)

    def waiting(self, text: str, state: str) -> None:
        if text != self.last and state in ("queued", "waiting"):
            self.say(text)
        self.last = text


def _event_json(ev: SSEEvent) -> dict:
    try:
        data = json.loads(ev.data)
    except ValueError:
        return {"text": ev.data}
    return data if isinstance(data, dict) else {}


def answer_of(r: requests.Response) -> Any:
    """The parsed JSON of an answer; text for text (logs, CSV); None for none."""
    if r.status_code == 204 or not r.content:
        return None
    kind = r.headers.get("Content-Type", "")
    if kind.startswith("text/") and not kind.startswith("text/html"):
        r.encoding = "utf-8"
        return r.text
    try:
        return r.json()
    except ValueError:
        raise ApiError(r.status_code, f"{r.request.method} {r.url} answered with something "
                                      f"that is not JSON (is the URL a GPU Hub service?)")
