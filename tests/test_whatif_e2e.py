"""What-if previews against a real hub (one for the module): two teams on
four fake GPUs, each team's quota binding (no borrowing).

- The history exports as a trace and a cluster file that ``gpuhub
  simulate`` replays; pseudonymised, no real name is in them.
- Generated work runs (jobs of seconds, the clock as it is); the admin
  previews shifting 2 GPUs of quota from team a to team b; the predicted
  change of each team's mean wait has the sign a real rerun of the same work
  under the new quota shows, and the predicted wait is within the preview's
  own stated margin of the rerun's. Apply saved the change through the
  quota path, audited with the preview's figures.
- A team lead previews their own team's settings only, sees only their
  team's figures, and cannot apply.
- While a long preview (a history of 6,000 jobs, written into the service's
  database as the engine records them) runs, the API answers at once; the
  preview reports progress and a cancel ends its worker process.
- In Chromium: edit the quota fields, Preview, watch it finish, read the
  table, charts and fidelity, Apply (screenshot docs/screenshots/admin-whatif.png).
"""
from __future__ import annotations

import csv
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime

import pytest
from playwright import sync_api

from gpuspawner.scheduler.policy import get_policy
from gpuspawner.sim.simulate import simulate
from gpuspawner.sim.trace import TraceJob
from gpuspawner.store import Attempt, Store, WorkloadRow
from gpuspawner.sim.cluster import parse_cluster
from hub_harness import Hub, wait_for
from test_spawn_browser import login, shot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPUHUB = os.path.join(os.path.dirname(sys.executable), "gpuhub")
GROUPS = {"team-a": ["alice"], "team-b": ["bob", "carol"]}
TEAMS = {"a": {"quotas": {"default": {"nominal": 3, "borrowing_limit": 0}}},
         "b": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 0}}}}
LEAD = """
c.JupyterHub.load_roles.append({"name": "lead-b", "users": ["carol"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-b"]})
"""
USERS = {"a": "alice", "b": "bob"}
# The generated work: (seconds after the start, team, run time). Each team
# submits a 3-5 s job every 2 s; a's three GPUs keep up, b's one does not.
WORK = [(2.0 * i, team, 3 + i % 3) for i in range(8) for team in "ab"]
SHIFT = {"team.a.default.nominal": 1, "team.b.default.nominal": 3}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("whatif")), groups=GROUPS, teams=TEAMS, gpus=4,
            extra_hub_config=LEAD)
    try:
        yield h.start()
    except BaseException:
        print(h.tail(80))
        raise
    finally:
        h.stop()


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def run_work(hub: Hub) -> tuple[float, dict[str, float]]:
    """Submit WORK at its times; when all of it ended, each team's mean
    wait (submission to start)."""
    start = time.time()
    ids: dict[str, list[str]] = {"a": [], "b": []}
    for offset, team, run_s in WORK:
        time.sleep(max(0.0, start + offset - time.time()))
        w = hub.client(USERS[team]).submit(command=["sleep", str(run_s)], gpus=1,
                                           name=f"work-{run_s}s")
        ids[team].append(w["id"])
    admin = hub.client("root-admin")
    waits = {}
    for team, wids in ids.items():
        done = [admin.wait(wid, ("succeeded", "failed"), timeout=240) for wid in wids]
        assert {w["state"] for w in done} == {"succeeded"}, done
        waits[team] = statistics.mean(seconds(w["started_at"]) - seconds(w["submitted_at"])
                                      for w in done)
    return start, waits


@pytest.fixture(scope="module")
def history(hub):
    """The work run once under the declared quotas (a 3 GPUs, b 1)."""
    for user in USERS.values():  # their accounts exist before the work's clock starts
        hub.client(user).wait(hub.client(user).submit(command=["true"], gpus=0)["id"],
                              "succeeded")
    start, waits = run_work(hub)
    return {"since": start, "waits": waits}


def preview(hub: Hub, who: str, since, changes: dict, timeout: float = 120) -> dict:
    client = hub.client(who)
    r = client.post("/whatif", json={"since": str(since), "set": changes})
    assert r.status_code == 202, r.text
    pid = r.json()["id"]
    return wait_for(lambda: (v := client.get(f"/whatif/{pid}").json())["state"] != "running"
                    and v, "the preview to end", timeout)


def test_the_history_exports_as_a_trace_the_simulator_replays(hub, history, tmp_path):
    admin = hub.client("root-admin")
    doc = admin.get("/history/trace", params={"since": str(history["since"]),
                                              "format": "json"}).json()
    assert sorted((j["team"], j["duration_s"] // 1) for j in doc["jobs"]) == sorted(
        (team, float(run_s)) for _, team, run_s in WORK)
    assert doc["left_out"] == {} and {j["gpu_type"] for j in doc["jobs"]} == {"default"}
    cluster = parse_cluster(doc["cluster"])
    assert cluster.capacity == {"default": 4}
    assert {t.name: t.quota("default").nominal for t in cluster.teams} == {"a": 3, "b": 1}
    r = admin.get("/history/trace", params={"since": str(history["since"])})
    assert r.headers["Content-Type"].startswith("text/csv")
    assert len(list(csv.DictReader(r.text.splitlines()))) == len(WORK)
    # as a plain member: refused; a period beyond the longest: refused, naming it
    assert hub.client("bob").get("/history/trace", params={"since": "1d"}).status_code == 403
    r = admin.get("/history/trace", params={"since": "400d"})
    assert r.status_code == 400 and r.json()["field"] == "since", r.text
    # the CLI writes both files, pseudonymised, and gpuhub simulate replays them
    out = tmp_path / "trace.csv"
    env = {**os.environ, "GPUHUB_URL": hub.url, "GPUHUB_TOKEN": hub.token("root-admin")}
    run = subprocess.run([GPUHUB, "trace", "export", "--since", str(history["since"]),
                          "--pseudonymise", str(out)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    files = out.read_text() + (tmp_path / "trace.cluster.yaml").read_text()
    for real in ("alice", "bob", hub.client("root-admin").get("/pools").json()["pools"][0]
                 ["nodes"][0]["name"]):
        assert real not in files
    assert "team-1" in files and "team-2" in files
    replay = subprocess.run([GPUHUB, "simulate", str(out), "--cluster",
                             str(tmp_path / "trace.cluster.yaml"), "--policy", "gpuhub",
                             "--json"], capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["finished"] == len(WORK)


def test_a_team_lead_previews_their_own_team_only(hub, history):
    carol = hub.client("carol")
    r = carol.post("/whatif", json={"since": "1d", "set": SHIFT})
    assert r.status_code == 400 and r.json()["field"] == "set.team.a.default.nominal", r.text
    assert "own team's settings only (b)" in r.json()["error"]
    assert hub.client("bob").post("/whatif", json={
        "since": "1d", "set": {"team.b.weight": 2}}).status_code == 403
    view = preview(hub, "carol", history["since"], {"team.b.default.nominal": 2})
    assert view["state"] == "done", view
    assert set(view["result"]["proposed"]["teams"]) == {"b"}
    assert "applying changes quotas, which needs the scope custom:gpuhub:admin" in \
        view["apply_refusal"]
    r = carol.post(f"/whatif/{view['id']}/apply")
    assert r.status_code == 403, r.text
    # an admin sees every team of it (and may apply it)
    seen = hub.client("root-admin").get(f"/whatif/{view['id']}").json()
    assert set(seen["result"]["proposed"]["teams"]) == {"a", "b"} and seen["apply_refusal"] is None
    assert hub.client("alice").get(f"/whatif/{view['id']}").status_code == 404
    # the same from her shell: the panel's table, her team's row only
    env = {**os.environ, "GPUHUB_URL": hub.url, "GPUHUB_TOKEN": hub.token("carol")}
    run = subprocess.run([GPUHUB, "simulate", "--from-history", str(history["since"]),
                          "--set", "team.b.default.nominal=2"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [line.split()[0] for line in run.stdout.splitlines()[3:] if line.strip()]
    assert rows[:2] == ["TEAM", "b"] and "a" not in rows[:rows.index("fidelity:")], run.stdout


def write_long_history(hub: Hub, jobs: int = 6000) -> None:
    """Nine days of finished work, 20 to 29 days ago, as the engine records
    it (a workload row and its attempt), from a replay of generated jobs
    under the module's quotas."""
    rng = random.Random(24)
    span, mean_s = 9 * 86400, 0.8 * 4 * 9 * 86400 / jobs
    trace = sorted((TraceJob(f"old{i:05d}", rng.choice("aab"), "old-user", rng.uniform(0, span),
                             1, float(round(rng.expovariate(1 / mean_s)) + 1))
                    for i in range(jobs)), key=lambda j: j.submit_time_s)
    cluster = parse_cluster({"pools": [{"name": "default", "nodes": 1, "gpus_per_node": 4}],
                             "teams": [{"name": t, "quota": {"default": q["quotas"]["default"]}}
                                       for t, q in TEAMS.items()]})
    runs = {r.job_id: r for r in simulate(trace, cluster, get_policy("gpuhub")).records}
    base = time.time() - 29 * 86400
    store = Store(hub.db_url or f"sqlite:///{hub.data_dir}/gpuhub.sqlite", run_migrations=False)
    try:
        with store.transaction() as s:
            for j in trace:
                r = runs[j.job_id]
                s.add(WorkloadRow(id=j.job_id, kind="job", team=j.team, user=j.user, pool="default",
                                  gpus_per_node=1, num_nodes=1, priority="batch", spec={},
                                  state="succeeded", reason="exited with code 0", attempt=0,
                                  preempted_by=[], submitted_at=base + j.submit_time_s,
                                  started_at=base + r.first_start, finished_at=base + r.finish,
                                  exit_code=0))
            s.flush()
            for j in trace:
                r = runs[j.job_id]
                s.add(Attempt(workload_id=j.job_id, number=0, state="succeeded", gpus=1,
                              placement=[], started_at=base + r.first_start,
                              ended_at=base + r.finish, exit_code=0))
    finally:
        store.close()


def worker_pids(hub: Hub) -> list[int]:
    """The service's what-if worker processes."""
    service = hub.service_pid()
    out = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == service and b"gpuspawner.sim.whatif_worker" in cmd:
            out.append(pid)
    return out


def test_the_api_answers_while_a_long_preview_runs_and_cancel_ends_it(hub, history):
    write_long_history(hub)
    admin = hub.client("root-admin")
    r = admin.post("/whatif", json={"since": "30d", "set": SHIFT})
    assert r.status_code == 202, r.text
    pid = r.json()["id"]
    progress, answers = [], []
    deadline = time.monotonic() + 120
    while len(progress) < 2 or progress[-1] <= progress[0]:
        assert time.monotonic() < deadline, f"no progress: {progress}"
        began = time.monotonic()
        assert admin.get("/me").status_code == 200
        assert admin.get("/workloads", params={"limit": 5}).status_code == 200
        answers.append(time.monotonic() - began)
        view = admin.get(f"/whatif/{pid}").json()
        assert view["state"] == "running", view
        progress.append(view["progress"])
        time.sleep(0.3)
    assert worker_pids(hub), "the replay runs in a process of its own"
    print(f"while the preview ran: {len(answers)} rounds of 2 API calls, slowest "
          f"{max(answers) * 1000:.0f} ms, median {statistics.median(answers) * 1000:.0f} ms; "
          f"progress {progress[0]:.2f} -> {progress[-1]:.2f}")
    assert max(answers) < 2.0, answers
    r = admin.post(f"/whatif/{pid}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    wait_for(lambda: not worker_pids(hub), "the worker process to end", 10)
    assert admin.get(f"/whatif/{pid}").json()["state"] == "cancelled"
    assert admin.post(f"/whatif/{pid}/cancel").status_code == 409
    assert admin.post(f"/whatif/{pid}/apply").status_code == 409


def test_the_preview_predicts_the_wait_change_of_a_real_rerun(hub, history):
    view = preview(hub, "root-admin", history["since"], SHIFT)
    assert view["state"] == "done", view
    r = view["result"]
    fid = r["fidelity"]
    for team, actual in history["waits"].items():
        assert fid["teams"][team]["actual_mean_wait_s"] == pytest.approx(actual, abs=0.01)
    admin = hub.client("root-admin")
    applied = admin.post(f"/whatif/{view['id']}/apply")
    assert applied.status_code == 200 and applied.json()["applied"] == ["a", "b"], applied.text
    quotas = {t["name"]: t["quotas"]["default"]["nominal"] for t in admin.get("/teams").json()["teams"]}
    assert quotas == {"a": 1, "b": 3}
    _, rerun = run_work(hub)
    lines = []
    for team in "ab":
        cur, new = r["current"]["teams"][team], r["proposed"]["teams"][team]
        predicted, real = new["mean_wait_s"] - cur["mean_wait_s"], rerun[team] - history["waits"][team]
        lines.append(f"team {team}: mean wait {history['waits'][team]:.2f} s happened, "
                     f"{cur['mean_wait_s']:.2f} s replayed; proposed {new['mean_wait_s']:.2f} s "
                     f"± {new['margin_s']:.2f} s, rerun {rerun[team]:.2f} s; change predicted "
                     f"{predicted:+.2f} s, real {real:+.2f} s")
        assert (predicted > 0) == (real > 0) == (team == "a"), lines
        assert abs(new["mean_wait_s"] - rerun[team]) <= new["margin_s"], lines
    print("\n".join(lines) + f"\nutilisation error {fid['utilisation_error_points']:+.1f} points; "
          f"start lag {r['start_lag']}; run jitter {r['run_jitter_s']:.2f} s")
    # the change is in the audit log with the preview's figures
    entries = admin.get("/audit", params={"action": "set-team", "limit": 2}).json()["entries"]
    assert sorted(e["target"] for e in entries) == ["a", "b"]
    for e in entries:
        assert e["detail"]["preview"] == view["id"]
        figures = e["detail"]["preview_figures"]["teams"][e["target"]]
        assert figures["mean_wait_s_proposed"] == r["proposed"]["teams"][e["target"]]["mean_wait_s"]
    again = admin.post(f"/whatif/{view['id']}/apply")
    assert again.status_code == 409 and "was applied by root-admin" in again.json()["error"]


def test_the_panel_previews_and_applies_a_change(hub, history, browser, tmp_path):
    """After the rerun a holds 1 GPU and b 3: the admin previews giving them
    back on the Teams page, reads the preview and applies it."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    login(page, hub, "root-admin")
    page.goto(f"{hub.url}/services/gpuhub/admin/teams")
    page.locator('#team-a input[name="default.nominal"]').fill("3")
    page.locator('#team-b input[name="default.nominal"]').fill("1")
    assert page.locator("#whatif-set").input_value().splitlines() == [
        "team.a.default.nominal=3", "team.b.default.nominal=1"]
    page.select_option("#whatif-since", "1d")
    with page.expect_navigation():
        page.click("#whatif-preview")
    assert "/admin/whatif/p" in page.url, page.locator("#error").all_inner_texts()
    sync_api.expect(page.locator("#whatif")).to_have_attribute("data-state", "done", timeout=60_000)
    table = page.locator("#whatif-table")
    assert table.locator('tr[data-team="a"] .change').inner_text().startswith("-")
    assert table.locator('tr[data-team="b"] .change').inner_text().startswith("+")
    # a line (or a dot, for a lone bucket) per team and side
    assert page.locator("#whatif-waits-chart svg").locator("polyline, circle").count() >= 4
    assert page.locator("#whatif-fidelity tr[data-team]").count() == 2
    # the day replayed ran partly under the quotas the rerun changed: said so
    assert "Quotas or weights changed during the period" in \
        page.locator("#whatif-assumptions").inner_text()
    shot(page, tmp_path, "admin-whatif.png")
    with page.expect_navigation():
        page.click("#whatif-apply")
    assert "applied: team(s) a, b saved" in page.locator("#done").inner_text()
    assert page.locator('#team-a input[name="default.nominal"]').input_value() == "3"
    assert page.locator("#whatif-recent li").first.inner_text().endswith("by root-admin")
    context.close()
    # the lead: her team's fields only, Preview, and no Apply
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    lead = context.new_page()
    lead.set_default_timeout(60_000)
    login(lead, hub, "carol")
    lead.goto(f"{hub.url}/services/gpuhub/admin/teams")
    assert lead.locator("#team-a").count() == 0
    lead.locator('#team-b input[name="default.nominal"]').fill("2")
    with lead.expect_navigation():
        lead.click("#whatif-preview")
    sync_api.expect(lead.locator("#whatif")).to_have_attribute("data-state", "done", timeout=60_000)
    assert lead.locator("#whatif-apply").count() == 0
    assert "needs the scope custom:gpuhub:admin" in lead.locator("#whatif-no-apply").inner_text()
    assert lead.locator("#whatif-table tr[data-team]").count() == 1
    context.close()
