"""The sentence a user reads when their server stopped
(gpuspawner/spawner/stop_reason.py): who or what stopped it."""
from __future__ import annotations

import signal

import pytest

from gpuspawner.spawner.stop_reason import exit_reason, oom_kills, requested_reason


@pytest.mark.parametrize("status, oom, says", [
    (-signal.SIGKILL, 0, "killed by SIGKILL from outside the hub"),
    (-signal.SIGTERM, 0, "killed by SIGTERM from outside the hub"),
    (-signal.SIGKILL, 1, "ran out of memory: the kernel's OOM killer ended 1 of its processes"),
    (0, 0, "exited by itself (status 0)"),
    (3, 0, "exited with status 3"),
])
def test_a_server_that_ended_by_itself_says_how(status, oom, says):
    assert says in exit_reason(status, oom)


@pytest.mark.parametrize("requester, kind, said, says", [
    ("gpuhub-culler", "service", "idle for 2 h, GPU 0% for 2 h", "the idle culler stopped it: idle for 2 h, GPU 0% for 2 h"),
    ("admin", "user", "", "the admin admin stopped it"),
    ("alice", "user", "", "you stopped it"),
    ("other-svc", "service", "", "the service other-svc stopped it"),
])
def test_a_server_stopped_on_request_says_by_whom(requester, kind, said, says):
    # (as the hub's handler hands it over: name, kind, what they said)
    assert requested_reason(*(requester, kind, said), owner="alice") == says


@pytest.mark.parametrize("files, kills", [
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}, 2),   # cgroup v1
    ({"memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n"}, 1),            # cgroup v2
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}, 0),
    ({}, 0),                                                                          # no memory cgroup
])
def test_oom_kills_are_read_from_the_memory_cgroup(tmp_path, files, kills):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert oom_kills([str(tmp_path), str(tmp_path / "missing")]) == kills


@pytest.mark.parametrize("request_, says", [
    (("admin", "user", ""), "the admin admin stopped it"),
    (("gpuhub-culler", "service", "idle for 2 h"), "the idle culler stopped it: idle for 2 h"),
    (None, "the hub stopped it (the hub was shut down, or its start failed)"),
    (("too", "many", "fields", "here"), ""),  # a bad record: the server still stops
])
def test_a_stop_on_request_is_recorded_and_always_stops(request_, says):
    import asyncio
    import logging
    import types

    from gpuspawner.client.aio import AsyncApi
    from gpuspawner.spawner.admission import GPUSpawnerMixin

    class Service(AsyncApi):
        async def _send(self, request):
            return {}

    class Spawner(GPUSpawnerMixin):
        def __init__(self):
            super().__init__()
            self.user = types.SimpleNamespace(name="alice")
            self._log_name, self.log = "alice", logging.getLogger("test")

        @property
        def gpuhub_api(self):
            return Service()
    s, stopped = Spawner(), []

    async def base_stop():
        stopped.append(True)
    s._stop_request = request_
    asyncio.run(s.stop_and_release(base_stop))
    assert stopped == [True] and s.stop_reason == says
    assert s._save_stop({}).get("gpuhub_stop_reason", "") == says  # kept in the spawner's state
