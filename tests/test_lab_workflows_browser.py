"""Sweeps and schedules in a real browser (issue 21), on one real hub with
four fake GPUs: alice opens a notebook with a parameters cell, submits a
4-task sweep over it with at most 2 running from the Submit dialog's Sweep
tab, sees an "evaluate" job wait for the sweep, the sweep's grouped row in
the Jobs panel progress to done and its results table (the best task
marked, each task's output notebook a click away); then makes a schedule
from the Schedule tab, pauses, resumes and runs it now. A sweep of failing
tasks is cancelled from its row and its tasks retried.

Chromium is Debian's (/usr/bin/chromium). Screenshots of the Sweep tab, the
grouped Jobs panel with its results and the Schedules list are kept in
docs/screenshots/lab-*.png for docs/lab-extension.md.
"""
from __future__ import annotations

import os
import re

from playwright import sync_api

from hub_harness import Hub
from test_lab_browser import dialog_form, hub_session, lab_page, quiet_news, write_notebook
from test_spawn_browser import SLOW_MS, shot

TUNE = """\
import time
from IPython.display import display
time.sleep(step_seconds)
loss = round(abs(lr - 0.01) * 100 + epochs, 6)
display({"application/scrapbook.scrap.json+json":
         {"name": "loss", "data": loss, "encoder": "json", "version": 1}},
        metadata={"scrapbook": {"name": "loss", "data": True, "display": False}}, raw=True)
print(f"lr={lr} epochs={epochs} loss={loss}")
"""


def open_submit(page, tab: str):
    """The Submit dialog of the open notebook (its toolbar button), on ``tab``."""
    page.locator(".lm-TabBar-tabLabel", has_text=re.compile(r"^tune\.ipynb$")).click()
    page.locator(".jp-NotebookPanel:visible .gpuhub-SubmitButton").first.click(timeout=SLOW_MS)
    form = dialog_form(page, ".gpuhub-SubmitForm")
    form.locator(f'.gpuhub-SubmitForm-tab[data-mode="{tab}"]').click()
    sync_api.expect(form).to_have_attribute("data-mode", tab)
    return form


def widen_sidebar(page, width: int = 560) -> None:
    """The left sidebar as wide as a results table wants (the screenshots)."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(width, box["y"] + 200, steps=5)
    page.mouse.up()


def test_sweep_and_schedule_from_the_submit_dialog_and_the_jobs_panel(tmp_path):
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"]},
              teams={"a": {"quotas": {"default": {"nominal": 4, "borrowing_limit": 0}}}}, gpus=4)
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    write_notebook(os.path.join(workspace, "tune.ipynb"),
                   'lr = 0.1\nepochs = 1\nmodel = "mlp"\nstep_seconds = 4', TUNE, "# Tune")
    quiet_news(workspace)
    expect = sync_api.expect
    with hub_session(hub) as pids, lab_page(hub, "alice", pids,
                                            timezone_id="Europe/Paris") as page:
        alice = hub.client("alice")
        page.goto(f"{hub.url}/user/alice/lab/tree/tune.ipynb")

        # 1. The Sweep tab lists the notebook's parameters; values typed as
        # each default's type; "N tasks" follows what is typed.
        form = open_submit(page, "sweep")
        grid = form.locator(".gpuhub-SweepGrid tbody tr")
        expect(grid).to_have_count(4)
        assert grid.evaluate_all("rows => rows.map(r => r.dataset.param)") == [
            "lr", "epochs", "model", "step_seconds"]
        count = form.locator(".gpuhub-SweepCount")
        accept = page.locator(".jp-Dialog-button.jp-mod-accept")
        form.locator('input[name="sweep-epochs"]').fill("1, two")
        expect(count).to_have_text('epochs: "two" is not a whole number (the default is one)')
        form.locator('input[name="sweep-epochs"]').fill("1, 2")
        expect(count).to_have_text("2 tasks")
        form.locator('input[name="sweep-lr"]').fill("0.1, 0.01")
        expect(count).to_have_text("4 tasks")
        expect(accept).to_have_text("Submit 4 tasks")
        form.locator('input[name="gpus"]').fill("1")
        form.locator('input[name="maxRunning"]').fill("2")
        form.locator('input[name="metricName"]').fill("loss")
        form.locator('select[name="metricGoal"]').select_option("min")
        page.locator(".jp-Dialog-body").evaluate("b => b.scrollTop = 0")
        shot(page, tmp_path, "lab-sweep-tab.png")
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and "/gpuhub/sweeps?" in r.url) as posted:
            accept.click()
            expect(page.locator(".gpuhub-SubmitForm")).to_have_count(0)
        assert posted.value.status == 201, posted.value.text()
        sweep = posted.value.json()
        assert sweep["total"] == 4 and sweep["max_running"] == 2
        toast = page.locator(".jp-toast-message").filter(
            has_text=f"Sweep tune submitted: 4 tasks ({sweep['id']})")
        expect(toast).to_have_count(1, timeout=15000)  # slow to show on a loaded host

        # 2. An "evaluate" job waits for the whole sweep: the panel says so.
        evaluate = alice.submit(name="evaluate", command=["python", "-c", "print('best')"],
                                gpus=1, after=[{"id": sweep["id"], "condition": "ok"}])
        waiting = page.locator(f'.gpuhub-Job[data-job-id="{evaluate["id"]}"]')
        expect(waiting).to_have_attribute("data-state", "waiting", timeout=30_000)
        expect(waiting.locator(".gpuhub-Job-after")).to_have_text(f"after {sweep['id']} (ok)")
        expect(waiting.locator(".gpuhub-Job-detail")).to_contain_text(sweep["id"])

        # 3. One row for the sweep's four tasks: two run at once (the cap),
        # then all four succeed.
        row = page.locator(f'.gpuhub-Sweep[data-sweep-id="{sweep["id"]}"]')
        expect(row).to_have_count(1)
        expect(page.locator(".gpuhub-Job:not(.gpuhub-Sweep)").filter(has_text="tune-")).to_have_count(0)
        running = row.locator('.gpuhub-Sweep-segment[data-kind="running"]')
        expect(running).to_have_attribute("data-count", "2", timeout=SLOW_MS)
        expect(row.locator('.gpuhub-Sweep-segment[data-kind="queued"]')).to_have_attribute(
            "data-count", "2")
        expect(row.locator(".gpuhub-Sweep-progress")).to_contain_text("0/4 done")
        running_now = [w for w in alice.get("/workloads", params={"state": "running"})
                       .json()["workloads"] if w.get("sweep_id") == sweep["id"]]
        assert len(running_now) <= 2, running_now
        expect(row).to_have_attribute("data-state", "succeeded", timeout=SLOW_MS)
        expect(row.locator(".gpuhub-Sweep-progress")).to_have_text("4/4 done")
        expect(row.locator('.gpuhub-Sweep-segment[data-kind="succeeded"]')).to_have_attribute(
            "data-count", "4")
        expect(row).to_contain_text("best loss 1 (#2)")
        expect(waiting).to_have_attribute("data-state", re.compile("queued|running|succeeded"),
                                          timeout=60_000)

        # 4. Opened: the results table, parameters → loss, the best marked.
        widen_sidebar(page)
        row.locator(".gpuhub-Sweep-toggle").click()
        results = row.locator(".gpuhub-Sweep-results tbody tr")
        expect(results).to_have_count(4)
        expect(results.nth(2)).to_have_class("gpuhub-mod-best")
        expect(results.nth(2)).to_contain_text("★ best")
        assert [results.nth(i).locator(".gpuhub-Sweep-metric").inner_text()
                for i in range(4)] == ["10", "11", "1", "2"]
        expect(row.locator(".gpuhub-Sweep-results thead")).to_contain_text("lr")
        expect(row.locator(".gpuhub-Sweep-output")).to_have_count(4)
        shot(page, tmp_path, "lab-sweep-results.png")
        # The best task's executed notebook opens from its link.
        results.nth(2).locator(".gpuhub-Sweep-output").click()
        output = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output")
        expect(output.filter(has_text="lr=0.01 epochs=1 loss=1.0")).not_to_have_count(
            0, timeout=60_000)

        # 5. Cancel all and retry failed, from the sweep's row.
        flaky = alice.post("/sweeps", json={
            "name": "flaky", "grid": {"n": [1, 2]},
            "template": {"command": ["sh", "-c", "sleep 30; exit 1"], "gpus": 1}}).json()
        flaky_row = page.locator(f'.gpuhub-Sweep[data-sweep-id="{flaky["id"]}"]')
        expect(flaky_row.get_by_role("button", name="Cancel all")).to_be_visible(timeout=30_000)
        flaky_row.get_by_role("button", name="Cancel all").click()
        page.locator(".jp-Dialog-button.jp-mod-warn").click()  # confirmed
        expect(flaky_row).to_have_attribute("data-state", "cancelled", timeout=30_000)
        expect(flaky_row.locator('.gpuhub-Sweep-segment[data-kind="failed"]')).to_have_attribute(
            "data-count", "2")
        before = {t["workload_id"] for t in alice.get(f"/sweeps/{flaky['id']}").json()["tasks"]}
        flaky_row.get_by_role("button", name="Retry failed").click()
        expect(flaky_row).to_have_attribute("data-state", "running", timeout=30_000)
        after = {t["workload_id"] for t in alice.get(f"/sweeps/{flaky['id']}").json()["tasks"]}
        assert not before & after, (before, after)

        # 6. The Schedule tab: a shortcut becomes the cron expression; the
        # time zone is the browser's.
        form = open_submit(page, "schedule")
        assert form.locator('input[name="timezone"]').input_value() == "Europe/Paris"
        form.locator('select[name="cronKind"]').select_option("weekdays")
        form.locator('input[name="cronTime"]').fill("07:30")
        expect(form.locator('input[name="cronCustom"]')).to_have_value("30 7 * * 1-5")
        form.locator('input[name="scheduleName"]').fill("nightly-tune")
        form.locator('input[name="gpus"]').fill("1")
        expect(accept).to_have_text("Create schedule")
        # A bad custom expression: the service's refusal, next to the field.
        form.locator('select[name="cronKind"]').select_option("custom")
        form.locator('input[name="cronCustom"]').fill("61 * * * *")
        accept.click()
        form = page.locator(".gpuhub-SubmitForm")
        expect(form.locator('.gpuhub-Field-invalid[data-field="cronCustom"]')).to_have_count(1)
        expect(form.locator('[data-field="cronCustom"] .gpuhub-Field-problem')).not_to_be_empty()
        form.locator('select[name="cronKind"]').select_option("weekdays")
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and "/gpuhub/schedules?" in r.url) as posted:
            accept.click()
            expect(page.locator(".gpuhub-SubmitForm")).to_have_count(0)
        assert posted.value.status == 201, posted.value.text()
        schedule = posted.value.json()
        assert (schedule["cron"], schedule["timezone"]) == ("30 7 * * 1-5", "Europe/Paris")

        # 7. The Schedules section: when it runs next; pause, resume, run now.
        item = page.locator(f'.gpuhub-Schedule[data-schedule-id="{schedule["id"]}"]')
        expect(item).to_have_count(1, timeout=30_000)
        expect(item.locator(".gpuhub-Schedule-cron")).to_have_text(
            "weekdays at 07:30 (Europe/Paris)")
        expect(item.locator(".gpuhub-Schedule-next")).to_contain_text("next in")
        expect(item.locator(".gpuhub-Schedule-last")).to_have_text("not run yet")
        item.get_by_role("button", name="Pause").click()
        expect(item).to_have_attribute("data-paused", "true")
        expect(item.locator(".gpuhub-Schedule-next")).to_have_text("paused")
        assert alice.get(f"/schedules/{schedule['id']}").json()["paused"] is True
        item.get_by_role("button", name="Resume").click()
        expect(item).to_have_attribute("data-paused", "false")
        expect(item.locator(".gpuhub-Schedule-next")).to_contain_text("next in")
        item.get_by_role("button", name="Run now").click()
        expect(page.locator(".jp-toast-message").filter(
            has_text="Schedule nightly-tune ran now: job")).to_have_count(1)
        expect(item.locator(".gpuhub-Schedule-last")).to_contain_text(
            re.compile(r"last run .* ago: (queued|running|succeeded)"), timeout=30_000)
        made = alice.get(f"/schedules/{schedule['id']}").json()["last_workload_id"]
        expect(page.locator(f'.gpuhub-Job[data-job-id="{made}"]')).to_have_count(1)

        # 8. Edit…: a time zone the service does not know is refused next to
        # its field, the dialog keeps what was typed; then saved.
        item.get_by_role("button", name="Edit…").click()
        edit = page.locator(".gpuhub-ScheduleEdit")
        expect(edit.locator('input[name="cron"]')).to_have_value("30 7 * * 1-5")
        edit.locator('input[name="cron"]').fill("0 6 * * 1")
        expect(edit.locator('[data-field="cron"] .gpuhub-Field-hint')).to_have_text(
            "weekly on Monday at 06:00")
        edit.locator('input[name="timezone"]').fill("Mars/Olympus")
        accept.click()
        edit = page.locator(".gpuhub-ScheduleEdit")
        expect(edit.locator('[data-field="timezone"] .gpuhub-Field-problem')).not_to_be_empty()
        expect(edit.locator('input[name="cron"]')).to_have_value("0 6 * * 1")
        edit.locator('input[name="timezone"]').fill("UTC")
        with page.expect_response(lambda r: r.request.method == "PATCH") as patched:
            accept.click()
        assert patched.value.status == 200, patched.value.text()
        expect(page.locator(".gpuhub-ScheduleEdit")).to_have_count(0)
        expect(item.locator(".gpuhub-Schedule-cron")).to_have_text("weekly on Monday at 06:00 (UTC)")
        saved = alice.get(f"/schedules/{schedule['id']}").json()
        assert (saved["cron"], saved["timezone"], saved["name"]) == ("0 6 * * 1", "UTC",
                                                                    "nightly-tune")
        page.locator(".gpuhub-JobsPanel").evaluate("p => p.scrollTop = 0")
        shot(page, tmp_path, "lab-schedules.png")
