"""Shares of one GPU in a real browser: in a pool whose GPUs are split in
four (GpuHubService.gpu_sharing), alice picks "1/4" on the spawn form and
lands in JupyterLab; bob asks for a quarter through the hub's REST API; the
admin panel's heat map draws the GPU they share split into its four slots,
each share with its owner and memory, the free ones empty, and says how
shares are enforced; alice's home page shows her share and her team's use
in GPU units.

One hub (tests/hub_harness.py) with two fake GPUs of 16 GiB (a quarter is
4.0 GiB). Screenshots of the form and the heat map are kept in
docs/screenshots/ (docs/spawners.md, docs/admin-panel.md).
"""
from __future__ import annotations

import os
import re

import requests
from playwright import sync_api

from hub_harness import Hub
from test_spawn_browser import (CHROMIUM, CHROMIUM_ARGS, SLOW_MS, kill_leftover_servers, login,
                                server_pids, server_state, shot, stop_servers, wait_for)

GROUPS = {"team-a": ["alice", "bob"]}
# One GPU of nominal quota: the two quarters (0.5 GPU) fit it.
TEAMS = {"a": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 0}}}}
SHARING = 'c.GpuHubService.gpu_sharing = {"default": {"share_units": 4}}\n'


def workloads_of(hub: Hub, user: str) -> list[dict]:
    """The user's notebook workloads (state, reason, share, placement)."""
    return [w for w in hub.client("root-admin").get("/workloads", params={"user": user}).json()[
        "workloads"] if w["kind"] == "notebook"]


def notebook_of(hub: Hub, user: str) -> dict:
    """The user's running notebook workload, with its placement."""
    [w] = [w for w in workloads_of(hub, user) if w["state"] == "running"]
    return hub.client("root-admin").get(f"/workloads/{w['id']}").json()


def check_heat_map(page, hub: Hub, owners: dict[str, str]) -> None:
    """The cluster page draws one GPU in four slots with a quarter per owner
    (user -> workload id), the rest free and empty, and says how shares are
    enforced; the other GPU is free."""
    page.goto(f"{hub.url}/services/gpuhub/admin/cluster")
    shared = page.locator(".gpu:has(.slot.share)")
    sync_api.expect(shared).to_have_count(1)
    sync_api.expect(shared.locator(".slot.share")).to_have_count(len(owners))
    assert shared.locator(".slot").count() == 4
    assert shared.locator(".slot.free").count() == 4 - len(owners)
    shares = shared.locator("li.share")
    assert sorted(shares.locator(".owner").all_inner_texts()) == \
        [f"{user} · notebook {wid}" for user, wid in sorted(owners.items())]
    for text in shares.all_inner_texts():
        # Memory used ("–" where NVML has no per-process figure) of a 4.0 GiB limit.
        assert re.fullmatch(r"\u25a0 1/4 \S+ · notebook \S+ · (–|\d+\.\d) / 4\.0 GiB( · \d+%)?",
                            text), text
    sync_api.expect(shared.locator(".share-compute")).to_contain_text("compute time-sliced")
    pool = page.locator('.pool[data-pool="default"]')
    sync_api.expect(pool.locator(".count-free-slots")).to_have_text(
        f"{4 - len(owners)} free 1/4 slots on shared GPUs")
    legend = pool.locator(".sharing-note").inner_text()
    assert "GPUs shared in 4 slots of 4.0 GiB" in legend
    assert "memory watched" in legend and "compute time-sliced" in legend
    sync_api.expect(pool.locator('.gpu[data-state="free"]')).to_have_count(1)


def test_a_quarter_gpu_from_the_form_on_the_heat_map(tmp_path):
    assert os.path.exists(CHROMIUM), f"no Chromium at {CHROMIUM}: `make test` installs it"
    hub = Hub(str(tmp_path), groups=GROUPS, teams=TEAMS, gpus=2, extra_service_config=SHARING)
    pids: set[int] = set()
    try:
        hub.start()
        hub.token("bob")  # creates bob in the hub, in his team's group
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.set_default_timeout(60_000)
                context.set_default_navigation_timeout(SLOW_MS)
                page = context.new_page()

                # 1. The form offers quarters, halves and three quarters before the whole
                # GPU, with their memory, and says memory is watched, compute time-sliced.
                login(page, hub, "alice")
                page.goto(f"{hub.url}/hub/spawn")
                card = page.locator('.gpuhub-profile[data-pool="default"]')
                options = card.locator("select option")
                assert options.evaluate_all("os => os.map(o => o.value)") == \
                    ["default:1/4", "default:1/2", "default:3/4", "default:1"]
                assert options.first.inner_text() == "1/4 Fake GPU · 4.0 GiB"
                note = card.locator(".gpuhub-sharing").inner_text()
                # The service's labels for the pool (no MPS daemon here).
                assert "from 1/4 of a GPU" in note and "memory watched" in note
                assert "compute time-sliced" in note and "advisory" in note
                shot(page, tmp_path, "spawn-form-shares.png")

                # 2. alice picks a quarter and lands in JupyterLab on it.
                page.select_option('.gpuhub-profile[data-pool="default"] select', "default:1/4")
                assert page.locator('input[name="gpu_choice"][value="default:1/4"]').is_checked()
                page.click('#spawn_form button[type="submit"]')
                page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=SLOW_MS)
                page.wait_for_selector("#jp-main-dock-panel", state="visible", timeout=SLOW_MS)
                assert (server_state(hub, "alice") or {}).get("ready")
                pids |= server_pids(hub)
                alice_w = notebook_of(hub, "alice")
                assert (alice_w["gpus"], alice_w["gpu_share"]) == (1, 0.25)

                # 3. The heat map: that GPU in four slots, alice's quarter and three free;
                # the other GPU free for whole-GPU work; how shares are enforced.
                admin = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                admin.set_default_timeout(60_000)
                login(admin, hub, "root-admin")
                check_heat_map(admin, hub, {"alice": alice_w["id"]})
                shot(admin, tmp_path, "admin-heatmap-shares.png")

                # 4. bob asks for a quarter through the REST API: it is packed onto the
                # GPU alice shares, not onto the idle one, and the heat map shows both.
                r = requests.post(f"{hub.url}/hub/api/users/bob/server",
                                  json={"pool": "default", "gpu_share": "1/4"},
                                  headers={"Authorization": f"token {hub.token('bob')}"},
                                  timeout=60)
                assert r.status_code in (201, 202), r.text
                try:
                    wait_for(lambda: (server_state(hub, "bob") or {}).get("ready"),
                             SLOW_MS / 1000, "bob's server to be ready")
                except AssertionError as e:  # say why it waits
                    raise AssertionError(f"{e}; bob's notebook workloads: "
                                         f"{workloads_of(hub, 'bob')}") from None
                pids |= server_pids(hub)
                bob_w = notebook_of(hub, "bob")
                assert bob_w["gpu_share"] == 0.25
                assert bob_w["placement"] == alice_w["placement"], (bob_w, alice_w)
                check_heat_map(admin, hub, {"alice": alice_w["id"], "bob": bob_w["id"]})
                shot(admin, tmp_path, "admin-heatmap-shares.png")

                # 5. alice's home page: her share, and her team's use in GPU units.
                page.goto(f"{hub.url}/hub/home")
                glance = page.frame_locator("#gpuhub-glance-frame")
                sync_api.expect(glance.locator(f'#my-workloads tr[data-id="{alice_w["id"]}"]')
                                ).to_contain_text("1/4 × default", timeout=SLOW_MS)
                sync_api.expect(glance.locator("#my-gpus")).to_have_text("0.25")
                sync_api.expect(glance.locator("#my-teams tbody tr").first.locator("td").nth(2)
                                ).to_have_text("0.5")
                context.close()
            finally:
                browser.close()
    except BaseException:
        if hub.proc is not None:
            print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        if hub.proc is not None and hub.proc.poll() is None:
            stop_servers(hub, ("alice", "bob"))
        hub.stop()
        kill_leftover_servers(hub, pids)
