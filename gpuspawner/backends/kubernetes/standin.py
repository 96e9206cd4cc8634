"""A stand-in for the Kubernetes API server, for the tests and ``gpuhub bench
kube``: the REST paths the backend calls, with the API server's list and
watch semantics and nothing of its controllers but one rule of the Job
controller (a Job whose pod ended is marked Complete or Failed).

- Every object gets a ``resourceVersion`` from one global counter, as etcd
  gives; a list answers with the counter's value.
- ``?watch=1&resourceVersion=RV`` streams the events after RV (chunked JSON
  lines), then the new ones; ``allowWatchBookmarks`` adds a BOOKMARK every
  ``bookmark_interval`` s; ``timeoutSeconds`` ends the stream cleanly.
- The event history is kept for the last ``window`` events only (etcd
  compacts): a watch from an older RV gets 410 Gone, as an ERROR event in
  the stream (``gone_on_connect = False``, what API servers do) or as the
  HTTP status of the request.
- Tests break things: ``drop_watches()`` cuts every open watch mid-stream,
  ``fail_watches(status, n)`` answers the next n watch requests with that
  status, ``compact()`` forgets the whole history.
- ``.../pods/NAME/log?follow=true`` streams a pod's log as it grows
  (``append_log``) until the pod ends.
- ``stats`` counts requests and response bytes, per kind of call.

The state is guarded by a lock: tests change it from their own thread
(``put``/``modify``/``delete``/``append_log``) while the server runs on
its loop, in a thread of its own (``start_in_thread``) or the caller's.
"""
from __future__ import annotations

import asyncio
import collections
import copy
import datetime as dt
import json
import re
import threading
import time
import uuid
from typing import Callable, Optional

from tornado import web
from tornado.iostream import StreamClosedError

KINDS = {"jobs": ("Job", "batch/v1"), "deployments": ("Deployment", "apps/v1"),
         "pods": ("Pod", "v1"), "nodes": ("Node", "v1"), "services": ("Service", "v1"),
         "configmaps": ("ConfigMap", "v1")}
PATH = re.compile(r"(?:api/v1|apis/[^/]+/[^/]+)/(?:namespaces/([^/]+)/)?([a-z]+)"
                  r"(?:/([^/]+))?(?:/(log))?")
ENDED = ("Succeeded", "Failed")
_DROP = object()   # a watcher's queue gets it: cut the connection
_END = object()    # end the stream cleanly


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def selected(obj: dict, selector: str) -> bool:
    """Whether ``obj``'s labels match an equality selector ("k=v,k2=v2")."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        k, _, v = term.partition("=")
        if labels.get(k.strip()) != v.strip().lstrip("="):
            return False
    return True


class _Watcher:
    def __init__(self, plural: str, selector: str, loop: asyncio.AbstractEventLoop):
        self.plural, self.selector, self.loop = plural, selector, loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def send(self, item) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class ApiState:
    """Objects by plural and key, the global resourceVersion, the event
    history and the open watches."""

    def __init__(self, window: int = 1000, job_controller: bool = True):
        self.lock = threading.RLock()
        self.version = 0
        self.objects: dict[str, dict[tuple[str, str], dict]] = {p: {} for p in KINDS}
        self.history: collections.deque = collections.deque()
        self.window = window
        self.compacted = 0        # a watch from below this version gets 410
        self.watchers: list[_Watcher] = []
        self.logs: dict[tuple[str, str], str] = {}
        self._log_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.job_controller = job_controller
        self.gone_on_connect = False
        self.bookmark_interval = 60.0
        self._failures: list[int] = []
        self.stats: collections.Counter = collections.Counter()

    # ---- changes (any thread) ----------------------------------------------------------
    def _record(self, plural: str, kind: str, obj: dict) -> None:
        self.history.append((self.version, plural, kind, obj))
        while len(self.history) > self.window:
            self.compacted = self.history.popleft()[0]
        for w in self.watchers:
            if w.plural == plural and selected(obj, w.selector):
                w.send({"type": kind, "object": obj})

    def put(self, plural: str, obj: dict) -> dict:
        """Create or replace an object (ADDED or MODIFIED); returns it as stored."""
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace") or "", meta["name"])
            old = self.objects[plural].get(key)
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            meta.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            kind, api_version = KINDS[plural]
            obj.setdefault("kind", kind)
            obj.setdefault("apiVersion", api_version)
            self.objects[plural][key] = obj
            self._record(plural, "MODIFIED" if old else "ADDED", obj)
            if plural == "pods":
                self._logs_changed()
            if plural == "pods" and self.job_controller:
                self._job_of_pod_ended(obj)
            return copy.deepcopy(obj)

    def modify(self, plural: str, namespace: str, name: str, change: Callable[[dict], None]) -> dict:
        with self.lock:
            obj = copy.deepcopy(self.objects[plural][(namespace, name)])
            change(obj)
            return self.put(plural, obj)

    def delete(self, plural: str, namespace: str, name: str) -> Optional[dict]:
        with self.lock:
            obj = self.objects[plural].pop((namespace, name), None)
            if obj is None:
                return None
            self.version += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version)}}
            self._record(plural, "DELETED", obj)
            self._logs_changed()
            if plural == "jobs":   # background propagation: the Job's pods go too
                for key, pod in list(self.objects["pods"].items()):
                    if (pod["metadata"].get("labels") or {}).get("job-name") == name \
                            and key[0] == namespace:
                        self.delete("pods", *key)
            return obj

    def append_log(self, namespace: str, pod: str, text: str) -> None:
        with self.lock:
            self.logs[(namespace, pod)] = self.logs.get((namespace, pod), "") + text
            self._logs_changed()

    def _logs_changed(self) -> None:
        """Wake the log follows: a log grew, or a pod changed (it may have ended)."""
        for loop, event in self._log_waiters:
            loop.call_soon_threadsafe(event.set)

    def log_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event, add: bool) -> None:
        with self.lock:
            (self._log_waiters.append if add else self._log_waiters.remove)((loop, event))

    def _job_of_pod_ended(self, pod: dict) -> None:
        """The Job controller's rule: the Job of a pod that ended is Complete
        (exit 0) or Failed (backoffLimit 0, as GPU Hub's Jobs have)."""
        phase = (pod.get("status") or {}).get("phase")
        job_name = (pod["metadata"].get("labels") or {}).get("job-name")
        key = (pod["metadata"].get("namespace") or "", job_name)
        if phase not in ENDED or key not in self.objects["jobs"]:
            return
        kind = "Complete" if phase == "Succeeded" else "Failed"
        condition = {"type": kind, "status": "True", "lastTransitionTime": _now(),
                     "reason": "" if kind == "Complete" else "BackoffLimitExceeded"}
        self.modify("jobs", *key, lambda job: job.__setitem__("status", {
            "conditions": [condition], ("succeeded" if kind == "Complete" else "failed"): 1}))

    # ---- what tests break ----------------------------------------------------------------
    def drop_watches(self) -> int:
        """Cut every open watch connection mid-stream; how many were cut."""
        with self.lock:
            for w in self.watchers:
                w.send(_DROP)
            return len(self.watchers)

    def end_watches(self) -> None:
        """End every open watch cleanly (as its timeoutSeconds would)."""
        with self.lock:
            for w in self.watchers:
                w.send(_END)

    def fail_watches(self, status: int, count: int = 1) -> None:
        """Answer the next ``count`` watch requests with HTTP ``status``."""
        with self.lock:
            self._failures.extend([status] * count)

    def compact(self) -> None:
        """Forget the history: any watch from an older version gets 410."""
        with self.lock:
            self.history.clear()
            self.compacted = self.version

    # ---- what the handlers ask (the server's loop) -----------------------------------------
    def listing(self, plural: str, selector: str) -> tuple[list[dict], str]:
        with self.lock:
            return ([o for o in self.objects[plural].values() if selected(o, selector)],
                    str(self.version))

    def subscribe(self, plural: str, selector: str, since: int,
                  loop: asyncio.AbstractEventLoop) -> tuple[Optional[_Watcher], list[dict], int]:
        """(watcher, the events after ``since``, HTTP status): no watcher
        and the status when a failure was asked for, or 410 when ``since``
        is compacted away and ``gone_on_connect`` (else the handler says
        410 in the stream)."""
        with self.lock:
            if self._failures:
                return None, [], self._failures.pop(0)
            if since < self.compacted and self.gone_on_connect:
                return None, [], 410
            backlog = [{"type": k, "object": o} for v, p, k, o in self.history
                       if v > since and p == plural and selected(o, selector)]
            w = _Watcher(plural, selector, loop)
            self.watchers.append(w)
            return w, backlog, 200

    def unsubscribe(self, w: _Watcher) -> None:
        with self.lock:
            if w in self.watchers:
                self.watchers.remove(w)

    def pod_ended(self, namespace: str, name: str) -> bool:
        with self.lock:
            pod = self.objects["pods"].get((namespace, name))
            return pod is None or (pod.get("status") or {}).get("phase") in ENDED


def _gone(version) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
            "code": 410, "message": f"too old resource version: {version}"}


class Handler(web.RequestHandler):
    def initialize(self, state: ApiState):
        self.state = state

    def _count(self, call: str, body: bytes, request: bool = True) -> None:
        """One request of ``call`` (``request``) and the bytes it was answered."""
        self.state.stats[(call, "requests")] += int(request)
        self.state.stats[(call, "bytes")] += len(body)

    def _answer(self, call: str, obj: dict, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self._count(call, body)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def _flag(self, name: str) -> bool:
        return self.get_argument(name, "").lower() in ("1", "true")

    def _parse(self, path: str):
        m = PATH.fullmatch(path)
        if m is None or m.group(2) not in KINDS:
            raise web.HTTPError(404)
        return m.groups()

    async def get(self, path: str):
        namespace, plural, name, log = self._parse(path)
        if log:
            return await self._pod_log(namespace, name)
        selector = self.get_argument("labelSelector", "")
        if self._flag("watch"):
            return await self._watch(plural, selector)
        items, version = self.state.listing(plural, selector)
        kind = KINDS[plural][0]
        self._answer(f"list {plural}", {"kind": f"{kind}List", "apiVersion": KINDS[plural][1],
                                        "metadata": {"resourceVersion": version}, "items": items})

    def post(self, path: str):
        namespace, plural, _, _ = self._parse(path)
        obj = json.loads(self.request.body)
        obj.setdefault("metadata", {})["namespace"] = namespace
        if (namespace, obj["metadata"]["name"]) in self.state.objects[plural]:
            return self._answer("create", {"kind": "Status", "code": 409}, 409)
        self._answer("create", self.state.put(plural, obj), 201)

    def delete(self, path: str):
        namespace, plural, name, _ = self._parse(path)
        gone = self.state.delete(plural, namespace or "", name)
        if gone is None:
            return self._answer("delete", {"kind": "Status", "code": 404}, 404)
        self._answer("delete", {"kind": "Status", "status": "Success", "code": 200})

    async def _send(self, call: str, line: dict) -> None:
        body = (json.dumps(line) + "\n").encode()
        self._count(call, body, request=False)
        self.write(body)
        await self.flush()

    async def _watch(self, plural: str, selector: str) -> None:
        version = int(self.get_argument("resourceVersion", "0") or 0)
        timeout = float(self.get_argument("timeoutSeconds", "0") or 0) or 1800.0
        bookmarks = self._flag("allowWatchBookmarks")
        loop = asyncio.get_running_loop()
        w, backlog, status = self.state.subscribe(plural, selector, version, loop)
        call = f"watch {plural}"
        if w is None:
            body = _gone(version) if status == 410 else {"kind": "Status", "code": status}
            return self._answer(call, body, status)
        self._count(call, b"")
        self.set_header("Content-Type", "application/json")
        if version < self.state.compacted:   # in the stream, as API servers say it
            self.state.unsubscribe(w)
            return await self._send(call, {"type": "ERROR", "object": _gone(version)})
        deadline = time.monotonic() + timeout
        try:
            for event in backlog:
                await self._send(call, event)
            await self.flush()
            while True:
                wait = min(deadline - time.monotonic(),
                           self.state.bookmark_interval if bookmarks else 3600.0)
                if wait <= 0:
                    return
                try:
                    item = await asyncio.wait_for(w.queue.get(), wait)
                except asyncio.TimeoutError:
                    if bookmarks and time.monotonic() < deadline:
                        kind, api_version = KINDS[plural]
                        await self._send(call, {"type": "BOOKMARK", "object": {
                            "kind": kind, "apiVersion": api_version,
                            "metadata": {"resourceVersion": str(self.state.version)}}})
                    continue
                if item is _END:
                    return
                if item is _DROP:
                    self.detach().close()   # mid-stream, no final chunk: a broken connection
                    return
                await self._send(call, item)
        except StreamClosedError:
            return
        finally:
            self.state.unsubscribe(w)

    async def _pod_log(self, namespace: str, name: str) -> None:
        follow = self._flag("follow")
        self.set_header("Content-Type", "text/plain")
        sent, changed = 0, asyncio.Event()
        self.state.log_waiter(asyncio.get_running_loop(), changed, add=True)
        try:
            while True:
                changed.clear()
                text = self.state.logs.get((namespace, name), "")
                ended = self.state.pod_ended(namespace, name)
                if len(text) > sent:
                    chunk = text[sent:].encode()
                    self._count("log", chunk, request=False)
                    self.write(chunk)
                    await self.flush()
                    sent = len(text)
                if not follow or ended:
                    break
                try:
                    await asyncio.wait_for(changed.wait(), 5.0)
                except asyncio.TimeoutError:
                    pass
        except StreamClosedError:
            return
        finally:
            self.state.log_waiter(asyncio.get_running_loop(), changed, add=False)
        self._count("log", b"")
        self.finish()


def application(state: ApiState) -> web.Application:
    return web.Application([(r"/(.*)", Handler, {"state": state})])


class StandIn:
    """``ApiState`` served over HTTP on 127.0.0.1 at a port the kernel
    picks (bound once), in a thread of its own: ``url``, ``stop()``."""

    def __init__(self, state: Optional[ApiState] = None):
        self.state = state or ApiState()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stand-in API server did not start")

    def _serve(self) -> None:
        from tornado.httpserver import HTTPServer
        from tornado.ioloop import IOLoop
        from tornado.netutil import bind_sockets
        asyncio.set_event_loop(asyncio.new_event_loop())
        sockets = bind_sockets(0, "127.0.0.1")
        self._server = HTTPServer(application(self.state))
        self._server.add_sockets(sockets)
        self.port = sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = IOLoop.current()
        self._ready.set()
        self.loop.start()

    def stop(self) -> None:
        self.state.end_watches()
        self.loop.add_callback(self._server.stop)
        self.loop.add_callback(self.loop.stop)
        self._thread.join(10)
