"""The embedded default as a person starts it: `gpuhub up --demo`, then log
in through the hub's form with a printed password."""
from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time

import requests

from gpuspawner.isolation.accounts import isolating
from hub_harness import data_dir_in, free_port_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def login(url: str, user: str, password: str) -> requests.Session:
    s = requests.Session()
    s.get(f"{url}/hub/login", timeout=10)
    r = s.post(f"{url}/hub/login", data={"username": user, "password": password,
                                         "_xsrf": s.cookies.get("_xsrf")},
               allow_redirects=False, timeout=10)
    s.login_status = r.status_code
    return s


def test_gpuhub_up_demo_secure_default(tmp_path):
    port = free_port_block()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop("GPUHUB_CONFIG", None)
    # Run as root, users' accounts must reach their workspaces in it.
    data_dir = data_dir_in(str(tmp_path))
    env["GPUHUB_ACCOUNT_PREFIX"] = f"t{secrets.token_hex(3)}-"
    proc = subprocess.Popen([sys.executable, "-m", "gpuspawner.cli", "up", "--demo",
                             "--data-dir", data_dir, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True)
    lines = []
    try:
        while len(lines) < 20:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("New users sign up"):
                break
        banner = "".join(lines)
        assert f"{url}/hub/" in banner
        passwords = dict(re.findall(r"^  (\w+)\s+(\S+)\s", banner, re.M))
        assert set(passwords) == {"admin", "alice", "bob", "carol", "dave"}
        assert oct(os.stat(os.path.join(data_dir, "initial-users.json")).st_mode & 0o777) == "0o600"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/services/gpuhub/api/v1/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("hub did not come up")

        # A wrong password, and an unknown user, are refused.
        assert login(url, "alice", "not-her-password").login_status != 302
        assert login(url, "mallory", "whatever-password").login_status != 302
        # The printed password works; the session can mint a token for the CLI.
        s = login(url, "alice", passwords["alice"])
        assert s.login_status == 302
        r = s.post(f"{url}/hub/api/users/alice/tokens", json={"note": "cli"},
                   headers={"X-XSRFToken": s.cookies.get("_xsrf"), "Referer": f"{url}/hub/token"},
                   timeout=10)
        assert r.status_code == 201, r.text
        api = requests.Session()
        api.headers["Authorization"] = f"token {r.json()['token']}"
        me = api.get(f"{url}/services/gpuhub/api/v1/me", timeout=10).json()
        # the demo makes alice the lead of her team
        assert me == {"name": "alice", "teams": ["vision"], "leads": ["vision"], "admin": False,
                      "can_submit": True,
                      "workspace": os.path.join(data_dir, "workspaces", "alice")}
        teams = api.get(f"{url}/services/gpuhub/api/v1/teams", timeout=10).json()["teams"]
        assert [(t["name"], t["quotas"]["default"]["nominal"]) for t in teams] == [("vision", 2)]
        pools = api.get(f"{url}/services/gpuhub/api/v1/pools", timeout=10).json()["pools"]
        assert [(p["name"], p["capacity"]) for p in pools] == [("default", 4)]
        # Nobody can sign up and walk in: a new sign-up waits for an admin.
        s2 = requests.Session()
        s2.get(f"{url}/hub/signup", timeout=10)
        s2.post(f"{url}/hub/signup", data={"username": "eve", "signup_password": "a-long-passphrase-1",
                                           "signup_password_confirmation": "a-long-passphrase-1",
                                           "_xsrf": s2.cookies.get("_xsrf")}, timeout=10)
        assert login(url, "eve", "a-long-passphrase-1").login_status != 302
        admin = login(url, "admin", passwords["admin"])
        assert admin.login_status == 302
        page = admin.get(f"{url}/hub/authorize", timeout=10).text
        assert "eve" in page
        if isolating():
            # Out of users' reach: they pass through to their workspaces, list nothing.
            modes = {name: oct(os.stat(os.path.join(data_dir, name)).st_mode & 0o777)
                     for name in ("", "workspaces", "initial-users.json", "jupyterhub.sqlite",
                                  "gpuhub.sqlite", "spawner-token", "jupyterhub_cookie_secret")}
            assert modes == {"": "0o711", "workspaces": "0o711", "initial-users.json": "0o600",
                             "jupyterhub.sqlite": "0o600", "gpuhub.sqlite": "0o600",
                             "spawner-token": "0o600", "jupyterhub_cookie_secret": "0o600"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
