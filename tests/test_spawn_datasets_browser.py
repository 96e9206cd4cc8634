"""The spawn form's datasets in a real browser against a real hub (the
hub of tests/test_datasets_e2e.py: teams vision, nlp and bio, pools eu and
us, alice leads vision): carol (nlp) sees a checkbox for each dataset her
team may read and none other; one whose residency excludes the pool she
picked is refused on the spawn page with the reason, and nothing starts."""
from __future__ import annotations

from playwright import sync_api

from test_datasets_e2e import hub, imagenet  # noqa: F401 (fixtures)
from test_datasets_browser import page_as


def test_the_spawn_form_offers_the_teams_datasets_and_refuses_one_out_of_its_pool(
        hub, imagenet, browser):
    alice = hub.client("alice")
    folder = hub.workspace_folder("alice")
    for body in ({"name": "eu-scans", "path": folder, "pools": ["eu"], "shared_with": ["nlp"]},
                 {"name": "vision-only", "path": folder}):
        r = alice.post("/datasets", json=body)
        assert r.status_code == 201, r.text
    page = page_as(browser, hub, "carol")
    page.goto(f"{hub.url}/hub/spawn")
    boxes = page.locator('#spawn_form input[name="datasets"]')
    assert sorted(b.get_attribute("value") for b in boxes.all()) == ["eu-scans", "imagenet"]
    sync_api.expect(page.locator(".gpuhub-dataset", has_text="eu-scans")).to_contain_text(
        "only in pool eu")
    # a GPU in pool us, with a dataset that may only be read in pool eu
    page.locator('.gpuhub-profile[data-pool="us"] input[type="radio"]').check()
    page.locator('#spawn_form input[name="datasets"][value="eu-scans"]').check()
    page.click('#spawn_form button[type="submit"]')
    sync_api.expect(page.locator("body")).to_contain_text(
        "dataset eu-scans may only be read in pool eu")
    assert hub.client("root-admin").get("/workloads", params={
        "user": "carol", "kind": "notebook", "state": ["queued", "running"]}).json()["workloads"] == []
    # the form is shown again, to pick otherwise
    assert page.locator('#spawn_form input[name="datasets"]').count() == 2
