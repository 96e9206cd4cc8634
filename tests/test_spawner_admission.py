"""What the spawner asks the scheduler service for, from the spawn form's
choice: the form's data goes through options_from_form into user_options,
and admit() posts the workload. The service is a stand-in that answers the
three calls admit() makes and keeps what it was sent."""
from __future__ import annotations

import asyncio
import types

import pytest

from gpuspawner.client.aio import AsyncApi
from gpuspawner.spawner.admission import GPUSpawnerMixin

H200_MIB = 144384
POOLS = [{"name": "h200", "free": 4, "teams": {}, "queued_workloads": 0, "queued_gpus": 0,
          "sharing": {"share_units": 4, "gpu_memory_mib": H200_MIB,
                      "share_memory_mib": H200_MIB // 4, "smallest_share": "1/4"},
          "nodes": [{"name": "n1", "gpus": 4, "devices": [
              {"model": "H200", "memory_mib": H200_MIB, "healthy": True}] * 4}]}]
TEAMS = [{"name": "vision", "quotas": {"h200": {"nominal": 2, "borrowing_limit": 0}}}]


class CannedService(AsyncApi):
    """The service's answers canned, its requests (method, path, body) kept."""

    def __init__(self, sent: list):
        self.sent = sent

    async def _send(self, request):
        self.sent.append((request.method, request.path, request.body))
        if request.path == "/pools":
            return {"pools": POOLS}
        if request.path == "/teams":
            return {"teams": TEAMS}
        if request.method == "POST":
            return {"id": "w1", "state": "queued"}
        return {"id": "w1", "state": "running", "devices": [2], "device_uuids": ["GPU-2"],
                "reason": ""}


class RecordingSpawner(GPUSpawnerMixin):
    """The mixin alone, with the service canned."""

    def __init__(self):
        super().__init__()
        self.user = types.SimpleNamespace(name="alice", groups=[types.SimpleNamespace(
            name="team-vision")], admin=False)
        self.name = ""
        self.sent: list[tuple[str, str, dict]] = []

    @property
    def gpuhub_api(self):
        return CannedService(self.sent)


@pytest.mark.parametrize("choice, user_options, posted", [
    ("h200:1/4", {"team": "vision", "pool": "h200", "gpus": 1, "gpu_share": "1/4"},
     {"gpus_per_node": 1, "gpu_share": "1/4"}),
    ("h200:3/4", {"team": "vision", "pool": "h200", "gpus": 1, "gpu_share": "3/4"},
     {"gpus_per_node": 1, "gpu_share": "3/4"}),
    ("h200:2", {"team": "vision", "pool": "h200", "gpus": 2}, {"gpus_per_node": 2}),
])
def test_the_forms_choice_is_what_the_service_is_asked_for(choice, user_options, posted):
    s = RecordingSpawner()
    s._offers_seen = asyncio.run(s._offers())
    s.user_options = s.options_from_form({"gpu_choice": [choice], "team": ["vision"]})
    assert s.user_options == user_options
    w = asyncio.run(s.admit())
    assert w["devices"] == [2] and s.devices == [2]
    [body] = [b for m, p, b in s.sent if m == "POST"]
    assert body == {"kind": "notebook", "user": "alice", "team": "vision", "pool": "h200",
                    "name": "", **posted}
    said = [m["message"] for m in s._progress_messages]
    want = f"{posted['gpu_share']} of one h200 GPU" if "gpu_share" in posted else "2 × h200 GPUs"
    assert said[0] == f"asked the scheduler for {want} for team vision"


@pytest.mark.parametrize("admit_cpu_only, posts", [(True, True), (False, False)])
def test_a_cpu_only_server_asks_the_scheduler_for_its_cpus_and_memory(admit_cpu_only, posts):
    """A server without GPUs is a workload of 0 GPUs, so the scheduler counts
    its CPUs and memory against its node and its team's quota (unless the
    site turns it off: then it starts at once, uncounted)."""
    s = RecordingSpawner()
    s.admit_cpu_only = admit_cpu_only
    s.user_options = {"team": "vision", "gpus": 0}
    w = asyncio.run(s.admit())
    bodies = [b for m, p, b in s.sent if m == "POST"]
    if posts:
        assert bodies == [{"kind": "notebook", "user": "alice", "team": "vision", "pool": "",
                           "name": "", "gpus_per_node": 0}]
        assert w["id"] == "w1" and s.workload_id == "w1"
        said = [m["message"] for m in s._progress_messages]
        assert said[0] == "asked the scheduler for CPUs and memory (no GPU) for team vision"
    else:
        assert bodies == [] and w is None and s.workload_id is None
