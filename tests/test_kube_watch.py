"""The Kubernetes backend's watches (gpuspawner/backends/kubernetes/watch.py).

- The pure part by tables: events onto a cache, a relist's differences,
  the backoff schedule, JSON lines however the stream is cut.
- ``Reflector`` against scripted list and watch calls: the order of calls
  on each reconnect path, and backoff growth and reset (its sleep recorded,
  not slept).
- The real ``KubeApi`` against the stand-in API server (standin.py), whose
  watch streams, bookmarks, compaction and dropped connections drive the
  reconnect paths: after each, the cache equals the server's state, and no
  event was lost or applied twice.
- The backend on the stand-in: a pod that ends wakes the engine without a
  listing, and a running pod's log is followed into the attempt's log.
"""
from __future__ import annotations

import asyncio
import io
import os

import pytest

from gpuspawner.backends.kubernetes.api import KubeApi
from gpuspawner.backends.kubernetes.backend import KubernetesBackend
from gpuspawner.backends.kubernetes.manifests import job_name
from gpuspawner.backends.kubernetes.standin import ApiState, StandIn
from gpuspawner.backends.kubernetes.watch import (APPLIED, BOOKMARK, ERROR, GONE, STALE, Cache,
                                                   Gone, Reflector, apply_event, backoff_delay,
                                                   json_lines)
from test_kube_backend import SETTINGS, k8s_node, recording_api, spec


def obj(name, version, ns="ns", **extra):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(version)}, **extra}


# ---- the pure part ---------------------------------------------------------------------------

@pytest.mark.parametrize("before, event, outcome, objects, version", [
    pytest.param({}, {"type": "ADDED", "object": obj("a", 5)}, APPLIED, {"a": "5"}, "5",
                 id="added"),
    pytest.param({"a": 5}, {"type": "MODIFIED", "object": obj("a", 7)}, APPLIED, {"a": "7"}, "7",
                 id="modified"),
    pytest.param({"a": 5}, {"type": "DELETED", "object": obj("a", 8)}, APPLIED, {}, "8",
                 id="deleted"),
    pytest.param({"a": 5}, {"type": "MODIFIED", "object": obj("a", 5)}, STALE, {"a": "5"}, "5",
                 id="the-same-event-twice"),
    pytest.param({"a": 5}, {"type": "MODIFIED", "object": obj("a", 3)}, STALE, {"a": "5"}, "5",
                 id="older-than-the-cache"),
    pytest.param({}, {"type": "DELETED", "object": obj("b", 9)}, STALE, {}, "9",
                 id="deleted-unknown"),
    pytest.param({"a": 5}, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}},
                 BOOKMARK, {"a": "5"}, "42", id="bookmark-advances"),
    pytest.param({"a": 5}, {"type": "ERROR", "object": {"kind": "Status", "code": 410}},
                 GONE, {"a": "5"}, "5", id="gone"),
    pytest.param({"a": 5}, {"type": "ERROR", "object": {"kind": "Status", "code": 500}},
                 ERROR, {"a": "5"}, "5", id="other-error"),
    pytest.param({"a": 5}, {"type": "WHAT"}, ERROR, {"a": "5"}, "5", id="unknown-type"),
])
def test_apply_event(before, event, outcome, objects, version):
    cache = Cache({("ns", k): obj(k, v) for k, v in before.items()},
                  str(max(before.values(), default=0)))
    what, _ = apply_event(cache, event)
    assert what == outcome
    assert {k[1]: o["metadata"]["resourceVersion"] for k, o in cache.objects.items()} == objects
    assert cache.resource_version == version


def test_apply_event_opaque_versions_are_applied_not_compared():
    cache = Cache({("ns", "a"): obj("a", "x9")}, "x9")
    assert apply_event(cache, {"type": "MODIFIED", "object": obj("a", "x1")})[0] == APPLIED
    assert cache.resource_version == "x1"


@pytest.mark.parametrize("before, listed, changed", [
    pytest.param({}, {"a": 1, "b": 2}, {"a": "1", "b": "2"}, id="first-list"),
    pytest.param({"a": 1, "b": 2}, {"a": 1, "b": 2}, {}, id="nothing-changed"),
    pytest.param({"a": 1, "b": 2}, {"a": 3}, {"a": "3", "b": None}, id="changed-and-gone"),
    pytest.param({"a": 1}, {"a": 1, "c": 4}, {"c": "4"}, id="new"),
])
def test_relist_tells_what_changed_including_deletions_it_missed(before, listed, changed):
    cache = Cache({("ns", k): obj(k, v) for k, v in before.items()}, "2")
    out = cache.replace([obj(k, v) for k, v in listed.items()], "10")
    assert {k[1]: (o or {}).get("metadata", {}).get("resourceVersion") for k, o in out.items()} \
        == changed
    assert cache.resource_version == "10" and len(cache.objects) == len(listed)


@pytest.mark.parametrize("failures, rand, expected", [
    (0, 0.5, 0.0),          # no failure: at once
    (1, 0.0, 0.25), (1, 1.0, 0.5),
    (2, 0.0, 0.5), (2, 1.0, 1.0),
    (4, 1.0, 4.0),
    (7, 1.0, 30.0),         # capped
    (7, 0.0, 15.0),         # the jitter takes at most half
    (1000, 1.0, 30.0),      # no overflow
])
def test_backoff_is_capped_exponential_with_jitter(failures, rand, expected):
    assert backoff_delay(failures, base=0.5, cap=30.0, rand=lambda: rand) == expected


@pytest.mark.parametrize("chunks", [
    [b'{"a": 1}\n{"a": 2}\n'],
    [b'{"a"', b': 1}\n{"a": 2', b'}\n'],
    [b'{"a": 1}\n', b'\n', b'{"a": 2}'],         # blank lines; no newline at the end
    [bytes([c]) for c in b'{"a": 1}\n{"a": 2}\n'],
])
def test_json_lines_however_the_stream_is_cut(chunks):
    async def scenario():
        async def stream():
            for c in chunks:
                yield c
        return [x async for x in json_lines(stream())]
    assert asyncio.run(scenario()) == [{"a": 1}, {"a": 2}]


# ---- the Reflector against scripted calls --------------------------------------------------

class Script:
    """List and watch calls that answer from a script, one entry a call:
    a list answers (items, version); a watch yields its events, then ends,
    or raises the exception at the end of its entry."""

    def __init__(self, lists, watches):
        self.lists, self.watches, self.calls = list(lists), list(watches), []

    async def list(self, kind):
        self.calls.append(("list",))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(self, kind, version):
        self.calls.append(("watch", version))
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def reflector(script, slept):
    async def sleep(s):
        slept.append(s)
    changes = []
    r = Reflector("pods", script.list, script.watch,
                  lambda kind, key, o: changes.append((key[1], o and o["metadata"]["resourceVersion"])),
                  backoff_base=1.0, backoff_cap=8.0, sleep=sleep, rand=lambda: 1.0)
    return r, changes


def test_reflector_paths_in_order():
    """list → watch from its version; a clean end → watch again from the
    last event; a break → backoff, watch from the last event (no list);
    410 in the stream → list; 410 on connect → list."""
    script = Script(
        lists=[([obj("a", 1)], "3"), ([obj("a", 9), obj("c", 9)], "12"), ([obj("c", 9)], "20")],
        watches=[
            [{"type": "ADDED", "object": obj("b", 4)}],                         # ends cleanly
            [{"type": "MODIFIED", "object": obj("b", 5)}, ConnectionResetError("cut")],
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}},
             {"type": "ERROR", "object": {"code": 410}}],
            [Gone("too old")],                                                   # on connect
            [{"type": "DELETED", "object": obj("c", 21)}],
        ])
    slept: list = []
    r, changes = reflector(script, slept)

    async def scenario():
        for _ in range(5):
            await r.step()
    asyncio.run(scenario())
    assert script.calls == [("list",), ("watch", "3"), ("watch", "4"), ("watch", "5"),
                            ("list",), ("watch", "12"), ("list",), ("watch", "20")]
    assert changes == [("a", "1"), ("b", "4"), ("b", "5"),
                       ("b", None), ("a", "9"), ("c", "9"),   # the relist: b was deleted meanwhile
                       ("a", None),                           # the second relist
                       ("c", None)]
    # the cut: one backoff; the 410 after a bookmark is history, not a failure; the 410 on
    # connect right after a list is one
    assert slept == [1.0, 1.0]
    assert r.counts == {"lists": 3, "watches": 5, "gone": 2, "failures": 1}
    assert r.failures == 0
    assert r.cache.objects == {} and r.cache.resource_version == "21"


def test_backoff_grows_on_failures_in_a_row_and_resets_after_success():
    boom = ConnectionRefusedError("API server down")
    script = Script(lists=[boom, boom, boom, boom, boom, ([], "1")],
                    watches=[[boom], [boom], [{"type": "ADDED", "object": obj("a", 2)}, boom],
                             [boom]])
    slept: list = []
    r, _ = reflector(script, slept)

    async def scenario():
        for _ in range(9):
            await r.step()
    asyncio.run(scenario())
    # five lists fail: waits of 1, 2, 4, 8 before the next tries, then 8 (capped); the list
    # gets through but its watch breaks, and the next: 8, 8; the next brings an event (back
    # to 0) and breaks: 1 again
    assert slept == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 1.0]
    assert r.failures == 2 and r.counts["lists"] == 1 and r.counts["failures"] == 9


def test_a_server_that_only_says_gone_is_not_listed_in_a_loop():
    script = Script(lists=[([], "5")] * 4,
                    watches=[[{"type": "ERROR", "object": {"code": 410}}], [Gone("old")],
                             [{"type": "ERROR", "object": {"code": 410}}], [Gone("old")]])
    slept: list = []
    r, _ = reflector(script, slept)

    async def scenario():
        for _ in range(4):
            await r.step()
    asyncio.run(scenario())
    assert script.calls == [("list",), ("watch", "5")] * 4
    assert slept == [1.0, 2.0, 4.0]   # each 410 right after a list is one more failure


# ---- KubeApi's requests ----------------------------------------------------------------------

def test_kube_api_watch_and_follow_requests():
    """The query a watch and a log follow send, and how a refusal reads."""
    from urllib.parse import parse_qs

    from kubernetes_asyncio.client.exceptions import ApiException
    from tornado import web

    class Streams(web.RequestHandler):
        def initialize(self, seen, answers):
            self.seen = seen

        def get(self, path):
            self.seen.append((self.request.path, parse_qs(self.request.query)))
            status = int(parse_qs(self.request.query).get("resourceVersion", ["0"])[0])
            if status >= 400:
                self.set_status(status)
                return self.finish({"kind": "Status", "code": status})
            self.finish(b'{"type": "ADDED", "object": {"metadata": {"name": "a"}}}\n'
                        if not path.endswith("/log") else b"line 1\nline 2\n")

    async def scenario():
        seen: list = []
        api, server = recording_api(Streams, seen, {})
        try:
            assert [e["type"] async for e in api.watch("pods", "41", 60)] == ["ADDED"]
            assert [e["type"] async for e in api.watch("nodes", "42", 60)] == ["ADDED"]
            assert b"".join([c async for c in api.follow_log("p-1", "gpuhub-jobs")]) == \
                b"line 1\nline 2\n"
            with pytest.raises(Gone):
                [e async for e in api.watch("jobs", "410", 60)]
            with pytest.raises(ApiException) as refused:
                [e async for e in api.watch("deployments", "503", 60)]
            assert refused.value.status == 503
        finally:
            await api.close()
            server.stop()
        (pods, q), (nodes, nq), (log_path, lq) = seen[:3]
        assert pods == "/api/v1/pods" and q == {
            "labelSelector": ["app.kubernetes.io/managed-by=gpuhub"], "watch": ["True"],
            "resourceVersion": ["41"], "allowWatchBookmarks": ["True"], "timeoutSeconds": ["60"]}
        assert nodes == "/api/v1/nodes" and "labelSelector" not in nq and nq["watch"] == ["True"]
        assert log_path == "/api/v1/namespaces/gpuhub-jobs/pods/p-1/log" and lq["follow"] == ["True"]
        assert [p for p, _ in seen[3:]] == ["/apis/batch/v1/jobs", "/apis/apps/v1/deployments"]
    asyncio.run(scenario())


# ---- KubeApi against the stand-in ----------------------------------------------------------

def pod(name, phase="Pending", ns="gpuhub-jobs", job=None, **status):
    labels = {"app.kubernetes.io/managed-by": "gpuhub"}
    if job:
        labels["job-name"] = job
    return {"metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "job", "image": "runner"}]},
            "status": {"phase": phase, **status}}


@pytest.fixture
def standin():
    server = StandIn(ApiState(window=50))
    yield server
    server.stop()


def kube_api(server) -> KubeApi:
    from kubernetes_asyncio import client
    return KubeApi(client.ApiClient(client.Configuration(host=server.url)))


def server_pods(state: ApiState) -> dict:
    with state.lock:
        return {k: o["metadata"]["resourceVersion"] for k, o in state.objects["pods"].items()
                if o["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "gpuhub"}


def cached(r: Reflector) -> dict:
    return {k: o["metadata"]["resourceVersion"] for k, o in r.cache.objects.items()}


async def until(check, what, seconds=10.0):
    """Wait for ``check()`` (generous: the assertion is what happened, not how soon)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run_with_deadline(loop, coro, seconds: float):
    """``loop.run_until_complete(coro)``, failing after ``seconds`` with where
    each of the loop's tasks was waiting (a hang in CI once ran into
    pytest-timeout's 900 s, whose thread dump showed only an idle loop)."""
    task = loop.create_task(coro)
    loop.run_until_complete(asyncio.wait({task}, timeout=seconds))
    if task.done():
        return task.result()
    stacks = io.StringIO()
    for t in asyncio.all_tasks(loop):
        t.print_stack(file=stacks)
    task.cancel()
    loop.run_until_complete(asyncio.wait({task}, timeout=5))
    raise AssertionError(f"not done after {seconds:.0f} s; the loop's tasks:\n{stacks.getvalue()}")


class Watching:
    """A Reflector of pods over the real KubeApi, running as a task; every
    change it applied, in order."""

    def __init__(self, server, timeout=300):
        self.api = kube_api(server)
        self.applied: list[tuple[str, str]] = []
        self.slept: list[float] = []

        async def sleep(s):
            self.slept.append(s)
            await asyncio.sleep(0)
        self.r = Reflector("pods", self.api.list_kind,
                           lambda kind, v: self.api.watch(kind, v, timeout),
                           lambda kind, key, o: self.applied.append(
                               (key[1], o and o["metadata"]["resourceVersion"])),
                           sleep=sleep, backoff_base=0.01, backoff_cap=0.04, rand=lambda: 1.0)
        self.task = asyncio.get_running_loop().create_task(self.r.run())

    async def close(self):
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.api.close()


def assert_each_change_once(applied, state):
    """Every change of each pod was applied once, in order: versions only go up."""
    by_pod: dict = {}
    for name, version in applied:
        if version is not None:
            by_pod.setdefault(name, []).append(int(version))
    for name, versions in by_pod.items():
        assert versions == sorted(set(versions)), f"{name} applied out of order or twice"


def test_list_then_watch_follows_the_server(standin):
    state = standin.state
    state.put("pods", pod("p1"))
    state.put("pods", {**pod("other"), "metadata": {"name": "other", "namespace": "x",
                                                     "labels": {"app": "not-ours"}}})

    async def scenario():
        w = Watching(standin)
        try:
            await until(lambda: w.r.counts["lists"] == 1, "the first list")
            state.modify("pods", "gpuhub-jobs", "p1", lambda p: p["status"].update(phase="Running"))
            state.put("pods", pod("p2"))
            state.delete("pods", "gpuhub-jobs", "p2")
            await until(lambda: cached(w.r) == server_pods(state) and len(w.applied) == 4,
                        "the watch to catch up")
            assert [n for n, _ in w.applied] == ["p1", "p1", "p2", "p2"]
            assert w.r.cache.objects[("gpuhub-jobs", "p1")]["status"]["phase"] == "Running"
            assert w.r.counts["lists"] == 1 and w.r.counts["gone"] == 0
            # the label selector reached the server: the other pod was never sent
            assert all(n != "other" for n, _ in w.applied)
        finally:
            await w.close()
    asyncio.run(scenario())


def test_a_connection_dropped_mid_stream_loses_nothing_and_applies_nothing_twice(standin):
    state = standin.state

    async def scenario():
        w = Watching(standin)
        try:
            await until(lambda: w.r.counts["watches"] == 1 and state.watchers, "a watch")
            for i in range(5):
                state.put("pods", pod(f"p{i}"))
            await until(lambda: len(cached(w.r)) == 5, "five pods")
            for round_ in range(3):          # cut, change while cut, reconnect
                assert state.drop_watches() == 1
                for i in range(round_, 5):
                    state.modify("pods", "gpuhub-jobs", f"p{i}",
                                 lambda p: p["status"].update(phase=f"round-{round_}"))
                state.delete("pods", "gpuhub-jobs", f"p{round_}")
                await until(lambda: cached(w.r) == server_pods(state), "the cache to catch up")
            assert w.r.counts["lists"] == 1           # resumed from the version, never relisted
            assert w.r.counts["watches"] >= 4 and w.r.counts["failures"] >= 3
            assert_each_change_once(w.applied, state)
            # each of the 5 adds, 5 x 3 modifications (minus those of deleted pods), 3 deletes
            assert len(w.applied) == 5 + (5 + 4 + 3) + 3
        finally:
            await w.close()
    asyncio.run(scenario())


@pytest.mark.parametrize("gone_on_connect", [False, True], ids=["410-in-stream", "410-on-connect"])
def test_a_compacted_version_relists_and_the_cache_equals_the_server(standin, gone_on_connect):
    state = standin.state
    state.gone_on_connect = gone_on_connect

    async def scenario():
        w = Watching(standin)
        try:
            for i in range(3):
                state.put("pods", pod(f"p{i}"))
            await until(lambda: len(cached(w.r)) == 3, "three pods")
            # while the watch is cut, pods change and the history is compacted away
            state.fail_watches(503, 2)
            state.drop_watches()
            state.delete("pods", "gpuhub-jobs", "p0")
            state.modify("pods", "gpuhub-jobs", "p1", lambda p: p["status"].update(phase="Running"))
            state.put("pods", pod("p9"))
            state.compact()
            await until(lambda: w.r.counts["gone"] == 1 and cached(w.r) == server_pods(state),
                        "a relist")
            assert w.r.counts["lists"] == 2
            assert ("p0", None) in w.applied        # the relist told of the deletion it missed
            assert w.r.cache.objects[("gpuhub-jobs", "p1")]["status"]["phase"] == "Running"
            # and it watches on from the new list
            state.put("pods", pod("p10"))
            await until(lambda: cached(w.r) == server_pods(state), "the watch after the relist")
            assert w.r.counts["lists"] == 2
        finally:
            await w.close()
    asyncio.run(scenario())


def test_bookmarks_move_the_version_on_so_a_reconnect_needs_no_relist():
    """The pods do not change while other objects do, until the pods' last
    version is compacted away: only a bookmark keeps a reconnect valid."""
    server = StandIn(ApiState(window=5))
    server.state.bookmark_interval = 0.05
    state = server.state

    async def scenario():
        w = Watching(server)
        try:
            state.put("pods", pod("p0"))
            await until(lambda: len(cached(w.r)) == 1 and state.watchers, "the pod and a watch")
            for i in range(20):                      # the pods' versions fall out of the window
                state.put("jobs", {"metadata": {"name": f"j{i}", "namespace": "gpuhub-jobs",
                                                "labels": {"app.kubernetes.io/managed-by": "gpuhub"}}})
            await until(lambda: w.r.cache.resource_version == str(state.version), "a bookmark")
            assert int(w.r.cache.resource_version) > state.compacted
            state.drop_watches()
            state.put("pods", pod("p1"))
            await until(lambda: cached(w.r) == server_pods(state), "the new pod")
            assert w.r.counts["lists"] == 1 and w.r.counts["gone"] == 0
        finally:
            await w.close()
    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_server_errors_back_off_growing_and_reset_once_through(standin):
    state = standin.state

    async def scenario():
        w = Watching(standin)
        try:
            await until(lambda: state.watchers, "a watch")
            state.fail_watches(500, 4)
            state.drop_watches()
            state.put("pods", pod("p1"))
            await until(lambda: cached(w.r) == server_pods(state), "the watch to come back")
            # the drop, then four 500s: five failures in a row, then through
            assert w.slept == [0.01, 0.02, 0.04, 0.04, 0.04] and w.r.failures == 0
            assert w.r.counts["lists"] == 1
        finally:
            await w.close()
    asyncio.run(scenario())


# ---- the backend on the stand-in ---------------------------------------------------------------

def start_job(state: ApiState, name: str, ns="gpuhub-jobs", phase="Running") -> str:
    pod_name = f"{name}-x1"
    state.put("pods", pod(pod_name, phase, ns=ns, job=name))
    return pod_name


def test_an_ended_pod_wakes_the_engine_without_a_listing(standin, tmp_path):
    state = standin.state
    state.put("nodes", k8s_node("gpu-1", {"nvidia.com/gpu": "8"}))

    async def scenario():
        api = kube_api(standin)
        b = KubernetesBackend(SETTINGS, api, watch=True)
        woken = asyncio.Event()
        b.set_wake(woken.set)
        runner = asyncio.get_running_loop().create_task(b.run())
        try:
            await until(lambda: b._listed_at is not None, "the first lists")
            name = b.start(spec(attempt_dir=str(tmp_path / "a1"))).ref
            await b.settle()
            pod_name = start_job(state, name)
            await until(lambda: b.caches["pods"].objects, "the pod")
            assert b.poll() == [] and not woken.is_set()
            lists = sum(v for (call, what), v in state.stats.items()
                        if call.startswith("list") and what == "requests")
            state.modify("pods", "gpuhub-jobs", pod_name, lambda p: p["status"].update(
                phase="Succeeded", containerStatuses=[
                    {"name": "job", "state": {"terminated": {"exitCode": 0}}}]))
            await asyncio.wait_for(woken.wait(), 10)
            [x] = b.poll()
            assert (x.reason, x.returncode) == ("exited", 0)
            assert sum(v for (call, what), v in state.stats.items()
                       if call.startswith("list") and what == "requests") == lists
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await b.settle()
            await b.logs.close()
            await api.close()
    asyncio.run(scenario())


def test_a_running_pods_log_is_followed_into_the_attempts_log(standin, tmp_path):
    state = standin.state
    log_file = tmp_path / "a1" / "output.log"

    async def scenario():
        api = kube_api(standin)
        b = KubernetesBackend(SETTINGS, api, watch=True)
        runner = asyncio.get_running_loop().create_task(b.run())
        try:
            name = b.start(spec(attempt_dir=str(tmp_path / "a1"))).ref
            await b.settle()
            pod_name = start_job(state, name)
            state.append_log("gpuhub-jobs", pod_name, "epoch 1\n")
            await until(lambda: b._pods_of("gpuhub-jobs", name), "the running pod")
            assert not log_file.exists() and ("log", "requests") not in state.stats  # nobody reads
            b.log_followed("w0123abcd", 1, True)     # `gpuhub logs -f` (the LogsHandler says so)
            await until(lambda: log_file.exists() and log_file.read_text() == "epoch 1\n",
                        "the first line while the pod runs")
            state.append_log("gpuhub-jobs", pod_name, "epoch 2\n")
            await until(lambda: log_file.read_text() == "epoch 1\nepoch 2\n", "the second line")
            # the follow breaks (the API server restarts); a later event follows again
            await b.logs.close()
            state.append_log("gpuhub-jobs", pod_name, "epoch 3\n")
            state.modify("pods", "gpuhub-jobs", pod_name, lambda p: p["status"].update(
                podIP="10.0.0.9"))
            await until(lambda: log_file.read_text().endswith("epoch 3\n"), "the third line")
            # the reader leaves, and comes back: the follow stops, and starts again
            b.log_followed("w0123abcd", 1, False)
            await until(lambda: not b.logs.following("gpuhub-jobs", [pod_name]), "the stop")
            state.append_log("gpuhub-jobs", pod_name, "epoch 4\n")
            b.log_followed("w0123abcd", 1, True)
            await until(lambda: log_file.read_text().endswith("epoch 4\n"), "the fourth line")
            state.append_log("gpuhub-jobs", pod_name, "done\n")
            state.modify("pods", "gpuhub-jobs", pod_name, lambda p: p["status"].update(
                phase="Succeeded", containerStatuses=[
                    {"name": "job", "state": {"terminated": {"exitCode": 0}}}]))
            exits: list = []
            await until(lambda: exits.extend(b.poll()) or exits, "the end")
            # reported once the follow brought the last line: `gpuhub logs -f` ends with it
            everything = "epoch 1\nepoch 2\nepoch 3\nepoch 4\ndone\n"
            assert log_file.read_text() == everything
            await b.settle()
            assert log_file.read_text() == everything   # each line once
            assert ("gpuhub-jobs", name) not in state.objects["jobs"]   # collected, then deleted
        finally:
            runner.cancel()
            await b.logs.close()
            await asyncio.gather(runner, return_exceptions=True)
            await api.close()
    asyncio.run(scenario())


# ---- the service on the stand-in -----------------------------------------------------------------

def test_service_acts_on_a_pods_end_at_once_and_follows_its_log(tmp_path, monkeypatch):
    """The service with the kubernetes backend watching the stand-in, its
    cycle every 60 s: a pod that succeeds changes the workload's state in
    the database well before any cycle would have come (only the watch's
    wake explains it), with no listing after the first; and while the pod
    runs and is followed, its log grows in the attempt's log, which
    ``gpuhub logs -f`` streams (GET /workloads/{id}/logs?follow=true reads
    that file, and tells the backend it follows)."""
    from gpuspawner.service.workloads import queries
    from gpuspawner.service.access.identity import Identity
    from gpuspawner.vocab.specs import parse_job
    from test_kube_backend import start_service, stop_service
    server = StandIn()
    state = server.state
    state.put("nodes", k8s_node("gpu-1", {"nvidia.com/gpu": "8"}))
    try:
        app, loop = start_service(tmp_path, monkeypatch, server, (
            'c.KubernetesJobs.pools = {"a100-sxm4-80gb": {}}\n'
            'c.GpuHubService.cycle_interval = 60.0\n'
            'c.GpuHubService.teams = {"a": {"quotas": {"a100-sxm4-80gb": {"nominal": 8}}}}\n'))
    except BaseException:
        server.stop()
        raise
    alice = Identity("alice", teams=frozenset({"a"}), can_submit=True)

    def lists():
        return sum(v for (call, what), v in state.stats.items()
                   if call.startswith("list") and what == "requests")

    async def scenario():
        tasks = [loop.create_task(app.driver.run()), loop.create_task(app.engine.backend.run())]
        try:
            await until(lambda: app.engine.backend._listed_at is not None, "the first lists")
            wid = app.engine.submit(alice, parse_job({"command": ["python", "train.py"],
                                                      "gpus": 1, "pool": "a100-sxm4-80gb"})).id
            app.engine.wake()
            name = job_name(wid, 0)
            await until(lambda: ("gpuhub-jobs", name) in state.objects["jobs"], "the Job")
            pod_name = start_job(state, name)
            log_file = app.engine.backend.log_path(app.engine.launcher.attempt_dir(wid, 0))
            app.engine.backend.log_followed(wid, 0, True)   # as the LogsHandler does
            state.append_log("gpuhub-jobs", pod_name, "step 1 loss 0.9\n")
            await until(lambda: os.path.exists(log_file) and
                        open(log_file).read() == "step 1 loss 0.9\n", "the log while it runs")
            assert queries.get(app.engine.store, alice, wid).state == "running"
            listed = lists()
            state.modify("pods", "gpuhub-jobs", pod_name, lambda p: p["status"].update(
                phase="Succeeded", containerStatuses=[
                    {"name": "job", "state": {"terminated": {"exitCode": 0}}}]))
            await until(lambda: queries.get(app.engine.store, alice, wid).state == "succeeded",
                        "the database to say succeeded", seconds=20)
            assert lists() == listed
            await until(lambda: ("gpuhub-jobs", name) not in state.objects["jobs"], "cleanup")
            assert open(log_file).read() == "step 1 loss 0.9\n"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await app.engine.backend.settle()
            await app.engine.backend.logs.close()
    try:
        run_with_deadline(loop, scenario(), 180)
    finally:
        stop_service(app, loop)
        server.stop()


def test_bench_kube_measures_both_modes_on_a_small_cluster():
    """`gpuhub bench kube` at 16 pods for 3 s a mode: the listing makes its
    four lists every 2 s, the watch none after the first, and both measure
    probe exits to the database."""
    from gpuspawner.bench.kube import format_rows, run_bench
    listing, watching = rows = run_bench(pods=16, seconds=3, churn_per_minute=120)
    assert listing["mode"] == "list every 2 s" and watching["mode"] == "watch"
    assert listing["calls_per_min"] >= 40 and watching["calls_per_min"] == 0
    assert watching["long_run_calls_per_min"] == 0.8      # 4 kinds, one watch per 300 s
    assert watching["bytes"] < listing["bytes"]
    assert listing["probes"] >= 1 and watching["probes"] >= 1
    assert watching["exit_to_db_p50_ms"] is not None
    table = format_rows(rows)
    assert "list / watch" in table and "16 pods and Jobs on 2 nodes" in table
