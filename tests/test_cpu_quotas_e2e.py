"""A team's CPU quota on a real hub (issue 29 item 3), from where its users
and an admin stand: team a may ask for 2 CPUs in pool default. alice, with
her own token as from her terminal, submits three 1-CPU jobs without GPUs:
two run, the third waits saying it is the team's CPUs; carol of team b runs
beside them. The admin sees what team a holds, raises its quota to 3 and
the third job starts. Usage then shows the team's CPU-hours, priced per
CPU-hour."""
from __future__ import annotations

import time

import pytest

from hub_harness import Hub, wait_for

JOB = "import time; time.sleep(600)"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("cpu-quota")),
            groups={"team-a": ["alice"], "team-b": ["carol"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "cpus": 2}}},
                   "b": {"quotas": {"default": {"nominal": 2}}}},
            extra_service_config="c.GpuHubService.cpu_hour_price = 3600.0\n")
    try:
        yield h.start()
    finally:
        h.stop()


def job(client) -> str:
    return client.submit(command=["python", "-c", JOB], gpus=0, pool="default", cpus=1,
                         memory="256M")["id"]


def test_a_teams_third_one_cpu_job_waits_for_its_cpu_quota_until_an_admin_raises_it(hub):
    alice, carol, admin = hub.client("alice"), hub.client("carol"), hub.client("root-admin")
    ids = []
    try:
        for _ in range(3):
            ids.append(job(alice))
            time.sleep(0.05)  # the queue's order is the submit order
        ids.append(job(carol))
        for wid in ids[:2] + ids[3:]:
            alice_or_carol = carol if wid == ids[3] else alice
            alice_or_carol.wait(wid, "running", timeout=90)
        third = wait_for(lambda: alice.workload(ids[2])["reason"] not in ("", "queued")
                         and alice.workload(ids[2]), "a waiting reason", timeout=30)
        assert third["state"] == "queued"
        assert third["reason"] == ("waiting for its team's quota: team a holds 2 of its 2 "
                                   "default CPUs (quota); this workload asks for 1 CPU")
        quota = admin.get("/teams/a").json()["quotas"]["default"]
        assert (quota["cpus"], quota["used_cpus"], quota["used_memory"]) == \
            (2.0, 2.0, 2 * (256 << 20))
        # alice cannot raise her own team's quota; an admin can, and it applies next cycle
        assert alice.request("PUT", "/teams/a", json={"quotas": {"default": {
            "nominal": 2, "cpus": 3}}}).status_code == 403
        r = admin.request("PUT", "/teams/a", json={"quotas": {"default": {"nominal": 2,
                                                                           "cpus": 3}}})
        assert r.status_code == 200 and r.json()["quotas"]["default"]["cpus"] == 3.0, r.text
        alice.wait(ids[2], "running", timeout=30)
        time.sleep(1.0)
    finally:
        for wid in ids:
            (carol if wid == ids[-1] else alice).post(f"/workloads/{wid}/cancel")
    for wid in ids:
        (carol if wid == ids[-1] else alice).wait(wid, ("cancelled", "stopped"), timeout=60)
    usage = alice.get("/usage", params={"group_by": "team"}).json()
    [row] = [r for r in usage["rows"] if r["team"] == "a"]
    # three 1-CPU jobs for at least a second each; a CPU-hour costs 3600: 1 a CPU-second
    # (CPU-hours are shown to 4 places: 0.36 s)
    assert row["gpu_hours"] == 0 and row["cpu_hours"] > 0
    assert row["cost"] == pytest.approx(row["cpu_hours"] * 3600, abs=0.2)
    assert row["cost"] >= 3 * 0.99 and usage["cpu_hour_price"] == 3600.0
