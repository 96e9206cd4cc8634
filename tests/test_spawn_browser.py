"""The spawn page in a real browser: a user picks GPUs on the hub's form,
waits in her team's queue on the progress page while a teammate holds the
team's quota, and lands in JupyterLab once the GPUs are hers; then she makes
a named server from the home page, whose GPU her team's quota counts.

Chromium is the system's (/usr/bin/chromium), driven by Playwright's sync API;
the hub is the real embedded one (tests/hub_harness.py). Screenshots of the
form, the queued progress page and JupyterLab are also kept in
docs/screenshots/ so that people can see the pages.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import time

import requests
from playwright import sync_api  # the test extra installs it

from hub_harness import Hub

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCREENSHOTS = os.path.join(ROOT, "docs", "screenshots")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
PASSWORD = "test-password"
# A loaded 2-core machine: starting a server and JupyterLab takes a while.
SLOW_MS = 120_000


def wait_for(predicate, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def servers(hub: Hub, user: str) -> dict:
    """The user's servers as the hub's REST API lists them, by name ("": the default)."""
    r = requests.get(f"{hub.url}/hub/api/users/{user}",
                     headers={"Authorization": f"token {hub.token(user)}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json().get("servers", {})


def server_state(hub: Hub, user: str, name: str = "") -> dict | None:
    return servers(hub, user).get(name)


def shot(page, tmp_path, name: str, *, keep: bool = True) -> str:
    """Screenshot into tmp_path; ``keep``: copy it to docs/screenshots too."""
    path = os.path.join(str(tmp_path), name)
    page.screenshot(path=path, full_page=True)
    if keep:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        shutil.copyfile(path, os.path.join(SCREENSHOTS, name))
    return path


def stop_servers(hub: Hub, users) -> None:
    """Stop the users' servers through the REST API while the scheduler
    service is still up (the hub stops its services before the servers when
    it shuts down, and a spawner that cannot reach the service then fails to
    stop its server)."""
    for user in users:
        try:
            for name in servers(hub, user):  # the default one and named ones
                requests.delete(f"{hub.url}/hub/api/users/{user}/servers/{name}",
                                headers={"Authorization": f"token {hub.token(user)}"}, timeout=30)
            wait_for(lambda: not servers(hub, user), 60, f"{user}'s servers to stop")
        except Exception as e:  # cleanup: report, carry on
            print(f"could not stop {user}'s servers: {e}")


def server_pids(hub: Hub) -> set[int]:
    """PIDs of the notebook servers the hub runs now: its child processes
    that work in this test's user workspaces."""
    children: set[int] = set()
    for task in os.listdir(f"/proc/{hub.proc.pid}/task"):
        try:
            with open(f"/proc/{hub.proc.pid}/task/{task}/children") as f:
                children.update(int(p) for p in f.read().split())
        except OSError:
            pass
    workspaces = os.path.join(hub.data_dir, "workspaces") + os.sep
    found = set()
    for pid in children:
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(workspaces):
                found.add(pid)
        except OSError:
            pass
    return found


def kill_leftover_servers(hub: Hub, pids) -> None:
    """Safety net after hub.stop(): end the notebook servers this test's hub
    started that still run (by PID, checking they work under this test's
    directory, so a reused PID is left alone)."""
    for pid in pids:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if not cwd.startswith(hub.data_dir + os.sep):
            continue
        print(f"killing leftover notebook server {pid} ({cwd})")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            try:
                wait_for(lambda: not os.path.exists(f"/proc/{pid}/cwd"), 10, f"{pid} to exit")
                break
            except AssertionError:
                pass


def login(page, hub: Hub, user: str) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    with page.expect_navigation():
        page.click("#login_submit")
    assert "/hub/login" not in page.url, f"login failed: {page.url}"


def test_spawn_form_queue_and_lab(tmp_path):
    assert os.path.exists(CHROMIUM), (f"no Chromium at {CHROMIUM}: `make test` installs Debian's "
                                      f"chromium package (apt-get install chromium)")
    hub = Hub(str(tmp_path), groups={"team-a": ["alice", "amy"]},
              teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}},
              gpus=4)
    pids: set[int] = set()  # notebook servers the hub started, to be sure they end
    try:
        hub.start()
        amy = {"Authorization": f"token {hub.token('amy')}"}
        hub.token("alice")  # creates alice in the hub, in her team's group

        # 1. amy's 2-hour training job holds the team's whole quota (2 GPUs); it is of
        # the production class, which a notebook server (interactive) does not preempt.
        holder = hub.client("amy").submit(command=["python", "-c", "import time; time.sleep(600)"],
                                          gpus=2, time_limit=7200, name="amy-trains",
                                          priority="production")
        hub.client("amy").wait(holder["id"], "running")

        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.set_default_timeout(60_000)
                context.set_default_navigation_timeout(SLOW_MS)
                page = context.new_page()

                # 2. alice logs in through the form and opens the spawn page.
                login(page, hub, "alice")
                page.goto(f"{hub.url}/hub/spawn")
                # A card per choice; the GPU count is the card's select.
                radios = page.locator('input[name="gpu_choice"]')
                sync_api.expect(radios).to_have_count(2)
                assert [radios.nth(i).get_attribute("value") for i in range(2)] == \
                    [":0", "default:1"]
                gpus = page.locator('.gpuhub-profile[data-pool="default"] select')
                assert gpus.locator("option").evaluate_all("os => os.map(o => o.value)") == \
                    ["default:1", "default:2"]
                assert page.locator('input[type="hidden"][name="team"]').get_attribute(
                    "value") == "a"
                form = page.locator("#spawn_form")
                labels = form.inner_text()
                assert "CPU only" in labels and "Fake GPU (16 GiB)" in labels
                # amy holds the quota: the form says so, once.
                assert labels.count("0 of its 2 default GPUs free in its quota") == 1
                assert "waits in the queue" in " ".join(gpus.locator("option").all_inner_texts())
                shot(page, tmp_path, "spawn-form.png")

                # 4. More than the team can get (the form offers no such
                # choice: post a manipulated value) comes back on the form.
                page.evaluate("""() => {
                    const r = document.querySelector('input[name="gpu_choice"][value="default:1"]');
                    r.value = "default:3";
                    r.checked = true;
                }""")
                with page.expect_navigation():
                    page.click('#spawn_form button[type="submit"]')
                error = page.locator(".spawn-error-msg")
                sync_api.expect(error).to_contain_text("more than you can get")
                sync_api.expect(error).to_contain_text("3 GPUs")
                # The form is shown again, so alice can choose anew.
                sync_api.expect(page.locator('input[name="gpu_choice"]')).to_have_count(2)
                shot(page, tmp_path, "spawn-error.png", keep=False)
                assert server_state(hub, "alice") is None, "a refused form started a server"

                # 2 (cont.). Choose 2 GPUs and start: alice queues behind amy.
                page.goto(f"{hub.url}/hub/spawn")
                page.select_option('.gpuhub-profile[data-pool="default"] select', "default:2")
                assert page.locator('input[name="gpu_choice"][value="default:2"]').is_checked()
                page.click('#spawn_form button[type="submit"]')
                page.wait_for_url(re.compile(r"/hub/spawn-pending/alice"), timeout=SLOW_MS)
                log = page.locator("#progress-log")
                sync_api.expect(log).to_contain_text("waiting for 2 × default GPUs",
                                                     timeout=SLOW_MS)
                sync_api.expect(log).to_contain_text("position 1")
                # When: amy's job has no run-time history yet, so it ends at its
                # limit, 2 h from now, with the plain half-to-twice range.
                sync_api.expect(log).to_contain_text(re.compile(
                    r"expected to start in ~2 h \(between 5\d min and 4 h\)"))
                sync_api.expect(page.locator("#progress-message")).to_contain_text("waiting for")
                page.locator("#progress-details").evaluate("d => d.open = true")
                shot(page, tmp_path, "spawn-queued.png")
                assert not (server_state(hub, "alice") or {}).get("ready")

                # 3. amy cancels: the GPUs go to alice, whose page lands in JupyterLab.
                r = requests.delete(f"{hub.api}/workloads/{holder['id']}", headers=amy,
                                    timeout=30)
                assert r.status_code == 202, r.text
                page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=SLOW_MS)
                page.wait_for_selector("#jp-main-dock-panel", state="visible", timeout=SLOW_MS)
                sync_api.expect(page).to_have_title(re.compile("JupyterLab"), timeout=SLOW_MS)
                # Let the launcher render before the picture is taken.
                try:
                    page.wait_for_selector(".jp-Launcher", state="visible", timeout=30_000)
                except sync_api.TimeoutError:
                    pass
                shot(page, tmp_path, "lab.png")
                assert (server_state(hub, "alice") or {}).get("ready")
                pids |= server_pids(hub)

                # 5. alice stops that server from the home page, and makes a named
                # one there ("Add New Server"), started from its row with a card
                # of the spawn form: it is admitted and counted in her team's quota
                # like the default one.
                page.goto(f"{hub.url}/hub/home")
                page.locator("#stop").click()
                wait_for(lambda: server_state(hub, "alice") is None, 60, "alice's server to stop")
                page.goto(f"{hub.url}/hub/home")
                page.locator(".new-server-name").fill("small")
                page.locator(".new-server-btn").click()
                start = page.locator("#start-small")
                sync_api.expect(start).to_be_visible()
                start.click()
                page.wait_for_url(re.compile(r"/hub/spawn/alice/small$"))
                sync_api.expect(page.locator("#spawn_form")).to_contain_text(
                    "2 of its 2 default GPUs free in its quota")
                page.select_option('.gpuhub-profile[data-pool="default"] select', "default:1")
                page.click('#spawn_form button[type="submit"]')
                wait_for(lambda: (server_state(hub, "alice", "small") or {}).get("ready"), 120,
                         "alice's named server to be ready")
                pids |= server_pids(hub)
                # The pending page goes to the ready server by itself: a goto
                # meanwhile would be interrupted by that navigation.
                page.wait_for_url(re.compile(r"/user/alice/small/"), timeout=SLOW_MS)
                page.goto(f"{hub.url}/hub/spawn")  # the default server's form: 1 GPU is taken
                sync_api.expect(page.locator("#spawn_form")).to_contain_text(
                    "1 of its 2 default GPUs free in its quota")
                page.goto(f"{hub.url}/hub/home")
                glance = page.frame_locator("#gpuhub-glance-frame")
                named = glance.locator("#my-workloads tr", has_text="small")
                sync_api.expect(named).to_contain_text("1 × default", timeout=SLOW_MS)
                sync_api.expect(named).to_contain_text("running")
                sync_api.expect(glance.locator("#my-teams tbody tr").first.locator("td").nth(2)
                                ).to_have_text("1")
                shot(page, tmp_path, "named-server.png", keep=False)
                context.close()
            finally:
                browser.close()
    except BaseException:
        if hub.proc is not None:
            print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        if hub.proc is not None and hub.proc.poll() is None:
            stop_servers(hub, ("alice", "amy"))
        hub.stop()
        kill_leftover_servers(hub, pids)
