"""alice, in JupyterLab in a real browser (Debian's Chromium), opens a
terminal and tries to look into bob's workspace: Permission denied, because
her server, and so her terminal, runs as her own account (hub run as root,
as in CI). The screenshot goes to docs/screenshots/isolation-terminal.png
for docs/service.md."""
from __future__ import annotations

import json
import os
import sys

import pytest
from playwright import sync_api

from gpuspawner.isolation.accounts import isolating
from hub_harness import Hub
from test_lab_browser import hub_session, lab_page, quiet_news
from test_spawn_browser import SLOW_MS, shot

pytestmark = pytest.mark.skipif(not isolating(), reason="user accounts need root "
                                                        "(CI runs the tests as root)")


def test_alices_terminal_cannot_list_bobs_workspace(tmp_path):
    hub = Hub(str(tmp_path), groups={"team-a": ["alice"], "team-b": ["bob"]},
              teams={"a": {"quotas": {"default": {"nominal": 1}}},
                     "b": {"quotas": {"default": {"nominal": 1}}}}, gpus=2)
    workspace = os.path.join(hub.data_dir, "workspaces", "alice")
    quiet_news(workspace)
    # xterm draws on a canvas; its screen-reader rows put the text in the page.
    settings = os.path.join(workspace, ".jupyter", "lab", "user-settings", "@jupyterlab",
                            "terminal-extension", "plugin.jupyterlab-settings")
    os.makedirs(os.path.dirname(settings))
    with open(settings, "w") as f:
        json.dump({"screenReaderMode": True, "fontSize": 15}, f)
    with hub_session(hub, users=("alice",)) as pids:
        bob = hub.client("bob")
        job = bob.submit(command=[sys.executable, "-c", "open('results.txt', 'w').write('42')"],
                         gpus=0, name="bobs-results")
        assert bob.wait(job["id"], ("succeeded", "failed"), 120)["state"] == "succeeded"
        bobs = os.path.join(hub.data_dir, "workspaces", "bob")
        assert os.path.exists(os.path.join(bobs, "results.txt"))
        with lab_page(hub, "alice", pids) as page:
            page.goto(f"{hub.url}/user/alice/lab")
            # The launcher's Terminal card, as she would.
            page.locator(".jp-LauncherCard").filter(has_text="Terminal").first.click(
                timeout=SLOW_MS)
            terminal = page.locator(".jp-Terminal").first
            sync_api.expect(terminal).to_be_visible(timeout=SLOW_MS)
            terminal.click()
            rows = page.locator(".jp-Terminal .xterm-accessibility-tree").first
            sync_api.expect(rows).to_contain_text("$", timeout=SLOW_MS)  # the prompt
            page.keyboard.type(f"id -un; ls {bobs}; cat {bobs}/results.txt\n", delay=10)
            sync_api.expect(rows).to_contain_text("Permission denied", timeout=60_000)
            text = rows.inner_text()
            assert f"ls: cannot open directory '{bobs}': Permission denied" in text, text
            assert f"cat: {bobs}/results.txt: Permission denied" in text, text
            assert hub.account("alice").pw_name in text, text
            shot(page, tmp_path, "isolation-terminal.png")
