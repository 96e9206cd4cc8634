"""The first ten minutes in a real browser, from an empty data directory
exactly as the README says: `gpuhub up` (what `make run` runs) on a fresh
--data-dir, log in through the hub's form as the first admin with the
printed password, start a notebook server with 1 GPU from the spawn page,
write a notebook in JupyterLab, submit it as a job (the lab extension's
Submit as Job command), follow it in the Jobs panel and open its output
notebook, then see the server's GPU and the job on the hub's home page, and
open the job's log from there. No API call,
CLI command or database step in between.

Screenshots are kept in docs/screenshots/firstrun-*.png.
"""
from __future__ import annotations

import os
import re

from playwright import sync_api

from embedded import EmbeddedHub
from test_spawn_browser import CHROMIUM, CHROMIUM_ARGS, SLOW_MS, shot

CODE = 'import os\nprint("hello from GPUs", os.environ["CUDA_VISIBLE_DEVICES"])'


def test_first_run_to_a_gpu_notebook_and_a_first_job(tmp_path):
    assert os.path.exists(CHROMIUM), (f"no Chromium at {CHROMIUM}: `make test` installs Debian's "
                                      f"chromium package (apt-get install chromium)")
    hub = EmbeddedHub(str(tmp_path))
    assert not os.listdir(hub.data_dir)  # as a fresh clone has it: nothing there
    expect = sync_api.expect
    try:
        hub.start()
        password = hub.passwords["admin"]
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                context.set_default_timeout(60_000)
                context.set_default_navigation_timeout(SLOW_MS)
                page = context.new_page()

                # 1. The login form, with the password `gpuhub up` printed.
                page.goto(f"{hub.url}/hub/")
                page.fill("#username_input", "admin")
                page.fill("#password_input", password)
                with page.expect_navigation():
                    page.click("#login_submit")

                # 2. The spawn page offers GPUs at once (the default team owns them).
                page.goto(f"{hub.url}/hub/spawn")
                one = page.locator('input[name="gpu_choice"][value="default:1"]')
                expect(one).to_have_count(1)
                expect(page.locator("#gpuhub-no-gpu")).to_have_count(0)
                shot(page, tmp_path, "firstrun-spawn.png")
                one.check()
                page.click('#spawn_form button[type="submit"]')
                page.wait_for_url(re.compile(r"/user/admin/lab"), timeout=SLOW_MS)
                page.wait_for_selector(".jp-Launcher", state="visible", timeout=SLOW_MS)

                # 3. A new notebook from the launcher, one cell, saved.
                page.locator('.jp-LauncherCard[title*="Python 3"]').first.click()
                editor = page.locator(".jp-NotebookPanel:visible .jp-Cell .cm-content").first
                editor.click()
                page.keyboard.type(CODE)
                page.keyboard.press("Control+s")
                rename = page.locator('.jp-Dialog input[type="text"]')
                try:
                    rename.wait_for(state="visible", timeout=5_000)
                    rename.fill("first.ipynb")
                    page.locator(".jp-Dialog-button.jp-mod-accept").click()
                    name = "first.ipynb"
                except sync_api.TimeoutError:
                    name = "Untitled.ipynb"
                expect(page.locator(".lm-TabBar-tab.jp-mod-current")).to_contain_text(
                    name.removesuffix(".ipynb"))

                # 4. Submit as Job, from the notebook's toolbar; 1 GPU of the default team.
                page.locator(".jp-NotebookPanel:visible .gpuhub-SubmitButton").first.click(
                    timeout=SLOW_MS)
                form = page.locator(".gpuhub-SubmitForm")
                expect(form).to_be_visible()
                assert form.locator('input[name="path"]').input_value() == name
                assert form.locator('select[name="team"]').input_value() == "default"
                form.locator('input[name="gpus"]').fill("1")
                shot(page, tmp_path, "firstrun-submit.png")
                page.locator(".jp-Dialog-button.jp-mod-accept").click()
                expect(form).to_have_count(0)

                # 5. The Jobs panel follows it to the end.
                job = page.locator('.gpuhub-Job[data-state="succeeded"]')
                expect(job).to_have_count(1, timeout=SLOW_MS)
                shot(page, tmp_path, "firstrun-jobs.png")

                # 6. Its output notebook, executed on the job's GPU.
                job.get_by_role("button", name="Output", exact=True).click()
                output = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output")
                expect(output.filter(has_text="hello from GPUs")).not_to_have_count(
                    0, timeout=SLOW_MS)
                shot(page, tmp_path, "firstrun-output.png")

                # 7. The hub's home page: the GPU the server holds, the job that
                # ended (its log and its output notebook a click away), at a glance.
                page.goto(f"{hub.url}/hub/home")
                glance = page.frame_locator("#gpuhub-glance-frame")
                expect(glance.locator("#my-gpus")).to_have_text("1", timeout=SLOW_MS)
                expect(glance.locator("#my-workloads")).to_contain_text("notebook")
                expect(glance.locator("#my-teams")).to_contain_text("default")
                ended = glance.locator("#my-finished tbody tr")
                expect(ended).to_have_count(1)
                expect(ended).to_contain_text(name.removesuffix(".ipynb").lower())
                expect(ended).to_contain_text("succeeded")
                expect(ended.locator("a.gpuhub-output")).to_have_attribute(
                    "href", re.compile(r"/hub/user-redirect/lab/tree/outputs/.+\.ipynb$"))
                expect(glance.locator("#no-deployments")).to_be_visible()
                shot(page, tmp_path, "firstrun-home.png")
                with page.expect_navigation():
                    ended.locator("a.gpuhub-log").click()
                expect(page.locator("body")).to_contain_text("hello from GPUs")
                context.close()
            finally:
                browser.close()
    except BaseException:
        print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        hub.stop()
