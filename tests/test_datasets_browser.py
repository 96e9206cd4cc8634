"""The admin panel's Datasets page in a real browser against a real hub (the
hub of tests/test_datasets_e2e.py: teams vision, nlp and bio, pools eu and
us, alice leads vision): an admin sees every dataset with its team, size,
shares and residency; alice, a lead, sees it too; carol, who leads nothing,
is refused. Its screenshot is docs/screenshots/admin-datasets.png."""
from __future__ import annotations

from hub_harness import wait_for
from test_datasets_e2e import hub, imagenet  # noqa: F401 (fixtures)
from test_spawn_browser import login, shot


def page_as(browser, hub, user: str):
    page = browser.new_context(viewport={"width": 1360, "height": 800}).new_page()
    page.set_default_timeout(30_000)
    login(page, hub, user)
    return page


def test_the_datasets_page_lists_team_size_shares_and_residency(hub, imagenet, browser,
                                                                  tmp_path):
    alice = hub.client("alice")
    r = alice.post("/datasets", json={"name": "census-eu", "path": hub.workspace_folder("alice"),
                                      "pools": ["eu"]})
    assert r.status_code == 201, r.text
    # measured as team spaces are (every 0.5 s on this hub)
    wait_for(lambda: all(d["size_bytes"] is not None
                         for d in alice.get("/datasets").json()["datasets"]),
             "the datasets to be measured", 30)
    page = page_as(browser, hub, "root-admin")
    page.goto(f"{hub.url}/services/gpuhub/admin/datasets")
    assert page.locator("#tab-datasets").get_attribute("class").endswith("active")
    row = page.locator('tr[data-dataset="imagenet"]')
    assert row.locator("td").nth(1).inner_text() == "vision"
    assert row.locator(".shares").inner_text().split() == ["nlp"]
    assert row.locator(".residency").inner_text() == "any pool"
    assert "KiB" in row.locator(".size").inner_text() and "files" in row.locator(".size").inner_text()
    census = page.locator('tr[data-dataset="census-eu"]')
    assert census.locator(".residency").inner_text() == "eu"
    assert census.locator(".shares").inner_text() == "its team only"
    shot(page, tmp_path, "admin-datasets.png")

    lead = page_as(browser, hub, "alice")
    lead.goto(f"{hub.url}/services/gpuhub/admin/datasets")
    assert "Datasets" in [t.inner_text() for t in lead.locator(".nav-tabs a.nav-link").all()]
    assert lead.locator('tr[data-dataset="imagenet"]').is_visible()
    carol = page_as(browser, hub, "carol")
    assert carol.goto(f"{hub.url}/services/gpuhub/admin/datasets").status == 403


def test_a_lead_registers_a_dataset_through_the_form_and_sees_a_refusal_inline(hub, imagenet,
                                                                                browser):
    """alice fills the form: a folder outside what she may register is
    refused beside the field, with what she typed kept; the same form with
    her own folder registers the dataset, listed at once with its shares
    and residency (pool and node label), as the API shows it. A malformed
    node label is refused beside its field. She may register for her team
    only; an admin for any."""
    page = page_as(browser, hub, "alice")
    page.goto(f"{hub.url}/services/gpuhub/admin/datasets")
    form = page.locator("#create-dataset")
    assert [o.inner_text() for o in form.locator("#dataset-team option").all()] == ["vision"]
    form.locator("#dataset-name").fill("scans-eu")
    form.locator("#dataset-path").fill("/etc")
    form.locator("#dataset-node-labels").fill("region=eu")
    form.locator('#dataset-pools input[value="eu"]').check()
    form.locator('#dataset-shares input[value="nlp"]').check()
    form.locator("#create-dataset-button").click()
    refusal = page.locator('#create-dataset .refusal[data-field="path"]')
    assert "'/etc' is not a folder in your workspace, team vision's space" in refusal.inner_text()
    assert page.locator("#dataset-path").get_attribute("class").endswith("is-invalid")
    assert page.locator("#dataset-node-labels").input_value() == "region=eu"  # kept as typed
    assert page.locator('#dataset-pools input[value="eu"]').is_checked()
    assert page.locator('tr[data-dataset="scans-eu"]').count() == 0

    page.locator("#dataset-path").fill(hub.workspace_folder("alice"))
    page.locator("#create-dataset-button").click()
    assert "dataset scans-eu registered for team vision" in page.locator("#done").inner_text()
    row = page.locator('tr[data-dataset="scans-eu"]')
    assert row.locator(".shares").inner_text().split() == ["nlp"]
    assert [b.inner_text() for b in row.locator(".residency .badge").all()] == ["eu", "region=eu"]
    made = hub.client("alice").get("/datasets/scans-eu").json()
    assert (made["team"], made["pools"], made["node_labels"]) == ("vision", ["eu"],
                                                                   {"region": "eu"})

    page.locator("#dataset-name").fill("scans-2")
    page.locator("#dataset-path").fill(hub.workspace_folder("alice"))
    page.locator("#dataset-node-labels").fill("region")
    page.locator("#create-dataset-button").click()
    assert "'region': say KEY=VALUE" in page.locator(
        '#create-dataset .refusal[data-field="node_labels"]').inner_text()
    assert hub.client("alice").get("/datasets/scans-2").status_code == 404

    admin = page_as(browser, hub, "root-admin")
    admin.goto(f"{hub.url}/services/gpuhub/admin/datasets")
    owners = {o.inner_text() for o in admin.locator("#dataset-team option").all()}
    assert {"bio", "nlp", "vision"} <= owners
