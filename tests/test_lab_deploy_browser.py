"""Deploying a model from JupyterLab in a real browser: alice logs in to a
real JupyterHub, where two jobs trained the example iris model into her
files. She deploys the first from the file browser's context menu (the name
checked as she types), sees it ready in the Deployments panel, and real
inference requests move its request count and its rps chart. She deploys
the second job's outputs from the Jobs panel as a 25 % canary of the same
deployment, sees the split, promotes it, rolls back, lets it scale to zero
when idle (the dialog will not take an idle time too short), and deletes
the deployment.

Chromium is Debian's (/usr/bin/chromium). Screenshots of the dialog and the
panel are kept in docs/screenshots/lab-deploy*.png for docs/lab-extension.md.
"""
from __future__ import annotations

import os
import sys
import time

import requests
from playwright import sync_api

from hub_harness import Hub
from test_lab_browser import dialog_form, hub_session, lab_page, quiet_news
from test_spawn_browser import SLOW_MS, shot, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "examples", "serving", "iris", "train.py")
IRIS = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                    "data": [5.1, 3.5, 1.4, 0.2]}]}


def train(hub: Hub, name: str, args: list[str], env: dict | None = None) -> None:
    """The example trainer as alice's job (in her workspace, as the lab runs jobs)."""
    alice = hub.client("alice")
    job = alice.submit(name=name, command=[sys.executable, TRAIN, *args], gpus=0, env=env or {})
    done = alice.wait(job["id"], ("succeeded", "failed"), 120)
    assert done["state"] == "succeeded", done


def infer(hub: Hub, times: int, pause: float = 0.0) -> list[str]:
    """Inference requests as a client sends them (``pause`` seconds apart);
    the revisions that answered."""
    url = f"{hub.url}/services/gpuhub/endpoints/a/iris/v2/models/iris/infer"
    headers = {"Authorization": f"token {hub.token('alice')}"}
    answered = []
    for _ in range(times):
        r = requests.post(url, json=IRIS, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        answered.append(r.headers["X-GpuHub-Revision"])
        time.sleep(pause)
    return answered


def widen_left_sidebar(page, width: int) -> None:
    """Drag the sidebar's edge, as a user does to see the charts side by side."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(width, y, steps=5)
    page.mouse.up()


def test_deploy_from_the_file_browser_watch_it_serve_canary_promote_rollback(tmp_path):
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"]},
              teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}}, gpus=4)
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    quiet_news(workspace)
    with hub_session(hub) as pids:
        # v1 into models/iris-v1; v2 as a job submitted from the lab would write
        # it: into its $OUTPUT_DIR, which the Jobs panel offers to deploy.
        train(hub, "train-iris-v1", ["models/iris-v1"])
        train(hub, "train-iris-v2", ["--C", "0.05"],
              env={"OUTPUT_DIR": os.path.join(workspace, "outputs", "iris-v2")})
        with lab_page(hub, "alice", pids) as page:
            page.goto(f"{hub.url}/user/alice/lab/tree/models")
            expect = sync_api.expect

            # 1. The file browser's context menu on the model's folder.
            folder = page.locator(".jp-DirListing-item", has_text="iris-v1").first
            folder.click(button="right", timeout=SLOW_MS)
            page.locator(".lm-Menu-item", has_text="Deploy Model").click()
            form = dialog_form(page, ".gpuhub-DeployForm")
            assert form.locator('input[name="modelDir"]').input_value() == "models/iris-v1"
            assert form.locator('select[name="team"]').input_value() == "a"
            name = form.locator('input[name="name"]')
            assert name.input_value() == "iris-v1"
            # The name is checked as it is typed, with the service's rule.
            name.fill("Iris")
            problem = form.locator('[data-field="name"] .gpuhub-Field-problem')
            expect(problem).to_contain_text("lowercase letters, digits and '-'")
            name.fill("iris")
            expect(problem).to_have_count(0)
            expect(form.locator(".gpuhub-DeployForm-revision")).to_have_count(0)
            page.locator(".jp-Dialog-button.jp-mod-accept").click()
            expect(form).to_have_count(0)

            # 2. The Deployments panel opens; revision 1 gets ready.
            card = page.locator('.gpuhub-Deployment[data-deployment="a/iris"]')
            expect(card).to_be_visible()
            expect(card.locator(".gpuhub-Deployment-endpoint code")).to_have_text(
                f"{hub.url}/services/gpuhub/endpoints/a/iris/v2/models/iris/infer")
            r1 = card.locator('.gpuhub-Revision[data-revision="1"]')
            expect(r1).to_have_attribute("data-ready", "1", timeout=SLOW_MS)
            expect(r1.locator(".gpuhub-Revision-model")).to_have_text("models/iris-v1")
            expect(card.locator(".gpuhub-Traffic-segment")).to_have_text(["r1 100%"])

            # 3. Requests move its count and its rps chart.
            # (over some 10 s: the chart's points are 5 s apart)
            assert infer(hub, 20, pause=0.5) == ["1"] * 20
            expect(r1.locator(".gpuhub-Revision-requests")).to_have_text("20 req",
                                                                         timeout=30_000)
            rps_chart = r1.locator('.gpuhub-Spark[data-series="rps"] svg')
            wait_for(lambda: float(rps_chart.get_attribute("data-peak") or 0) > 0, 30,
                     "the rps chart to show the requests")
            assert r1.locator('.gpuhub-Spark[data-series="rps"] path').get_attribute("d")

            # 4. The second model, from the Jobs panel, as a canary of "iris".
            page.locator(".jp-SideBar [data-id='gpuhub-jobs']").click()
            # (v1's job wrote its model elsewhere: nothing in its folders to deploy)
            v1_job = page.locator('.gpuhub-Job[data-state="succeeded"]').filter(
                has_text="train-iris-v1")
            expect(v1_job.get_by_role("button", name="Resubmit")).to_have_count(1)
            expect(v1_job.get_by_role("button", name="Deploy outputs…")).to_have_count(0)
            job = page.locator('.gpuhub-Job[data-state="succeeded"]').filter(
                has_text="train-iris-v2")
            job.get_by_role("button", name="Deploy outputs…").click()
            form = dialog_form(page, ".gpuhub-DeployForm")
            assert form.locator('input[name="modelDir"]').input_value() == "outputs/iris-v2"
            form.locator('input[name="name"]').fill("iris")
            revision = form.locator(".gpuhub-DeployForm-revision")
            expect(revision).to_contain_text("a/iris exists: this is its revision 2")
            assert revision.locator('input[name="asCanary"]').is_checked()
            revision.locator('input[name="canaryPercent"]').fill("25")
            revision.locator('input[name="rollbackErrorPercent"]').fill("50")
            shot(page, tmp_path, "lab-deploy-dialog.png")
            page.locator(".jp-Dialog-button.jp-mod-accept").click()
            expect(form).to_have_count(0)
            expect(card.locator(".gpuhub-Traffic-segment")).to_have_text(["r1 75%", "r2 25%"])
            r2 = card.locator('.gpuhub-Revision[data-revision="2"]')
            expect(r2.locator(".gpuhub-Revision-role")).to_have_text("canary")
            expect(r2).to_have_attribute("data-ready", "1", timeout=SLOW_MS)
            assert sorted(infer(hub, 8, pause=0.5)) == ["1"] * 6 + ["2"] * 2
            expect(r2.locator(".gpuhub-Revision-requests")).to_have_text("2 req",
                                                                         timeout=30_000)
            # the endpoint is whole in the panel, wrapped rather than cut
            assert card.locator(".gpuhub-Deployment-endpoint code").evaluate(
                "c => c.scrollWidth <= c.clientWidth")
            widen_left_sidebar(page, 560)
            shot(page, tmp_path, "lab-deployments-panel.png")

            # 4b. The deployment in a tab: full URL, full-size charts, every revision.
            card.locator(".gpuhub-Deployment-name").click()
            tab = page.locator("#gpuhub-deployment-a-iris")
            expect(tab).to_be_visible()
            url = f"{hub.url}/services/gpuhub/endpoints/a/iris/v2/models/iris/infer"
            endpoint = tab.locator(".gpuhub-DeploymentDetail-endpoint code")
            expect(endpoint).to_have_text(url)
            assert endpoint.evaluate("c => c.scrollWidth <= c.clientWidth")
            expect(tab.locator(".gpuhub-DeploymentDetail-endpoint button")).to_have_text("Copy")
            expect(tab.locator("tr[data-revision]")).to_have_count(2)
            expect(tab.locator('tr[data-revision="2"]')).to_contain_text("canary")
            rps = tab.locator('.gpuhub-DeploymentDetail-charts[data-revision="1"] '
                              '.gpuhub-Spark[data-series="rps"] svg')
            box = rps.bounding_box()
            assert box["height"] >= 90 and box["width"] >= 200, box
            wait_for(lambda: float(rps.get_attribute("data-peak") or 0) > 0, 30,
                     "the tab's rps chart to show the requests")
            shot(page, tmp_path, "lab-deployment-tab.png")

            # 5. Promote the canary (from the tab), then roll back to revision 1.
            tab.locator('[data-action="promote"]').click()
            expect(tab.locator('tr[data-revision="2"]')).to_contain_text("stable")
            expect(card.locator(".gpuhub-Traffic-segment")).to_have_text(["r2 100%"])
            expect(card.locator('[data-action="promote"]')).to_be_disabled()
            card.locator('[data-action="rollback"]').click()
            expect(card.locator(".gpuhub-Traffic-segment")).to_have_text(["r1 100%"])
            expect(card.locator(".gpuhub-Deployment-message")).to_contain_text(
                "rolled back to revision 1")
            # (revision 1 may have been scaled down while revision 2 had the traffic)
            expect(r1).to_have_attribute("data-ready", "1", timeout=SLOW_MS)
            wait_for(lambda: set(infer(hub, 4)) == {"1"}, 30, "revision 1 to answer alone")

            # 5b. A revision that waits for a job (`gpuhub deploy --after`): its
            # state says for what; cancelled from its row, revision 1 serves on.
            alice = hub.client("alice")
            retrain = alice.submit(name="retrain", command=["sleep", "300"], gpus=0)
            r = alice.post("/deployments", json={"name": "iris", "model_dir": "models/iris-v3",
                                                 "after": [{"id": retrain["id"]}]})
            assert r.status_code == 201, r.text
            r3 = card.locator('.gpuhub-Revision[data-revision="3"]')
            state = r3.locator(".gpuhub-Revision-state")
            expect(state).to_have_attribute("data-phase", "waiting", timeout=30_000)
            expect(state).to_contain_text(f"waiting for {retrain['id']} (ok)")
            expect(r1.locator(".gpuhub-Revision-state")).to_have_attribute("data-phase", "serving")
            shot(page, tmp_path, "lab-deploy-waiting.png")
            r3.get_by_role("button", name="Cancel revision").click()
            page.locator(".jp-Dialog-button.jp-mod-warn").click()
            expect(state).to_have_attribute("data-phase", "cancelled")
            expect(state).to_have_text("cancelled by alice")
            expect(r3.get_by_role("button", name="Cancel revision")).to_have_count(0)
            expect(card.locator(".gpuhub-Deployment-message")).to_have_text(
                "revision 3 cancelled by alice; serving revision 1 (100%) as before")
            expect(card.locator(".gpuhub-Traffic-segment")).to_have_text(["r1 100%"])
            assert set(infer(hub, 2)) == {"1"}
            assert alice.workload(retrain["id"])["state"] == "running"  # the job runs on
            alice.post(f"/workloads/{retrain['id']}/cancel")

            # 6. Scale to zero when idle: the dialog will not apply an idle
            # time under 10 s; then the service takes 600 s.
            card.locator('[data-action="scale"]').click()
            apply = page.locator(".jp-Dialog-button.jp-mod-accept")
            page.locator('.gpuhub-DeploymentDialog input[name="min"]').fill("0")
            page.locator('.gpuhub-DeploymentDialog input[name="idle"]').fill("5")
            expect(apply).to_be_disabled()
            page.locator('.gpuhub-DeploymentDialog input[name="idle"]').fill("600")
            expect(apply).to_be_enabled()
            apply.click()
            expect(card).to_contain_text("0–1 replicas")
            d = hub.client("alice").get("/deployments/a/iris").json()
            assert (d["min_replicas"], d["scale_to_zero_after"]) == (0, 600)

            # 7. The palette opens the dialog too; then delete, confirmed.
            page.keyboard.press("Control+Shift+C")
            page.keyboard.type("Deploy Model")
            page.keyboard.press("Enter")
            expect(form).to_be_visible()
            page.locator(".jp-Dialog-button.jp-mod-reject").click()
            card.locator('[data-action="delete"]').click()
            page.locator(".jp-Dialog-button.jp-mod-warn").click()
            expect(card).to_have_count(0)
            expect(page.locator(".gpuhub-DeploymentsPanel")).to_contain_text(
                "No deployments yet")
            assert hub.client("alice").get("/deployments").json()["deployments"] == []
