"""The lab extension in a real browser: alice logs in to a real JupyterHub,
opens a notebook in JupyterLab, submits it as a job with 2 fake GPUs from the
notebook toolbar, watches it wait behind her teammate's job, run and succeed
in the Jobs panel (with notifications and the quota in the status bar), opens
its log and its executed notebook, and downloads its outputs.

Chromium is Debian's (/usr/bin/chromium). Screenshots of the form and the
Jobs panel are kept in docs/screenshots/lab-*.png for docs/lab-extension.md.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import time
import zipfile

import requests
from playwright import sync_api

import notebooks
from hub_harness import Hub
from test_spawn_browser import (CHROMIUM, CHROMIUM_ARGS, SLOW_MS, kill_leftover_servers, login,
                                server_pids, server_state, shot, stop_servers, wait_for)

TRAIN = """\
import os, time
print(f"training {epochs} epochs of {model} on GPUs {os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
for epoch in range(epochs):
    time.sleep(step_seconds)
    print(f"epoch {epoch + 1}/{epochs} done", flush=True)
with open(os.path.join(os.environ["OUTPUT_DIR"], "metrics.txt"), "w") as f:
    f.write(f"epochs={epochs}\\n")
"""
HOLD = "import time; time.sleep(600)"


def write_notebook(path: str, parameters: str = 'epochs = 1\nmodel = "resnet"\nstep_seconds = 2',
                   code: str = TRAIN, title: str = "# Train") -> None:
    """The browser tests' notebook: a title, a cell tagged ``parameters`` and the code."""
    notebooks.write_notebook(path, parameters, code, title)


def quiet_news(workspace: str) -> None:
    """No "official Jupyter news?" toast over the screenshots (the server's
    HOME is the workspace)."""
    news = os.path.join(workspace, ".jupyter", "lab", "user-settings", "@jupyterlab",
                        "apputils-extension", "notification.jupyterlab-settings")
    os.makedirs(os.path.dirname(news))
    with open(news, "w") as f:
        f.write('{"fetchNews": "false"}')


@contextlib.contextmanager
def hub_session(hub: Hub, users=("alice",)):
    """The hub started; the tail of its log printed when the test fails; the
    hub, the users' servers and what they left stopped by PID afterwards.
    Yields the set of server PIDs to collect."""
    pids: set[int] = set()
    try:
        hub.start()
        yield pids
    except BaseException:
        if hub.proc is not None:
            print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        if hub.proc is not None and hub.proc.poll() is None:
            stop_servers(hub, users)
        hub.stop()
        kill_leftover_servers(hub, pids)


@contextlib.contextmanager
def lab_page(hub: Hub, user: str, pids: set[int], **context_options):
    """The user's server started (no GPUs) and Chromium logged in to the hub
    through its form, as that user."""
    assert os.path.exists(CHROMIUM), (f"no Chromium at {CHROMIUM}: `make test` installs Debian's "
                                      f"chromium package (apt-get install chromium)")
    r = requests.post(f"{hub.url}/hub/api/users/{user}/server", json={"gpus": 0}, timeout=30,
                      headers={"Authorization": f"token {hub.token(user)}"})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: (server_state(hub, user) or {}).get("ready"), 120,
             f"{user}'s server to be ready")
    pids |= server_pids(hub)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900},
                                          **context_options)
            context.set_default_timeout(60_000)
            context.set_default_navigation_timeout(SLOW_MS)
            page = context.new_page()
            calls = GpuHubCalls(page)
            login(page, hub, user)
            try:
                yield page
            except BaseException:
                report_failure(page, hub, user, calls)
                raise
            pids |= server_pids(hub)
            context.close()
        finally:
            browser.close()


def dialog_form(page, selector: str, focus: str = 'input[name="name"]'):
    """The form of a dialog once JupyterLab has moved the focus into it. Typing
    before that races the dialog's own focus move: the text lands in whichever
    field holds the focus then (a job once went in named "trainmissing.ipynb")."""
    form = page.locator(selector)
    sync_api.expect(form).to_be_visible()
    sync_api.expect(form.locator(focus)).to_be_focused()
    return form


class GpuHubCalls:
    """The extension's calls to its server (/gpuhub/…), as the browser made
    them: when each ended, how, and how long it took; and those still
    waiting for an answer. For the report of a failed test."""

    def __init__(self, page) -> None:
        self.ended: list[str] = []
        self.sent: dict = {}
        page.on("request", self._sent)
        page.on("requestfinished",
                lambda r: self._ended(r, str(r.response().status) if r.response() else "?"))
        page.on("requestfailed", lambda r: self._ended(r, f"failed: {r.failure}"))

    @staticmethod
    def _name(request) -> str:
        return f"{request.method} {request.url.split('/gpuhub/', 1)[1][:80]}"

    def _sent(self, request) -> None:
        if "/gpuhub/" in request.url:
            self.sent[request] = time.monotonic()

    def _ended(self, request, outcome: str) -> None:
        if request in self.sent:
            took = time.monotonic() - self.sent.pop(request)
            self.ended.append(f"{time.strftime('%H:%M:%S')} {self._name(request)} -> {outcome} "
                              f"in {took:.2f}s")

    def report(self) -> str:
        now = time.monotonic()
        waiting = [f"{self._name(r)}: waiting for {now - t:.1f}s" for r, t in self.sent.items()]
        return "\n".join(["(last 40 ended)", *self.ended[-40:], "(still waiting)", *waiting])


def report_failure(page, hub: Hub, user: str, calls: GpuHubCalls) -> None:
    """What the user saw and what the service holds, printed when a step
    fails: a screenshot, the notifications, the extension's last calls, the
    calls still waiting for an answer, and the user's workloads."""
    try:
        path = os.path.join(hub.workdir, "failure.png")
        page.screenshot(path=path, full_page=True)
        print(f"---- screenshot: {path}")
        print("---- notifications:", page.locator(".jp-toast-message").all_inner_texts())
        print("---- dialogs:", page.locator(".jp-Dialog").all_inner_texts())
    except Exception as e:  # the page itself may be what broke
        print(f"---- the page could not be read: {e}")
    print(f"---- the extension's calls ----\n{calls.report()}")
    try:
        listed = hub.client("root-admin").get("/workloads", params={"user": user}).json()
        print("---- the service's workloads of", user, "----")
        for w in listed.get("workloads", []):
            print(w["id"], w["name"], w["state"], w.get("reason", ""))
    except Exception as e:
        print(f"---- the service could not be asked: {e}")


def job_row(page, state: str):
    return page.locator(f'.gpuhub-Job[data-state="{state}"]').filter(has_text="train")


def test_submit_notebook_follow_it_open_log_and_output(tmp_path):
    hub = Hub(str(tmp_path), groups={"team-a": ["alice", "amy"]},
              teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}}, gpus=4)
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    write_notebook(os.path.join(workspace, "train.ipynb"))
    with open(os.path.join(workspace, "prep.py"), "w") as f:
        f.write("print('preparing data')\n")
    with open(os.path.join(workspace, "data.csv"), "w") as f:  # not a job: the picker hides it
        f.write("x,y\n")
    quiet_news(workspace)
    with hub_session(hub) as pids:
        amy = hub.client("amy")
        # amy's job holds the team's whole quota: alice's job will wait.
        holder = amy.submit(name="amy-holds", command=["python", "-c", HOLD], gpus=2)
        amy.wait(holder["id"], "running")
        with lab_page(hub, "alice", pids, accept_downloads=True) as page:
            page.goto(f"{hub.url}/user/alice/lab/tree/train.ipynb")
            expect = sync_api.expect

            # The status bar shows the team's use against its quota.
            expect(page.locator(".gpuhub-QuotaStatus")).to_have_text(
                "a: 2/2 Fake GPU", timeout=SLOW_MS)

            # 1. Submit the open notebook from its toolbar.
            page.locator(".gpuhub-SubmitButton").first.click(timeout=SLOW_MS)
            form = dialog_form(page, ".gpuhub-SubmitForm")
            assert form.locator('input[name="path"]').input_value() == "train.ipynb"
            assert form.locator('input[name="name"]').input_value() == "train"
            assert form.locator('select[name="team"]').input_value() == "a"
            assert form.locator('select[name="pool"]').input_value() == "default"
            # The notebook's parameters cell fills the parameters.
            params = form.locator('textarea[name="parameters"]')
            assert "epochs = 1" in params.input_value()
            params.fill('epochs = 3\nmodel = "vit"\nstep_seconds = 2.5')
            # Team, Pool and Priority are JupyterLab's styled selects (a caret, not a
            # text box), as high as the inputs beside them.
            for name in ("team", "pool", "priority"):
                expect(form.locator(f'.jp-HTMLSelect select[name="{name}"]')).to_have_count(1)
                expect(form.locator(f'.jp-HTMLSelect:has(select[name="{name}"]) svg')).to_be_visible()
            heights = {name: form.locator(f'[name="{name}"]').bounding_box()["height"]
                       for name in ("priority", "timeLimit", "outputDir", "team", "gpus")}
            assert len(set(heights.values())) == 1, heights
            tops = {name: form.locator(f'[name="{name}"]').bounding_box()["y"]
                    for name in ("timeLimit", "priority", "outputDir")}
            assert len(set(tops.values())) == 1, tops
            # More GPUs than the team may ever hold: the hint says so, Submit is off.
            submit = page.locator(".jp-Dialog-button.jp-mod-accept")
            form.locator('input[name="gpus"]').fill("3")
            quota = form.locator(".gpuhub-SubmitForm-quota")
            expect(quota).to_contain_text("3 GPUs is more than team a may ever hold")
            expect(submit).to_be_disabled()
            form.locator('input[name="gpus"]').fill("2")
            expect(submit).to_be_enabled()
            expect(quota).to_contain_text("0 of 2 Fake GPU free in quota")
            expect(quota).to_contain_text("waits for the team's own quota")
            form.locator('textarea[name="env"]').fill("WANDB_MODE=offline")
            page.locator(".jp-Dialog-body").evaluate("b => b.scrollTop = 0")
            shot(page, tmp_path, "lab-submit-form.png")
            with page.expect_response(lambda r: r.request.method == "POST"
                                      and "/gpuhub/workloads" in r.url) as posted:
                page.locator(".jp-Dialog-button.jp-mod-accept").click()
                expect(page.locator(".gpuhub-SubmitForm")).to_have_count(0)
            assert posted.value.status == 201, posted.value.text()

            # 2. The Jobs panel opens with the job the submit answered (not
            # at the next poll): it waits behind amy's, first in line.
            queued = job_row(page, "queued")
            expect(queued).to_have_count(1, timeout=5_000)
            expect(queued.locator(".gpuhub-Job-detail")).to_contain_text("#1 in queue")
            # When: behind amy's job, which ends at its default 24 h limit at the latest.
            expect(queued.locator(".gpuhub-Job-detail")).to_contain_text(
                re.compile(r"expected to start in ~2[34](\.\d)? h"), timeout=30_000)
            expect(page.locator(".jp-toast-message").filter(
                has_text="Job train is queued: expected to start in")).to_have_count(1)
            expect(queued).to_contain_text("2 × default")
            shot(page, tmp_path, "lab-jobs-queued.png")
            # (her CPU-only notebook server is a workload too: kind notebook)
            jobs = hub.client("root-admin").get("/workloads", params={
                "user": "alice", "kind": "job"}).json()["workloads"]
            assert len(jobs) == 1 and jobs[0]["name"] == "train"
            wid = jobs[0]["id"]
            assert jobs[0]["parameters"] == {"epochs": 3, "model": "vit", "step_seconds": 2.5}
            # Lists redact env values but for their owner's: alice's own view shows it.
            assert jobs[0]["env"]["WANDB_MODE"] == "•••"
            assert hub.client("alice").workload(wid)["env"]["WANDB_MODE"] == "offline"

            # 3. amy's job ends: alice's starts (a notification says so), then succeeds.
            assert amy.request("DELETE", f"/workloads/{holder['id']}").status_code == 202
            running = job_row(page, "running")
            expect(running).to_have_count(1, timeout=60_000)
            expect(page.locator(".jp-toast-message").filter(has_text="started")).to_have_count(
                1, timeout=30_000)

            # 4. Its log, followed live in a tab while it runs, kept when it ends.
            running.get_by_role("button", name="Logs").click()
            viewer = page.locator(f"#gpuhub-log-{wid}")
            status = viewer.locator(".gpuhub-LogViewer-status")
            log = viewer.locator(".gpuhub-LogViewer-text")
            expect(status).to_contain_text("following attempt 1")
            expect(log).to_contain_text("training 3 epochs of vit on GPUs", timeout=60_000)
            expect(log).to_contain_text("epoch 3/3 done", timeout=60_000)
            expect(status).to_contain_text("succeeded", timeout=60_000)

            succeeded = job_row(page, "succeeded")
            expect(succeeded).to_have_count(1, timeout=SLOW_MS)
            expect(page.locator(".jp-toast-message").filter(
                has_text="succeeded")).not_to_have_count(0, timeout=30_000)
            shot(page, tmp_path, "lab-jobs-panel.png")

            # 5. Its executed notebook, from the server's files.
            succeeded.get_by_role("button", name="Output", exact=True).click()
            tab = page.locator(".lm-TabBar-tab").filter(has_text=re.compile(r"train-\d{8}"))
            expect(tab).to_have_count(1, timeout=60_000)
            output = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output")
            expect(output.filter(has_text="epoch 3/3 done")).not_to_have_count(0,
                                                                               timeout=60_000)

            # 6. Its outputs as a zip.
            with page.expect_download() as dl:
                succeeded.get_by_role("button", name="Download").click()
            with open(dl.value.path(), "rb") as f:
                names = zipfile.ZipFile(io.BytesIO(f.read())).namelist()
            assert any(n.endswith("/metrics.txt") for n in names), names
            assert any(re.search(r"/train-\d{8}-\d{6}\.ipynb$", n) for n in names), names

            # 7. Resubmit: the job's own settings fill the form again.
            succeeded.get_by_role("button", name="Resubmit").click()
            form = page.locator(".gpuhub-SubmitForm")
            assert form.locator('input[name="path"]').input_value() == "train.ipynb"
            assert "epochs = 3" in form.locator('textarea[name="parameters"]').input_value()
            assert form.locator('input[name="gpus"]').input_value() == "2"
            page.locator(".jp-Dialog-button.jp-mod-reject").click()

            # 8. From the command palette, for the open notebook: defaults
            # come from the last submission, parameters from the notebook.
            page.locator(".lm-TabBar-tabLabel", has_text=re.compile(r"^train\.ipynb$")).click()
            page.keyboard.press("Control+Shift+C")
            page.keyboard.type("Submit as Job")
            page.keyboard.press("Enter")
            form = dialog_form(page, ".gpuhub-SubmitForm")
            assert form.locator('input[name="gpus"]').input_value() == "2"
            assert form.locator('textarea[name="env"]').input_value() == "WANDB_MODE=offline"
            assert form.locator('select[name="priority"]').input_value() == "batch"
            # A refusal names the field as the form labels it.
            form.locator('input[name="path"]').fill("missing.ipynb")
            assert form.locator('input[name="name"]').input_value() == "train"
            page.locator(".jp-Dialog-button.jp-mod-accept").click()
            form = page.locator(".gpuhub-SubmitForm")
            expect(form.locator(".gpuhub-SubmitForm-error")).to_have_text(
                "File: 'missing.ipynb' is not a file")
            expect(form.locator('.gpuhub-Field-invalid[data-field="path"]')).to_have_count(1)
            page.locator(".jp-Dialog-button.jp-mod-reject").click()

            # 9. The status bar's popover breaks the quota down per pool.
            page.locator(".gpuhub-QuotaStatus").click()
            popover = page.locator(".gpuhub-QuotaPopover")
            expect(popover).to_contain_text("Team a")
            expect(popover.locator("tbody tr")).to_have_text(re.compile(r"default\s*0/2 Fake GPU"))
            shot(page, tmp_path, "lab-quota.png")
            page.keyboard.press("Escape")
            page.mouse.click(700, 500)
            expect(popover).to_have_count(0)

            # 10. The culler's warning for this server is a notification.
            r = hub.client("root-admin").post("/notices", json={
                "user": "alice", "kind": "cull-warning",
                "message": "Your server's GPUs have been idle: it stops in 15 minutes"})
            assert r.status_code == 201, r.text
            expect(page.locator(".jp-toast-message").filter(
                has_text="it stops in 15 minutes")).to_have_count(1, timeout=60_000)

            # 11. The file browser's context menu submits the file clicked,
            # not the notebook open beside it.
            page.locator(".jp-SideBar [data-id='filebrowser']").click()
            page.locator(".jp-DirListing-item", has_text="prep.py").first.click(
                button="right")
            page.locator(".lm-Menu-item", has_text="Submit as Job").click()
            form = page.locator(".gpuhub-SubmitForm")
            expect(form).to_be_visible()
            assert form.locator('input[name="path"]').input_value() == "prep.py"
            expect(form).to_contain_text("passed as --name=value")
            page.locator(".jp-Dialog-button.jp-mod-reject").click()

            # 12. The launcher's "Submit GPU job" starts with JupyterLab's file picker.
            page.keyboard.press("Control+Shift+C")
            page.keyboard.type("New Launcher")
            page.keyboard.press("Enter")
            page.locator(".jp-LauncherCard", has_text="Submit GPU job").click()
            picker = page.locator(".jp-Dialog").filter(has_text="choose a notebook, .py or .sh")
            expect(picker).to_be_visible()
            expect(picker.locator(".jp-DirListing-item", has_text="prep.py")).to_have_count(1)
            expect(picker.locator(".jp-DirListing-item", has_text="data.csv")).to_have_count(0)
            picker.locator(".jp-DirListing-item", has_text="prep.py").click()
            picker.locator(".jp-Dialog-button.jp-mod-accept").click()
            form = page.locator(".gpuhub-SubmitForm")
            expect(form).to_be_visible()
            assert form.locator('input[name="path"]').input_value() == "prep.py"
            page.locator(".jp-Dialog-button.jp-mod-reject").click()

            # 13. A best-effort job of alice's is preempted by amy's batch job and
            # requeued: the Jobs panel lists its attempts, the log keeps the first
            # attempt's output and says why the second waits.
            alice = hub.client("alice")
            sweep = alice.submit(name="sweep", priority="best-effort", gpus=2, command=[
                "python", "-c", "import time\nfor i in range(60):\n    print('sweep step', i,"
                " flush=True)\n    time.sleep(1)"])
            wait_for(lambda: "sweep step 1" in alice.get(
                f"/workloads/{sweep['id']}/logs").text, 60, "the sweep's first steps")
            blocker = amy.submit(name="amy-batch", command=["python", "-c", HOLD], gpus=2)
            amy.wait(blocker["id"], "running", timeout=60)
            page.locator(".jp-SideBar [data-id='gpuhub-jobs']").click()
            row = page.locator(f'.gpuhub-Job[data-job-id="{sweep["id"]}"]')
            expect(row).to_have_attribute("data-state", "queued", timeout=30_000)
            attempts = row.locator(".gpuhub-Job-attemptList li")
            expect(attempts).to_have_count(2)
            expect(attempts.first).to_contain_text("attempt 1: preempted after")
            row.get_by_role("button", name="Logs").click()
            viewer = page.locator(f"#gpuhub-log-{sweep['id']}")
            expect(viewer.locator(".gpuhub-LogViewer-text")).to_contain_text(
                "── attempt 1: preempted after", timeout=30_000)
            expect(viewer.locator(".gpuhub-LogViewer-text")).to_contain_text("sweep step 1")
            expect(viewer.locator(".gpuhub-LogViewer-status")).to_contain_text(
                "attempt 2 is queued", timeout=30_000)
            # amy's job ends: attempt 2 runs, under its own line, after attempt 1's output
            assert amy.request("DELETE", f"/workloads/{blocker['id']}").status_code == 202
            text = viewer.locator(".gpuhub-LogViewer-text")
            expect(text).to_contain_text(re.compile(r"sweep step 1.*── attempt 2 ──\s*sweep step 0",
                                                    re.S), timeout=60_000)
            expect(viewer.locator(".gpuhub-LogViewer-status")).to_contain_text(
                "following attempt 2")
            shot(page, tmp_path, "lab-log.png")
            # attempt 1 alone, from the panel's list
            attempts.first.get_by_role("button", name="log").click()
            first = page.locator(f"#gpuhub-log-{sweep['id']}-attempt-0")
            expect(first.locator(".gpuhub-LogViewer-text")).to_contain_text("sweep step 1")
            expect(first.locator(".gpuhub-LogViewer-text")).not_to_contain_text("── attempt")
            expect(first.locator(".gpuhub-LogViewer-status")).to_contain_text(
                "attempt 1: preempted")
            alice.request("DELETE", f"/workloads/{sweep['id']}")
