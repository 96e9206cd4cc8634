"""Schedules on the real hub (fake GPUs, SQLite): the REST calls a user
makes, and a schedule firing every minute that runs exactly once per minute
across two ``kill -9`` of the service: one just before a firing (the service
is kept down for 6 s, so it is down when the firing is due: it runs once at
the restart, as a catch-up), one just after a firing (the restart must not
run it again).

It takes real minutes: a cron expression's smallest step is one minute and
the service reads the wall clock; a seconds-granular cron for tests only
would test another code path than the one users run. The clock-seam tests
(tests/test_schedules_service.py) cover daylight-saving changes and long
outages without sleeping; this one keeps to the two minute boundaries it
needs (one and a half minutes on average)."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import pytest
import requests

from gpuspawner.cli.common import parse_time as ts

from hub_harness import ADMIN_TOKEN, Hub, wait_for
from test_cli_client import run
from test_chaos import healthy_after, pid_alive

TEAMS = {"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 2}}}}
GROUPS = {"team-a": ["alice", "amy"], "team-b": ["bob"]}
# A firing found more than 3 s late is a catch-up (the default is 60 s): a
# restart across a firing then shows as one, and an on-time firing (the loop
# looks every 0.5 s) never does.
CONFIG = """
c.GpuHubService.schedule_check_interval = 0.5
c.GpuHubService.schedule_late_grace = 3
"""
JOB = {"command": [sys.executable, "-c", "print('tick')"], "gpus": 1, "pool": "default"}
# lena leads team a by the role `gpuhub up`'s leads make (hub/config.py lead_roles).
LEAD = """
c.JupyterHub.load_roles.append({"name": "gpuhub-lead-a", "users": ["lena"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-a"]})
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("schedules")), groups=GROUPS, teams=TEAMS, gpus=2,
            extra_service_config=CONFIG, extra_hub_config=LEAD)
    try:
        yield h.start()
    finally:
        h.stop()


def test_a_user_creates_runs_pauses_edits_and_deletes_a_schedule(hub):
    alice, bob = hub.client("alice"), hub.client("bob")
    r = alice.post("/schedules", json={"name": "nightly", "cron": "30 2 * * *",
                                       "timezone": "Europe/Berlin", "spec": JOB})
    assert r.status_code == 201, r.text
    sched = r.json()
    assert sched["id"].startswith("c") and sched["team"] == "a" and sched["user"] == "alice"
    assert sched["next_run_at"].endswith(("00:30:00Z", "01:30:00Z"))  # 02:30 CEST or CET
    assert r.headers["Location"].endswith(f"/schedules/{sched['id']}")
    assert [s["id"] for s in alice.get("/schedules").json()["schedules"]] == [sched["id"]]
    assert bob.get(f"/schedules/{sched['id']}").status_code == 404
    assert bob.get("/schedules").json()["schedules"] == []

    r = alice.post(f"/schedules/{sched['id']}/run")
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["schedule_id"] == sched["id"] and run["name"].startswith("nightly-")
    assert alice.wait(run["id"], "succeeded", 90)["exit_code"] == 0
    by_hand = alice.submit(command=["true"], gpus=0)["id"]
    listed = alice.get("/workloads", params={"schedule_id": sched["id"]}).json()["workloads"]
    assert [w["id"] for w in listed] == [run["id"]]
    unscheduled = alice.get("/workloads", params={"schedule_id": "none"}).json()["workloads"]
    assert by_hand in [w["id"] for w in unscheduled] and run["id"] not in [
        w["id"] for w in unscheduled]
    assert sched["last_error"] is None and sched["last_error_at"] is None

    paused = alice.post(f"/schedules/{sched['id']}/pause").json()
    assert paused["paused"] and paused["next_run_at"] is None
    resumed = alice.post(f"/schedules/{sched['id']}/resume").json()
    assert not resumed["paused"] and resumed["next_run_at"] == sched["next_run_at"]
    r = alice.request("PATCH", f"/schedules/{sched['id']}", json={"cron": "0 6 * * MON-FRI",
                                                                  "catch_up": "skip"})
    assert r.status_code == 200, r.text
    assert r.json()["cron"] == "0 6 * * MON-FRI" and r.json()["catch_up"] == "skip"
    shown = alice.get(f"/schedules/{sched['id']}").json()
    assert [(f["workload_id"], f["cause"], f["state"]) for f in shown["recent"]] == \
        [(run["id"], "manual", "succeeded")]
    r = alice.request("PATCH", f"/schedules/{sched['id']}", json={"cron": "0 6 * *"})
    assert r.status_code == 400 and r.json()["field"] == "cron", r.text

    assert alice.request("DELETE", f"/schedules/{sched['id']}").status_code == 204
    assert alice.get(f"/schedules/{sched['id']}").status_code == 404
    assert alice.workload(run["id"])["schedule_id"] == sched["id"]  # its workload stays


def kill9(hub, hold_port_until: float = 0.0) -> float:
    """kill -9 the service; the hub starts it again. Seconds until it is
    healthy. With ``hold_port_until`` (a time), the service's port is held
    till then, as a previous service still exiting would: the new one waits
    for it (``bind_wait_seconds``) before it touches the database."""
    old = hub.service_pid()
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    held = None
    while hold_port_until and held is None:
        try:  # free once the old process is gone; the new one needs > 1 s to get here
            held = socket.create_server(("127.0.0.1", hub.port + 2))
        except OSError:
            time.sleep(0.002)
    wait_for(lambda: not pid_alive(old), "the killed service gone", 10)
    if held is not None:
        sleep_until(hold_port_until)
        held.close()
    took = healthy_after(hub, t0)
    assert hub.service_pid() != old
    return took


def hhmm(iso: str) -> str:
    return iso[11:16]


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def test_every_minute_exactly_once_across_kill_9(hub, capsys):
    alice = hub.client("alice")
    # The schedule's first firing, m1, must be at least 8 s away (the first
    # kill comes 2 s before it): closer to a boundary, that one passes first.
    if 60 - time.time() % 60 < 8:
        sleep_until((int(time.time()) // 60 + 1) * 60 + 0.5)
    m1 = (int(time.time()) // 60 + 1) * 60
    r = alice.post("/schedules", json={"name": "tick", "cron": "* * * * *", "spec": JOB})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]

    def firings() -> list[dict]:
        return alice.get(f"/schedules/{sid}").json()["recent"][::-1]

    # 1. Down from 2 s before m1 to 4 s after: m1 runs once, at the restart.
    sleep_until(m1 - 2)
    assert [f for f in firings() if ts(f["scheduled_for"]) >= m1] == []
    restart_1 = kill9(hub, hold_port_until=m1 + 4)
    wait_for(lambda: len(firings()) >= 1, "the firing missed while down", 90)
    # 2. Killed just after m2 fired: the restart does not fire it again (a
    # restart's look for missed firings comes at once; 5 s more is ten looks).
    wait_for(lambda: len(firings()) >= 2, "the m2 firing", 75)
    restart_2 = kill9(hub)
    time.sleep(5)
    seen = firings()
    alice.request("DELETE", f"/schedules/{sid}")
    with capsys.disabled():
        print(f"\nrestarts after kill -9: {restart_1:.1f} s, {restart_2:.1f} s; firings: "
              + ", ".join(f"{hhmm(f['scheduled_for'])} {f['cause']} "
                          f"{ts(f['fired_at']) - ts(f['scheduled_for']):.2f} s late" for f in seen))
    assert [ts(f["scheduled_for"]) for f in seen] == [m1, m1 + 60], seen
    first, second = seen
    # Down at m1: run at the restart, later than schedule_late_grace: a catch-up.
    assert first["cause"] == "catch-up" and ts(first["fired_at"]) > m1 + 4
    # After that restart, m2 on time, by the cron.
    assert second["cause"] == "cron" and ts(second["fired_at"]) - m1 - 60 < 3
    mine = [w for w in alice.get("/workloads", params={"limit": 1000}).json()["workloads"]
            if w["schedule_id"] == sid]
    assert sorted(w["id"] for w in mine) == sorted(f["workload_id"] for f in seen)
    assert len({w["name"] for w in mine}) == 2
    for w in mine:
        assert alice.wait(w["id"], "succeeded", 90)["exit_code"] == 0


def test_the_gpuhub_schedule_commands(hub, capsys, monkeypatch):
    for name in ("GPUHUB_URL", "GPUHUB_TOKEN", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    alice = ["--url", f"{hub.url}/services/gpuhub", "--token", hub.token("alice")]
    rc, out, err = run(capsys, "schedule", "create", "report", *alice, "--cron", "0 6 * * MON-FRI",
                       "--timezone", "Europe/Paris", "--json", "--",
                       sys.executable, "-c", "print('weekly report')")
    assert rc == 0, err
    sid = json.loads(out)["id"]

    rc, out, err = run(capsys, "schedule", "ls", *alice)
    row = [line for line in out.splitlines() if line.startswith(sid)]
    assert rc == 0 and row and "0 6 * * MON-FRI  Europe/Paris  in " in row[0], out

    rc, out, err = run(capsys, "schedule", "run", sid, *alice)
    assert rc == 0, err
    wid = out.strip()
    assert hub.client("alice").wait(wid, "succeeded", 90)["schedule_id"] == sid
    rc, out, _ = run(capsys, "logs", *alice, wid)
    assert out == "weekly report\n"

    rc, out, _ = run(capsys, "schedule", "pause", sid, *alice)
    assert rc == 0 and "next run:  paused" in out
    rc, out, _ = run(capsys, "schedule", "resume", sid, *alice)
    assert rc == 0 and "next run:  20" in out
    rc, out, err = run(capsys, "schedule", "edit", sid, *alice, "--cron", "@hourly", "--gpus", "0")
    assert rc == 0 and "cron:      @hourly  (Europe/Paris)" in out, err
    shown = json.loads(run(capsys, "schedule", "show", sid, *alice, "--json")[1])
    assert shown["spec"]["gpus_per_node"] == 0 and shown["spec"]["command"][1:] == \
        ["-c", "print('weekly report')"]
    assert [(f["workload_id"], f["cause"]) for f in shown["recent"]] == [(wid, "manual")]

    rc, _, err = run(capsys, "schedule", "edit", sid, *alice, "--cron", "61 * * * *")
    assert rc == 1 and "cron: cron minute field: 61 is out of 0-59" in err
    rc, out, _ = run(capsys, "schedule", "rm", sid, *alice)
    assert rc == 0 and out == f"deleted {sid}\n"
    rc, _, err = run(capsys, "schedule", "show", sid, *alice)
    assert rc == 1 and f"no schedule {sid}" in err


def test_a_schedule_pauses_when_its_owner_leaves_the_team_and_says_so(hub):
    """amy's every-minute schedule; an admin takes amy out of team a (the
    hub's group); the next firing pauses it instead, and amy and lena (a
    lead of team a) are told."""
    amy, admin = hub.client("amy"), hub.client("root-admin")
    if time.time() % 60 > 50:  # no firing between the schedule's start and amy leaving
        time.sleep(61 - time.time() % 60)
    r = amy.post("/schedules", json={"name": "amy-minutely", "cron": "* * * * *", "spec": JOB})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = requests.delete(f"{hub.url}/hub/api/groups/team-a/users", json={"users": ["amy"]},
                        headers={"Authorization": f"token {ADMIN_TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text
    try:
        shown = wait_for(lambda: (lambda s: s if s["paused"] else None)(
            admin.get(f"/schedules/{sid}").json()), "the schedule to pause", timeout=90)
        assert shown["last_error"] == "paused: amy is no longer in team a"
        assert shown["next_run_at"] is None
        assert admin.get("/workloads", params={"schedule_id": sid}).json()["workloads"] == []
        for user, whose in (("amy", "your schedule"), ("lena", "amy's schedule")):
            notices = admin.get("/notices", params={"user": user}).json()["notices"]
            assert [n["message"] for n in notices if n["kind"] == "schedule-paused"] == [
                f"{whose} amy-minutely ({sid}) of team a is paused: amy is no longer in team a. "
                f"It fires again once resumed."], notices
        (entry,) = admin.get("/audit", params={"target": sid, "action": "schedule-auto-pause"}
                             ).json()["entries"]
        assert entry["detail"]["told"] == ["amy", "lena"]
    finally:
        requests.post(f"{hub.url}/hub/api/groups/team-a/users", json={"users": ["amy"]},
                      headers={"Authorization": f"token {ADMIN_TOKEN}"}, timeout=10)
        admin.request("DELETE", f"/schedules/{sid}")
