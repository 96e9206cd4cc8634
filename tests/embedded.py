"""The embedded hub as a person starts it: ``gpuhub up`` (what ``make run``
runs) on its own data directory, its printed passwords, the hub's login
form. For the first-run, shutdown and doc-command tests."""
from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time

import requests

from gpuspawner.isolation.identity import cgroup_parent, hub_tag
from hub_harness import Hub, data_dir_in, free_port_block

BANNER_END = "New users sign up"


class EmbeddedHub(Hub):
    """``gpuhub up --data-dir DIR --port P [ARGS]``; stops by PID like Hub."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        # Run as root, users' accounts must reach their workspaces in it:
        # outside pytest's 0700 temporary directories (an empty directory).
        self.data_dir = data_dir_in(workdir)
        # Accounts of this hub only (deleted at stop); the hub config's own
        # cgroup parent (its data directory's tag: no other hub's), emptied at stop.
        self.account_prefix = f"t{secrets.token_hex(3)}-"
        self.cgroup_parent = cgroup_parent(hub_tag(self.data_dir))
        self.port = free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/services/gpuhub/api/v1"
        self.hub_api = f"http://127.0.0.1:{self.port + 1}/hub/api"
        self.proc = None
        self.tokens: dict[str, str] = {}
        self.passwords: dict[str, str] = {}
        self.banner = ""
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("GPUHUB_CONFIG", "GPUHUB_DATA_DIR", "GPUHUB_DB_URL")}
        self.env["GPUHUB_ACCOUNT_PREFIX"] = self.account_prefix

    def start(self, *args: str, timeout: float = 120) -> "EmbeddedHub":
        gpuhub = os.path.join(os.path.dirname(sys.executable), "gpuhub")
        command = [gpuhub] if os.path.exists(gpuhub) else [sys.executable, "-m", "gpuspawner.cli"]
        self.log = open(os.path.join(self.workdir, "hub.log"), "ab")
        start = self.log.tell()
        self.proc = subprocess.Popen([*command, "up", "--data-dir", self.data_dir,
                                      "--port", str(self.port), *args],
                                     cwd=self.workdir, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        self.banner = ""
        while BANNER_END not in self.banner:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.tail()
            time.sleep(0.2)
            with open(os.path.join(self.workdir, "hub.log"), errors="replace") as f:
                f.seek(start)
                text = f.read()
            self.banner = text[:text.index(BANNER_END) + len(BANNER_END)] \
                if BANNER_END in text else ""
        # The users this start created, with their passwords.
        self.created = dict(re.findall(r"^  (\w+)\s+(\S+)\s", self.banner, re.M))
        self.passwords.update(self.created)
        self.wait_ready(timeout)
        return self

    def stop(self) -> float:
        """SIGTERM, as Ctrl-C in the terminal would; the seconds it took."""
        took = 0.0
        if self.proc and self.proc.poll() is None:
            began = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            took = time.monotonic() - began
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.kill_jobs()
        self.kill_servers()
        self.remove_cgroups()
        self.delete_accounts()
        if getattr(self, "log", None):
            self.log.close()
        return took

    def login(self, user: str) -> requests.Session:
        """A browser-like session, logged in through the hub's form."""
        s = requests.Session()
        s.get(f"{self.url}/hub/login", timeout=10)
        r = s.post(f"{self.url}/hub/login",
                   data={"username": user, "password": self.passwords[user],
                         "_xsrf": s.cookies.get("_xsrf")}, allow_redirects=False, timeout=10)
        assert r.status_code == 302, f"login of {user} failed: {r.status_code}"
        s.headers.update({"X-XSRFToken": s.cookies.get("_xsrf"),
                          "Referer": f"{self.url}/hub/token"})
        return s

    def token(self, user: str) -> str:
        """A token as a person makes one on /hub/token."""
        if user not in self.tokens:
            r = self.login(user).post(f"{self.url}/hub/api/users/{user}/tokens",
                                      json={"note": "test", "expires_in": 3600}, timeout=10)
            assert r.status_code == 201, r.text
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]
