"""A CPU-only flood on a 2-core node, on a real hub (issue 29): alice, with
her own token as from her terminal, submits 30 GPU-less jobs. Only what fits
the node's 2 CPUs runs; the rest wait saying which node lacks what; every
running job is held by finite memory, CPU and pids limits, which the test
reads from the job's own /proc/<pid>/cgroup. The node declares 2 CPUs and
64 GiB (GpuHubService.node_resources), so that the CPUs bind first whatever
the host's memory."""
from __future__ import annotations

import os
import re

import pytest
import requests

from gpuspawner.isolation.accounts import isolating
from hub_harness import Hub, wait_for

pytestmark = pytest.mark.skipif(
    not isolating() or not os.access("/sys/fs/cgroup/pids", os.W_OK),
    reason="needs root and cgroup v1 memory, cpu and pids controllers (CI has them)")

# The job says who it is, then stays (until cancelled) so that it holds its CPU.
JOB = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
FLOOD = 30


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("flood")), groups={"team-a": ["alice"]},
            teams={"a": {"quotas": {"default": {"nominal": 2}}}},
            extra_service_config='c.GpuHubService.node_resources = '
                                 '{"cpus": 2, "memory": "64G"}\n')
    try:
        yield h.start()
    finally:
        h.stop()


def limits_of(pid: int) -> dict[str, str]:
    """The cgroup limits that hold ``pid``, read from its /proc/<pid>/cgroup."""
    files = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"}
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for c in names.split(","):
                if c in files:
                    with open(f"/sys/fs/cgroup/{c}{path}/{files[c]}") as g:
                        out[files[c]] = g.read().strip()
    return out


def test_a_cpu_only_flood_runs_only_what_fits_and_each_is_limited(hub):
    assert requests.get(f"{hub.api}/health", timeout=10).json()["limits"] == \
        "cgroup-v1 memory, cpu, pids"
    alice = hub.client("alice")
    ids = [alice.submit(command=["python", "-c", JOB], gpus=0, pool="default")["id"]
           for _ in range(FLOOD)]
    try:
        def states():
            ws = [alice.workload(w) for w in ids]
            return [w for w in ws if w["state"] == "running"], \
                [w for w in ws if w["state"] == "queued"]
        wait_for(lambda: len(states()[0]) == 2, "two running jobs", timeout=90)
        # Every queued one has been looked at (its reason), and later cycles start no more.
        wait_for(lambda: all(w["reason"] != "queued" for w in states()[1]), "reasons",
                 timeout=30)
        running, queued = states()
        assert len(running) == 2 and len(queued) == FLOOD - 2
        # One (the oldest) holds the backfill reservation; the rest say why they wait.
        asked = "waiting for 1 CPU and 8GiB memory on a node of pool default"
        reasons = sorted(w["reason"] for w in queued)
        assert [r for r in reasons if "reserved" in r] == [
            f"{asked}; reserved to start within 24.0 h (backfill keeps that start)"], reasons
        assert all(re.fullmatch(rf"{asked}: node \S+ has 0 of 2 CPUs free", r)
                   for r in reasons if "reserved" not in r), reasons
        assert all((w["cpus"], w["memory"]) == (1.0, 8 << 30) for w in running + queued)
        for w in running:
            # The whole line: the job's unbuffered print() writes it word by word.
            found = wait_for(lambda: re.search(r"PID (\d+)\n",
                                               alice.get(f"/workloads/{w['id']}/logs").text),
                             "the job's output")
            pid = int(found.group(1))
            limits = limits_of(pid)
            assert limits == {"memory.limit_in_bytes": str(8 << 30), "pids.max": "1024",
                              "cpu.cfs_quota_us": "100000"}, limits
    finally:
        for w in ids:
            alice.post(f"/workloads/{w}/cancel")
