"""What a new admin and a new user met in their first hour (issue 33), from
where each stands, on the embedded hub as ``gpuhub up`` starts it:

- a JupyterLab terminal and a job find ``gpuhub`` on their PATH;
- ``gpuhub up --gpu-sharing default=4`` (docs/gpus.md) shares this host's
  GPUs, and a sharing config naming a pool this host lacks stops the hub
  with the reason, leaving no proxy behind;
- a server killed from outside or preempted says why on the next page load;
- the authorize page does not let an admin unauthorize themselves;
- README.md's first steps, walked in Chromium as one user.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests
from playwright import sync_api  # the test extra installs it

from embedded import EmbeddedHub
from notebooks import write_notebook
from gpuspawner.isolation.accounts import isolating
from gpuspawner.isolation.user_env import user_path
from test_isolation_e2e import terminal_run
from test_local_spawner import Servers
from test_spawn_browser import SLOW_MS, shot

VENV_BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(not isolating(), reason="the embedded hub's user accounts "
                                                        "need root (CI runs the tests as root)")


def proxies_of(port: int) -> list[int]:
    """PIDs of configurable-http-proxy processes serving ``port``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any("configurable-http-proxy" in a for a in argv[:3]) and \
                any(a == "--port" and argv[i + 1] == str(port) for i, a in enumerate(argv[:-1])):
            found.append(int(pid))
    return found


def test_a_service_that_cannot_start_stops_the_hub_and_its_proxy(tmp_path):
    """`gpuhub up --gpu-sharing h200=4` on a host whose pool is "default":
    the hub exits non-zero, saying why, and leaves no proxy running."""
    hub = EmbeddedHub(str(tmp_path))
    gpuhub = os.path.join(os.path.dirname(sys.executable), "gpuhub")
    began = time.monotonic()
    try:
        with open(os.path.join(tmp_path, "hub.log"), "wb") as log:
            hub.proc = subprocess.Popen(
                [gpuhub, "up", "--data-dir", hub.data_dir, "--port", str(hub.port),
                 "--gpu-sharing", "h200=4"], cwd=str(tmp_path), env=hub.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
            returncode = hub.proc.wait(300)
        took = time.monotonic() - began
        out = open(os.path.join(tmp_path, "hub.log"), errors="replace").read()
        print(f"the hub gave up after {took:.1f} s")
        assert returncode == 1, out[-3000:]
        last = out.strip().splitlines()[-1]
        assert last.startswith("GPU Hub stopped: the gpuhub service could not start:"), out[-3000:]
        assert "pool(s) h200 are not GPUs of this host (its pools: default)" in last
        assert out.count("exited with status 1 while the hub starts") == 2  # two more tries
        assert proxies_of(hub.port) == []
        assert not os.path.exists(os.path.join(hub.data_dir, "jupyterhub.pid"))
    finally:
        for pid in proxies_of(hub.port):  # (a failure above: leave nothing behind)
            os.kill(pid, 9)
        hub.stop()


# ---- one hub for the rest: `gpuhub up --demo --gpu-sharing default=4` ------

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = EmbeddedHub(str(tmp_path_factory.mktemp("first-hour")))
    try:
        yield h.start("--demo", "--gpu-sharing", "default=4", timeout=240)
    finally:
        for user in ("alice", "carol", "admin"):
            try:
                requests.delete(f"{h.url}/hub/api/users/{user}/server", timeout=30,
                                headers={"Authorization": f"token {h.token('admin')}"})
            except Exception as e:  # cleanup: report, carry on
                print(f"could not stop {user}'s server: {e}")
        h.stop()


def page_of(browser, hub: EmbeddedHub, user: str):
    """A new browser context with ``user`` logged in through the hub's form."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    context.set_default_navigation_timeout(SLOW_MS)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    with page.expect_navigation():
        page.click("#login_submit")
    assert "/hub/login" not in page.url, f"login of {user} failed: {page.url}"
    return page


def test_the_docs_sharing_option_shares_this_hosts_gpus(hub):
    """docs/gpus.md: `gpuhub up --gpu-sharing default=4`; the spawn page then
    offers quarters of a GPU."""
    form = hub.login("alice").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "1/4" in form, form[:3000]


def test_a_lab_terminal_and_a_job_find_gpuhub(hub):
    alice = Servers(hub, "alice")
    assert alice.start(pool="default", gpus=0).status_code in (201, 202)
    alice.wait_ready()
    # In a terminal of alice's JupyterLab, as she would type it.
    out = asyncio.run(terminal_run(
        hub, "alice", 'command -v gpuhub; echo "PATH=$PATH"; gpuhub ls; echo ls-done-$((1+1))',
        until="ls-done-2", timeout=90))
    assert os.path.join(VENV_BIN, "gpuhub") in out, out
    assert f"PATH={user_path()}" in out, out
    assert "command not found" not in out and "Traceback" not in out, out
    # ... and in a job of hers.
    client = hub.client("alice")
    job = client.submit(command=["/bin/sh", "-c", 'command -v gpuhub && echo "PATH=$PATH"'],
                        gpus=0, name="which-gpuhub")
    done = client.wait(job["id"], ("succeeded", "failed"), 120)
    log = client.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "succeeded", log
    assert os.path.join(VENV_BIN, "gpuhub") in log and f"PATH={user_path()}" in log, log


def stop_reason_on_next_load(browser, hub: EmbeddedHub, user: str) -> str:
    """What the user reads on loading their JupyterLab after the server stopped."""
    page = page_of(browser, hub, user)
    try:
        response = page.goto(f"{hub.url}/user/{user}/lab")
        assert response.status == 424, response.status
        reason = page.locator("#gpuhub-stop-reason")
        sync_api.expect(reason).to_be_visible()
        return reason.inner_text()
    finally:
        page.context.close()


def test_a_server_killed_from_outside_says_so(hub, browser):
    alice = Servers(hub, "alice")
    if alice.server() is None:
        assert alice.start(pool="default", gpus=0).status_code in (201, 202)
    alice.wait_ready()
    pid, _ = alice.server_process()
    os.kill(pid, signal.SIGKILL)
    alice.wait(lambda srv: srv is None, "noticed dead", timeout=90)  # the hub polls every 30 s
    said = stop_reason_on_next_load(browser, hub, "alice")
    assert said.startswith("Your server stopped at ") and \
        "it was killed by SIGKILL from outside the hub" in said, said
    assert "killed by SIGKILL from outside the hub" in hub.tail(200)  # and the hub's log says it
    # and the scheduler's record of the server, which the Lab and `gpuhub ls` show
    servers = hub.client("alice").get("/workloads", params={"kind": "notebook"}).json()
    assert any("the server is gone (-9): it was killed by SIGKILL from outside" in
               (w.get("reason") or "") for w in servers["workloads"]), servers


def test_a_preempted_server_says_so(hub, browser):
    """alice (vision) borrows nlp's idle GPUs for her server; carol (nlp)
    wants one of hers back: alice's server is preempted."""
    alice, carol = Servers(hub, "alice"), Servers(hub, "carol")
    assert alice.start(pool="default", gpus=4).status_code in (201, 202)
    alice.wait_ready()
    assert carol.start(pool="default", gpus=1).status_code in (201, 202)
    alice.wait(lambda srv: srv is None, "preempted", timeout=120)
    said = stop_reason_on_next_load(browser, hub, "alice")
    assert "the scheduler took its GPUs back: preempted: team nlp reclaims its nominal" in said, said
    carol.wait_ready()
    # An admin stops carol's server (the admin panel's Stop calls the same API).
    r = requests.delete(f"{hub.url}/hub/api/users/carol/server", timeout=60,
                        headers={"Authorization": f"token {hub.token('admin')}"})
    assert r.status_code in (202, 204), r.text
    carol.wait(lambda srv: srv is None, "stopped")
    assert "the admin admin stopped it." in stop_reason_on_next_load(browser, hub, "carol")


def test_an_admin_cannot_unauthorize_themselves(hub, browser):
    admin_api = {"Authorization": f"token {hub.token('admin')}"}
    r = requests.patch(f"{hub.url}/hub/api/users/bob", json={"admin": True}, headers=admin_api,
                       timeout=10)
    assert r.status_code == 200, r.text
    page = page_of(browser, hub, "admin")
    try:
        page.goto(f"{hub.url}/hub/authorize")
        own = page.locator("tr#admin")
        sync_api.expect(own.locator("#unauthorize-self")).to_be_visible()
        sync_api.expect(own.get_by_role("button", name="Unauthorize", exact=True)).to_have_count(0)
        # The link typed by hand is refused, and the admin still logs in.
        response = page.goto(f"{hub.url}/hub/authorize/admin")
        assert response.status == 403
        sync_api.expect(page.locator("#authorize-refused")).to_contain_text(
            "You cannot unauthorize yourself")
        # Another admin: a confirmation first; going back changes nothing.
        page.goto(f"{hub.url}/hub/authorize")
        page.locator("tr#bob").get_by_role("button", name="Unauthorize admin…").click()
        sync_api.expect(page.locator("#authorize-question")).to_contain_text("bob is an admin")
        page.click("#authorize-back")
        sync_api.expect(page.locator("tr#bob td").nth(2)).to_have_text("Yes")
        page.locator("tr#bob").get_by_role("button", name="Unauthorize admin…").click()
        page.click("#authorize-confirm")
        sync_api.expect(page.locator("tr#bob td").nth(2)).to_have_text("No")
        # A user who is no admin: one click, as before.
        page.locator("tr#bob").get_by_role("button", name="Authorize", exact=True).click()
        page.locator("tr#dave").get_by_role("button", name="Unauthorize", exact=True).click()
        sync_api.expect(page.locator("tr#dave td").nth(2)).to_have_text("No")
    finally:
        page.context.close()
    assert hub.login("admin")  # (asserts the login worked)


# ---- README.md's first steps, as one user walks them ---------------------

IRIS_CODE = """\
import os
import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
X, y = load_iris(return_X_y=True)
model = LogisticRegression(C=C, max_iter=1000).fit(X, y)
joblib.dump(model, os.path.join(os.environ["OUTPUT_DIR"], "model.joblib"))
print(f"C={C} accuracy={model.score(X, y):.3f}")
"""


def admins_files(hub: EmbeddedHub) -> str:
    """The admin's workspace with a notebook of theirs, iris.ipynb, and the
    terminal's screen-reader rows on (xterm draws on a canvas; the rows put
    its text in the page), as settings of theirs."""
    workspace = os.path.join(hub.data_dir, "workspaces", "admin")
    write_notebook(os.path.join(workspace, "iris.ipynb"), "C = 1.0", IRIS_CODE, "# Iris")
    settings = os.path.join(workspace, ".jupyter", "lab", "user-settings", "@jupyterlab")
    for plugin, value in (("terminal-extension/plugin", {"screenReaderMode": True}),
                          ("apputils-extension/notification", {"fetchNews": "false"})):
        os.makedirs(os.path.dirname(os.path.join(settings, plugin)), exist_ok=True)
        with open(os.path.join(settings, plugin + ".jupyterlab-settings"), "w") as f:
            json.dump(value, f)
    hub.give("admin", workspace)
    return workspace


def submit_dialog(page, mode: str = "job"):
    """The Submit dialog of the open notebook (its toolbar button), on ``mode``'s tab."""
    page.locator(".lm-TabBar-tabLabel", has_text=re.compile(r"^iris\.ipynb$")).click()
    page.locator(".jp-NotebookPanel:visible .gpuhub-SubmitButton").first.click(timeout=SLOW_MS)
    form = page.locator(".gpuhub-SubmitForm")
    sync_api.expect(form).to_be_visible()
    if mode != "job":
        form.locator(f'.gpuhub-SubmitForm-tab[data-mode="{mode}"]').click()
        sync_api.expect(form).to_have_attribute("data-mode", mode)
    return form


def submitted(page, path: str) -> dict:
    """Accept the dialog; what the server extension answered."""
    with page.expect_response(lambda r: r.request.method == "POST" and path in r.url) as posted:
        page.locator(".jp-Dialog-button.jp-mod-accept").click()
        sync_api.expect(page.locator(".gpuhub-SubmitForm")).to_have_count(0)
    assert posted.value.status == 201, posted.value.text()
    return posted.value.json()


def test_the_readme_first_steps_in_a_browser(hub, browser, tmp_path):
    """README.md, *First steps*, in order: log in, spawn with 1 GPU, `gpuhub
    ls` in a Lab terminal, submit a notebook, sweep it, a job on a share of a
    GPU, deploy its outputs, the admin panel. No API call in between: what
    each step shows is read off the page."""
    expect = sync_api.expect
    admins_files(hub)
    page = page_of(browser, hub, "admin")
    try:
        # Spawn: the card of the pool, 1 GPU.
        page.goto(f"{hub.url}/hub/spawn")
        card = page.locator('.gpuhub-profile[data-pool="default"]')
        card.locator("select").select_option("default:1")
        expect(card.locator('input[name="gpu_choice"]')).to_be_checked()
        page.click('#spawn_form button[type="submit"]')
        page.wait_for_url(re.compile(r"/user/admin/lab"), timeout=SLOW_MS)
        page.wait_for_selector(".jp-Launcher", state="visible", timeout=SLOW_MS)

        # 1. A terminal: `gpuhub ls` lists the server itself.
        page.locator(".jp-LauncherCard").filter(has_text="Terminal").first.click(timeout=SLOW_MS)
        page.locator(".jp-Terminal").first.click(timeout=SLOW_MS)
        rows = page.locator(".jp-Terminal .xterm-accessibility-tree").first
        expect(rows).to_contain_text("$", timeout=SLOW_MS)
        page.keyboard.type("gpuhub ls\n", delay=10)
        expect(rows).to_contain_text("notebook", timeout=60_000)
        text = rows.inner_text()
        assert "running" in text and "command not found" not in text, text

        # 2. Submit the notebook as a job; the Jobs panel follows it to the end.
        page.goto(f"{hub.url}/user/admin/lab/tree/iris.ipynb")
        form = submit_dialog(page)
        form.locator('input[name="gpus"]').fill("1")
        job = submitted(page, "/gpuhub/workloads")
        row = page.locator(f'.gpuhub-Job[data-job-id="{job["id"]}"]')
        expect(row).to_have_attribute("data-state", "succeeded", timeout=SLOW_MS)

        # 3. The Sweep tab: C over two values, one row, 2/2 done.
        form = submit_dialog(page, "sweep")
        form.locator('input[name="sweep-C"]').fill("0.1, 1")
        expect(form.locator(".gpuhub-SweepCount")).to_have_text("2 tasks")
        form.locator('input[name="gpus"]').fill("0")
        sweep = submitted(page, "/gpuhub/sweeps")
        sweep_row = page.locator(f'.gpuhub-Sweep[data-sweep-id="{sweep["id"]}"]')
        expect(sweep_row).to_have_attribute("data-state", "succeeded", timeout=SLOW_MS)
        expect(sweep_row.locator(".gpuhub-Sweep-progress")).to_have_text("2/2 done")

        # 4. A quarter of one GPU (the hub shares them).
        form = submit_dialog(page)
        form.locator('select[name="gpuShare"]').select_option("1/4")
        quarter = submitted(page, "/gpuhub/workloads")
        row = page.locator(f'.gpuhub-Job[data-job-id="{quarter["id"]}"]')
        expect(row).to_contain_text("1/4 GPU × default")
        expect(row).to_have_attribute("data-state", "succeeded", timeout=SLOW_MS)

        # 5. Its outputs hold a model: deploy them; the revision rolls out, then serves.
        row.get_by_role("button", name="Deploy outputs…").click()
        deploy = page.locator(".gpuhub-DeployForm")
        expect(deploy).to_be_visible()
        deploy.locator('input[name="name"]').fill("iris")
        page.locator(".jp-Dialog-button.jp-mod-accept").click()
        expect(deploy).to_have_count(0)
        dep = page.locator('.gpuhub-Deployment[data-deployment="vision/iris"]')
        state = dep.locator('.gpuhub-Revision[data-revision="1"] .gpuhub-Revision-state')
        expect(state).to_have_attribute("data-phase", "serving", timeout=SLOW_MS)
        endpoint = dep.locator(".gpuhub-Deployment-endpoint code").inner_text()
        answer = requests.post(endpoint, timeout=60, headers={
            "Authorization": f"token {hub.token('admin')}"}, json={"inputs": [
                {"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [5.1, 3.5, 1.4, 0.2]}]})
        assert answer.status_code == 200, answer.text

        # 6. GPU admin, from the hub's menu: the Queue runs the server, the job
        # and the replica of what was done above.
        page.goto(f"{hub.url}/hub/home")
        with page.expect_navigation():
            page.click("#gpuhub-admin-link")
        page.goto(f"{hub.url}/services/gpuhub/admin/queue")
        running = page.locator("#running tbody tr").filter(has_text="admin")
        expect(running.filter(has_text="notebook")).to_have_count(1)
        expect(running.filter(has_text="deployment")).to_have_count(1)
        expect(page.locator("#waiting")).to_contain_text("Nothing waits for other work.")
    except BaseException:
        shot(page, tmp_path, "first-steps-failure.png", keep=False)
        print(f"---- hub log (tail) ----\n{hub.tail(60)}")
        raise
    finally:
        page.context.close()
