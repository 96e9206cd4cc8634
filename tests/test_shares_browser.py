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


def notebook_of(hub: Hub, user: str) -> dict:
    [w] = [w for w in hub.client("root-admin").get("/workloads", params={"user": user}).json()[
        "workloads"] if w["kind"] == "notebook" and w["state"] == "running"]
    return w


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
                assert "from 1/4 of a GPU" in note and "memory watched" in note
                assert "compute time-sliced (not enforced)" in note
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

                # 3. bob asks for a quarter through the REST API: it is packed onto
                # the GPU alice shares, not onto the idle one.
                r = requests.post(f"{hub.url}/hub/api/users/bob/server",
                                  json={"pool": "default", "gpu_share": "1/4"},
                                  headers={"Authorization": f"token {hub.token('bob')}"},
                                  timeout=60)
                assert r.status_code in (201, 202), r.text
                wait_for(lambda: (server_state(hub, "bob") or {}).get("ready"), SLOW_MS / 1000,
                         "bob's server to be ready")
                pids |= server_pids(hub)
                bob_w = notebook_of(hub, "bob")
                assert bob_w["gpu_share"] == 0.25
                assert bob_w["placement"] == alice_w["placement"], (bob_w, alice_w)

                # 4. The heat map: that GPU in four slots, two shares and two free.
                admin = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                admin.set_default_timeout(60_000)
                login(admin, hub, "root-admin")
                admin.goto(f"{hub.url}/services/gpuhub/admin/cluster")
                shared = admin.locator('.gpu:has(.slot.share)')
                sync_api.expect(shared).to_have_count(1)
                assert shared.locator(".slot").count() == 4
                assert shared.locator(".slot.free").count() == 2
                shares = shared.locator("li.share")
                owners = sorted(shares.locator(".owner").all_inner_texts())
                assert owners == [f"alice · notebook {alice_w['id']}",
                                  f"bob · notebook {bob_w['id']}"], owners
                for text in shares.all_inner_texts():
                    assert text.startswith("■ 1/4 ") and "/ 4.0 GiB" in text, text
                pool = admin.locator('.pool[data-pool="default"]')
                sync_api.expect(pool.locator(".count-free-slots")).to_have_text(
                    "2 free 1/4 slots on shared GPUs")
                legend = pool.locator(".sharing-note").inner_text()
                assert "GPUs shared in 4 slots of 4.0 GiB" in legend
                assert "memory watched" in legend and "compute time-sliced (not enforced)" in legend
                # The other GPU is free for whole-GPU work.
                sync_api.expect(pool.locator('.gpu[data-state="free"]')).to_have_count(1)
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
